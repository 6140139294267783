//! The `ftp` and `ftps` engines: objects as files on an FTP server, over
//! plain FTP or explicit FTPS (TLS on control and data, passive mode).
//! Everything but the transport is the shared object path; the manifest is
//! on by default here (config `manifest_enabled()`), since FTP offers no
//! integrity check of its own.

pub mod config;
pub mod errors;
mod ops;
mod pool;
pub mod session;
mod transport;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

use crate::object::{ObjectDestination, ObjectSettings};
use crate::BuildError;

pub use config::FtpSettings;
pub use transport::FtpTransport;

/// The client the engine is built on, for benchmarks and tests that must
/// drive the same client directly.
pub use suppaftp;

pub type FtpDestination = ObjectDestination<FtpTransport>;

/// Validates without I/O; the first delivery or `check()` connects.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let invalid = |message: String| BuildError::Invalid {
        destination: cfg.name.as_str().to_string(),
        message,
    };
    let ftp = FtpSettings::from_config(cfg).map_err(invalid)?;
    let settings = ObjectSettings::from_config(stream, cfg);
    let transport = FtpTransport::new(ftp);
    // The prefix becomes part of every key, so it must pass the same check.
    if !settings.prefix.is_empty() && transport.path_of(&settings.prefix).is_err() {
        return Err(invalid(format!(
            "prefix {:?} must be plain names separated by '/', without '.' or '..'",
            cfg.prefix.as_str()
        )));
    }
    Ok(Arc::new(ObjectDestination::new(transport, settings)))
}
