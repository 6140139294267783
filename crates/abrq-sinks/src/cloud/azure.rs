//! The `azure_blob` engine. Connection fields: `host` blob endpoint URL
//! (empty: the account's own, `https://{account}.blob.core.windows.net`;
//! for Azurite `http://127.0.0.1:10000/{account}`), `database` container,
//! `username` storage account name, `password` account key. With no key the
//! ambient Azure credentials (environment, managed identity) are used.

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;
use object_store::azure::MicrosoftAzureBuilder;

use super::store::http::AnswerConnector;
use super::store::{client_options, retry_config, StoreTransport};
use super::{endpoint, invalid, required, secret};
use crate::object::{ObjectDestination, ObjectSettings};
use crate::BuildError;

pub type AzureDestination = ObjectDestination<StoreTransport>;

/// Validates without I/O; the client connects on first use.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let settings = ObjectSettings::from_config(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(transport(cfg)?, settings)))
}

/// The container `cfg` names, as a transport.
pub fn transport(cfg: &DestinationConfig) -> Result<StoreTransport, BuildError> {
    let container = required(cfg, &cfg.database, "database (the container)")?;
    let account = required(cfg, &cfg.username, "username (the storage account name)")?;
    let mut b = match secret(&cfg.password) {
        Some(key) => MicrosoftAzureBuilder::new().with_access_key(key),
        None => MicrosoftAzureBuilder::from_env(),
    };
    b = b.with_account(account).with_container_name(container);
    let mut allow_http = false;
    if let Some((url, http)) = endpoint(cfg)? {
        allow_http = http;
        b = b.with_endpoint(url.trim_end_matches('/').to_string());
    }
    let store = b
        .with_client_options(client_options(allow_http))
        .with_retry(retry_config())
        .with_http_connector(AnswerConnector)
        .build()
        .map_err(|e| invalid(cfg, e.to_string()))?;
    Ok(StoreTransport::new("azure_blob", Arc::new(store)))
}
