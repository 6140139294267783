//! The cloud object stores: s3 and azure_blob through `object_store`, gcs
//! through `gcloud-storage` (the JSON API: object_store's GCS client speaks
//! only the XML API, whose uploads GCS emulators and some compatible stores
//! do not take). Each engine is only an [`ObjectTransport`] and a config
//! (`s3/config.rs`, `azure/config.rs`, `gcs/config.rs`); naming, encoding
//! and manifests are the shared `object/` path. s3 and azure_blob share
//! their client, so they share its transport and its classification
//! (`store/`); gcs has its own (`gcs/transport.rs`, `gcs/errors.rs`). An
//! HTTP status means the same to all three (`answer.rs`).
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

use abrq_core::config::DestinationConfig;

use crate::keys::{invalid, text};

/// Makes ring the process's TLS crypto provider, once. The cloud clients
/// (object_store's and gcloud's HTTP client) are built without one of
/// their own, so the whole binary links one crypto library (ring, as
/// sqlx, suppaftp, the Kafka-free TLS paths and the listener use) instead
/// of ring and aws-lc both; they take the process default, which must be
/// set before the first client is built.
pub fn install_crypto_provider() {
    // Err only when a provider is installed already: that one stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

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

/// `host` as an endpoint URL, and whether it is plain HTTP (an emulator or
/// a gateway on a private network: allowed only when asked for by URL).
fn endpoint(cfg: &DestinationConfig) -> Result<Option<(String, bool)>, String> {
    let Some(host) = text(&cfg.host) else {
        return Ok(None);
    };
    match host.split_once("://") {
        Some(("https", _)) => Ok(Some((host.to_string(), false))),
        Some(("http", _)) => Ok(Some((host.to_string(), true))),
        _ => Err(invalid(
            cfg,
            "host",
            format!("{host:?} must be an endpoint URL starting with https:// or http://"),
        )),
    }
}
