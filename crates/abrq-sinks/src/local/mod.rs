//! The `local` engine: objects as files under a base directory (config
//! `database`). Everything but the transport is the shared object path.

pub mod errors;
mod transport;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

use crate::object::{ObjectDestination, ObjectSettings};
use crate::BuildError;

pub use transport::LocalTransport;

pub type LocalDestination = ObjectDestination<LocalTransport>;

/// Validates without touching the disk; the directory is created on the
/// first write, and `check()` proves it writable.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let invalid = |message: String| BuildError::Invalid {
        destination: cfg.name.as_str().to_string(),
        message,
    };
    let root = cfg
        .database
        .as_ref()
        .map(|t| t.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            invalid("database (the base directory) is required for engine local".into())
        })?;
    let settings = ObjectSettings::from_config(stream, cfg);
    if !settings.prefix.is_empty() && transport::relative_path(&settings.prefix).is_none() {
        return Err(invalid(format!(
            "prefix {:?} must be plain names separated by '/', without '.' or '..'",
            cfg.prefix.as_str()
        )));
    }
    Ok(Arc::new(ObjectDestination::new(
        LocalTransport::new(root),
        settings,
    )))
}
