//! Test services for abrq's integration tests: where they are and how to
//! name things in them.
//!
//! `scripts/services.sh up` starts the services and `scripts/services.sh env`
//! prints the `ABRQ_TEST_*` variables read here. Every endpoint and
//! credential is read in this crate only, each with a loopback default that
//! matches the script, so a test never spells one out itself.
//!
//! Tests get fresh buckets, containers, directories, topics and databases
//! from [`names`], so they can run in parallel and again and again against
//! the same long-running services.

mod azure;
mod env;
mod ftp;
mod gcs;
mod http;
mod kafka;
pub mod names;
mod proxy;
mod s3;
mod sql;
pub mod tansu;

pub use azure::Azure;
pub use env::{cache_dir, datasets_dir, Secret};
pub use ftp::{Ftp, Ftps};
pub use gcs::Gcs;
pub use kafka::{java_partition, murmur2, Kafka};
pub use proxy::Proxy;
pub use s3::S3;
pub use sql::{Mysql, Postgres};
pub use tansu::ProxiedBroker;

/// Makes ring the process's TLS crypto provider (once), as abrq's cloud
/// engines do: object_store's and gcloud's HTTP clients take the process
/// default and a test that builds one itself needs it set first.
pub fn install_crypto_provider() {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
}
