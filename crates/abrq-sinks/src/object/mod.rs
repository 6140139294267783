//! The one object-writing path shared by every object and file destination
//! (local, s3, azure_blob, gcs, ftp, ftps): encode the batch, name it from its
//! idempotency key, put the object, then put its manifest. Engines supply
//! only an [`ObjectTransport`]; naming, encoding and manifests never vary.

mod config;
mod destination;
pub mod encode;
mod lines;
pub mod manifest;
pub mod naming;
pub mod parquet;
mod shared;
pub mod temp;
mod transport;

#[cfg(test)]
pub(crate) mod conformance;

pub use config::{ObjectFormat, ObjectOptions, ObjectSettings};
pub use destination::ObjectDestination;
pub use encode::Encoded;
pub use manifest::Manifest;
pub use transport::ObjectTransport;
