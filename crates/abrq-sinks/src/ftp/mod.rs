//! The `ftp` and `ftps` engines: objects as files on an FTP server, over
//! plain FTP or explicit FTPS (TLS on control and data, passive mode).
//! Everything but the transport is the shared object path; the manifest is
//! on by default here (`config.rs`), since FTP offers no integrity check of
//! its own.

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

use crate::keys::BuildError;
use crate::object::ObjectDestination;

pub use config::FtpSettings;
pub use transport::FtpTransport;

/// The client the engine is built on, for benchmarks and tests that must
/// drive the same client directly.
pub use suppaftp;

pub type FtpDestination = ObjectDestination<FtpTransport>;

/// Validates without I/O; the first delivery or `check()` connects.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let (ftp, object) = config::settings(cfg).map_err(|e| BuildError::invalid(cfg, e))?;
    let object = object.settings(stream, cfg);
    Ok(Arc::new(ObjectDestination::new(
        FtpTransport::new(ftp),
        object,
    )))
}
