//! The `gcs` engine, over GCS's JSON API: the object path over its own
//! transport (`transport.rs`), built from `config.rs`.

pub mod config;
pub mod errors;
mod transport;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

use crate::keys::BuildError;
use crate::object::ObjectDestination;

pub use config::GcsSettings;
pub use transport::GcsTransport;

pub type GcsDestination = ObjectDestination<GcsTransport>;

/// Validates without I/O (the key is parsed, not used); the client is made
/// on first use, since setting up credentials may fetch a token.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let s = GcsSettings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    let object = s.object.settings(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(
        GcsTransport::from_settings(&s),
        object,
    )))
}

/// The bucket `cfg` names, as a transport.
pub fn transport(cfg: &DestinationConfig) -> Result<GcsTransport, BuildError> {
    let s = GcsSettings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    Ok(GcsTransport::from_settings(&s))
}
