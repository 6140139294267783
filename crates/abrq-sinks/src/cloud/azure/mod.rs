//! The `azure_blob` engine: the object path over an object_store client
//! (`cloud/store/`), built from `config.rs`.

pub mod config;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;
use object_store::azure::MicrosoftAzureBuilder;

use super::store::http::AnswerConnector;
use super::store::{client_options, retry_config, StoreTransport};
use crate::keys::BuildError;
use crate::object::ObjectDestination;

pub use config::AzureSettings;

pub type AzureDestination = ObjectDestination<StoreTransport>;

/// Validates without I/O; the client connects on first use.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let s = AzureSettings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    let object = s.object.settings(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(store(cfg, &s)?, object)))
}

/// The container `cfg` names, as a transport.
pub fn transport(cfg: &DestinationConfig) -> Result<StoreTransport, BuildError> {
    let s = AzureSettings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    store(cfg, &s)
}

fn store(cfg: &DestinationConfig, s: &AzureSettings) -> Result<StoreTransport, BuildError> {
    super::install_crypto_provider();
    let mut b = match &s.key {
        Some(key) => MicrosoftAzureBuilder::new().with_access_key(key.expose()),
        None => MicrosoftAzureBuilder::from_env(),
    };
    b = b.with_account(&s.account).with_container_name(&s.container);
    let mut allow_http = false;
    if let Some((url, http)) = &s.endpoint {
        allow_http = *http;
        b = b.with_endpoint(url.trim_end_matches('/').to_string());
    }
    let store = b
        .with_client_options(client_options(allow_http))
        .with_retry(retry_config())
        .with_http_connector(AnswerConnector)
        .build()
        .map_err(|e| BuildError::invalid(cfg, e.to_string()))?;
    Ok(StoreTransport::new("azure_blob", Arc::new(store)))
}
