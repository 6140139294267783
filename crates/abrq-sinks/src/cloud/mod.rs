//! The cloud object stores: s3 and azure_blob through `object_store`, gcs
//! through `gcloud-storage` (the JSON API: object_store's GCS client speaks
//! only the XML API, whose uploads GCS emulators and some compatible stores
//! do not take). Each engine is only an [`ObjectTransport`] and a config
//! reader; naming, encoding and manifests are the shared `object/` path.
//!
//! Failures are classified in one table for all three (`answer.rs`); each
//! client's errors are reduced to it in one function (`store/errors.rs`,
//! `gcs/errors.rs`).
//!
//! [`ObjectTransport`]: crate::object::ObjectTransport

pub mod answer;
pub mod azure;
pub mod gcs;
pub mod s3;
pub mod store;

#[cfg(test)]
mod tests;

use std::time::Duration;

use abrq_core::config::{DestinationConfig, Secret, Text};

use crate::BuildError;

/// Objects larger than this are uploaded in parts of this size (multipart
/// for S3 and Azure, resumable chunks for GCS): no single request carries
/// more, a failed part is re-sent alone, and the parts are slices of the
/// encoded object rather than copies. At least S3's 5 MiB part minimum,
/// and a multiple of GCS's 256 KiB chunk granule.
pub const PART_SIZE: usize = 8 << 20;

/// Parts uploaded at once, where the store allows it (S3, Azure).
pub const PARALLEL_PARTS: usize = 4;

/// Every cloud client's timeouts. The drain loop's attempt timeout bounds
/// a whole delivery; these only make a dead connection fail fast, and keep
/// one request (at most a part) from hanging.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A connection field's value, or None when unset or empty.
fn field(v: &Option<Text>) -> Option<&str> {
    v.as_ref()
        .map(|t| t.as_str().trim())
        .filter(|s| !s.is_empty())
}

fn secret(v: &Option<Secret>) -> Option<&str> {
    v.as_ref().map(Secret::expose).filter(|s| !s.is_empty())
}

fn invalid(cfg: &DestinationConfig, message: impl Into<String>) -> BuildError {
    BuildError::Invalid {
        destination: cfg.name.as_str().to_string(),
        message: message.into(),
    }
}

fn required<'a>(
    cfg: &DestinationConfig,
    v: &'a Option<Text>,
    what: &str,
) -> Result<&'a str, BuildError> {
    field(v).ok_or_else(|| {
        invalid(
            cfg,
            format!("{what} is required for engine {}", cfg.engine.as_str()),
        )
    })
}

/// `host` as an endpoint URL, and whether it is plain HTTP (an emulator or
/// a gateway on a private network: allowed only when asked for by URL).
fn endpoint(cfg: &DestinationConfig) -> Result<Option<(&str, bool)>, BuildError> {
    let Some(host) = field(&cfg.host) else {
        return Ok(None);
    };
    match host.split_once("://") {
        Some(("https", _)) => Ok(Some((host, false))),
        Some(("http", _)) => Ok(Some((host, true))),
        _ => Err(invalid(
            cfg,
            format!("host {host:?} must be an endpoint URL starting with https:// or http://"),
        )),
    }
}
