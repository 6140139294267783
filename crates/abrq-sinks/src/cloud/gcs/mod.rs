//! The `gcs` engine, over GCS's JSON API. Connection fields: `host`
//! endpoint URL (empty: Google's), `database` bucket, `password` a
//! service-account key JSON (empty: anonymous, for emulators).

pub mod errors;
mod transport;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;
use gcloud_storage::client::google_cloud_auth::credentials::CredentialsFile;

use super::{endpoint, invalid, required, secret};
use crate::object::{ObjectDestination, ObjectSettings};
use crate::BuildError;

pub use transport::GcsTransport;

pub type GcsDestination = ObjectDestination<GcsTransport>;

const GOOGLE_ENDPOINT: &str = "https://storage.googleapis.com";

/// Validates without I/O (the key is parsed, not used); the client is made
/// on first use, since setting up credentials may fetch a token.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let settings = ObjectSettings::from_config(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(transport(cfg)?, settings)))
}

/// The bucket `cfg` names, as a transport.
pub fn transport(cfg: &DestinationConfig) -> Result<GcsTransport, BuildError> {
    let bucket = required(cfg, &cfg.database, "database (the bucket)")?;
    let url = endpoint(cfg)?.map_or(GOOGLE_ENDPOINT, |(url, _)| url);
    let key = secret(&cfg.password);
    if let Some(json) = key {
        // Only the position: serde's message could quote part of the key.
        if let Err(e) = serde_json::from_str::<CredentialsFile>(json) {
            return Err(invalid(
                cfg,
                format!(
                    "password must be a service-account key JSON or empty (line {}, column {})",
                    e.line(),
                    e.column()
                ),
            ));
        }
    }
    Ok(GcsTransport::new(
        bucket,
        url.trim_end_matches('/'),
        key.map(str::to_string),
    ))
}
