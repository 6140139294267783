//! The `s3` engine (AWS S3 and S3-compatible stores). Connection fields:
//! `host` endpoint URL (empty: AWS), `database` bucket, `username` access
//! key id, `password` secret access key, `region`. With no keys at all the
//! ambient AWS credentials (environment, instance profile) are used.

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;
use object_store::aws::AmazonS3Builder;

use super::store::http::AnswerConnector;
use super::store::{client_options, retry_config, StoreTransport};
use super::{endpoint, field, invalid, required, secret};
use crate::object::{ObjectDestination, ObjectSettings};
use crate::BuildError;

pub type S3Destination = ObjectDestination<StoreTransport>;

/// Validates without I/O; the client connects on first use.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let settings = ObjectSettings::from_config(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(transport(cfg)?, settings)))
}

/// The bucket `cfg` names, as a transport.
pub fn transport(cfg: &DestinationConfig) -> Result<StoreTransport, BuildError> {
    let bucket = required(cfg, &cfg.database, "database (the bucket)")?;
    let mut b = match (field(&cfg.username), secret(&cfg.password)) {
        (None, None) => AmazonS3Builder::from_env(),
        (Some(id), Some(key)) => AmazonS3Builder::new()
            .with_access_key_id(id)
            .with_secret_access_key(key),
        _ => {
            return Err(invalid(
                cfg,
                "username (access key id) and password (secret access key) are set together or not at all",
            ))
        }
    };
    b = b.with_bucket_name(bucket);
    if let Some(region) = field(&cfg.region) {
        b = b.with_region(region);
    }
    let mut allow_http = false;
    if let Some((url, http)) = endpoint(cfg)? {
        allow_http = http;
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
        .map_err(|e| invalid(cfg, e.to_string()))?;
    Ok(StoreTransport::new("s3", Arc::new(store)))
}
