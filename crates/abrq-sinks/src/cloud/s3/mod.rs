//! The `s3` engine (AWS S3 and S3-compatible stores): the object path over
//! an object_store client (`cloud/store/`), built from `config.rs`.

pub mod config;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;
use object_store::aws::AmazonS3Builder;

use super::store::http::AnswerConnector;
use super::store::{client_options, retry_config, StoreTransport};
use crate::keys::BuildError;
use crate::object::ObjectDestination;

pub use config::S3Settings;

pub type S3Destination = ObjectDestination<StoreTransport>;

/// Validates without I/O; the client connects on first use.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let s = S3Settings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    let object = s.object.settings(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(store(cfg, &s)?, object)))
}

/// The bucket `cfg` names, as a transport.
pub fn transport(cfg: &DestinationConfig) -> Result<StoreTransport, BuildError> {
    let s = S3Settings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    store(cfg, &s)
}

fn store(cfg: &DestinationConfig, s: &S3Settings) -> Result<StoreTransport, BuildError> {
    super::install_crypto_provider();
    let mut b = match &s.keys {
        None => AmazonS3Builder::from_env(),
        Some((id, key)) => AmazonS3Builder::new()
            .with_access_key_id(id)
            .with_secret_access_key(key.expose()),
    };
    b = b.with_bucket_name(&s.bucket);
    if let Some(region) = &s.region {
        b = b.with_region(region);
    }
    let mut allow_http = false;
    if let Some((url, http)) = &s.endpoint {
        allow_http = *http;
        // Path-style (`{endpoint}/{bucket}/{key}`): what S3-compatible
        // stores and emulators serve without wildcard DNS.
        b = b
            .with_endpoint(url)
            .with_virtual_hosted_style_request(false);
    }
    let store = b
        .with_client_options(client_options(allow_http))
        .with_retry(retry_config())
        .with_http_connector(AnswerConnector)
        .build()
        .map_err(|e| BuildError::invalid(cfg, e.to_string()))?;
    Ok(StoreTransport::new("s3", Arc::new(store)))
}
