//! The `kafka` engine: one message per record, keyed by the `partition_key`
//! field (murmur2, as Java places keys) or spread round-robin, acks=all and
//! idempotence on. Config in `config.rs`: `host` = bootstrap servers,
//! `database` = topic (`{table}` in it: one topic per source table), `username`/`password` = SASL (off when empty;
//! `sasl_mechanism` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), `tls` and
//! `tls_ca_file` for TLS.

mod cloudevents;
pub mod config;
mod context;
mod debezium;
mod destination;
pub mod errors;
mod lines;
mod markers;
pub mod message;
mod metadata;
mod reports;
pub mod topic;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

use crate::keys::BuildError;

pub use config::{KafkaSettings, MessageFormat, SaslMechanism};
pub use destination::KafkaDestination;
/// The client, for callers that need it beside the destination (the
/// bench's raw producer), at the same version and features.
pub use rdkafka;

/// Validates without connecting; the producer is made on first delivery
/// or `check()`.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    let settings = KafkaSettings::from_config(stream, cfg)
        .and_then(|s| s.check_ca_file().map(|()| s))
        .map_err(|e| BuildError::invalid(cfg, e))?;
    Ok(Arc::new(KafkaDestination::new(settings)))
}
