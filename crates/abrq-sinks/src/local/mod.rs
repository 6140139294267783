//! The `local` engine: objects as files under a base directory (config
//! `database`). Everything but the transport is the shared object path.

pub mod config;
pub mod errors;
mod transport;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

use crate::keys::BuildError;
use crate::object::ObjectDestination;

pub use config::LocalSettings;
pub use transport::LocalTransport;

pub type LocalDestination = ObjectDestination<LocalTransport>;

/// Validates without touching the disk; the directory is created on the
/// first write, and `check()` proves it writable.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let s = LocalSettings::from_config(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    Ok(Arc::new(ObjectDestination::new(
        LocalTransport::new(s.root),
        s.object.settings(stream, cfg),
    )))
}
