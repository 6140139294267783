//! The one object-writing path shared by every object and file destination
//! (local, s3, azure_blob, gcs, ftp, ftps): encode the batch, name it from its
//! idempotency key, put the object, then put its manifest. Engines supply
//! only an [`ObjectTransport`]; naming, encoding and manifests never vary.

mod destination;
pub mod encode;
pub mod manifest;
pub mod naming;
pub mod parquet;
pub mod temp;
mod transport;

#[cfg(test)]
pub(crate) mod conformance;

use abrq_core::config::{DestinationConfig, ObjectFormat};

pub use destination::ObjectDestination;
pub use encode::Encoded;
pub use manifest::Manifest;
pub use transport::ObjectTransport;

/// The object-store part of a destination's config, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSettings {
    /// The stream this destination belongs to (for `check` and logs; the
    /// manifest takes the stream from the batch itself).
    pub stream: String,
    /// The destination's name in config.
    pub destination: String,
    /// Key prefix with leading and trailing slashes trimmed.
    pub prefix: String,
    pub format: ObjectFormat,
    pub date_partitioning: bool,
    pub manifest: bool,
}

impl ObjectSettings {
    pub fn from_config(stream: &str, cfg: &DestinationConfig) -> Self {
        ObjectSettings {
            stream: stream.to_string(),
            destination: cfg.name.as_str().to_string(),
            prefix: naming::normalize_prefix(cfg.prefix.as_str()).to_string(),
            format: cfg.format,
            date_partitioning: cfg.date_partitioning,
            manifest: cfg.manifest_enabled(),
        }
    }
}
