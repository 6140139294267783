//! Destination engines. One folder per family with the same files in each;
//! every object and file engine shares `object/` and differs only in its
//! [`ObjectTransport`]. [`build`] turns a validated destination config into a
//! ready [`Destination`] without doing any I/O: connecting happens on the
//! first delivery or `check()`.

pub mod cloud;
pub mod config;
pub mod failure;
pub mod ftp;
pub mod kafka;
pub mod local;
pub mod object;
pub mod relational;

use std::sync::Arc;

use abrq_core::config::{DestinationConfig, DestinationEngine};
use abrq_core::Destination;

pub use config::{check, describe_connection, validate};
pub use local::LocalTransport;
pub use object::{ObjectDestination, ObjectSettings, ObjectTransport};

/// Why a destination could not be built from its config.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("destination {destination:?}: {message}")]
    Invalid {
        destination: String,
        message: String,
    },
}

impl BuildError {
    pub(crate) fn invalid(cfg: &DestinationConfig, message: impl Into<String>) -> Self {
        BuildError::Invalid {
            destination: cfg.name.as_str().to_string(),
            message: message.into(),
        }
    }
}

/// Builds the destination `cfg` describes, for the stream named `stream`.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    // Exhaustive on purpose: a new engine in the config model must be
    // wired up (or refused) here before the workspace compiles.
    match cfg.engine {
        DestinationEngine::Local => local::build(stream, cfg),
        DestinationEngine::Ftp | DestinationEngine::Ftps => ftp::build(stream, cfg),
        DestinationEngine::S3 => cloud::s3::build(stream, cfg),
        DestinationEngine::AzureBlob => cloud::azure::build(stream, cfg),
        DestinationEngine::Gcs => cloud::gcs::build(stream, cfg),
        DestinationEngine::Postgres | DestinationEngine::Mysql => relational::build(stream, cfg),
        DestinationEngine::Kafka => kafka::build(stream, cfg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::config::Config;

    fn dest(engine: &str, extra: &str) -> DestinationConfig {
        Config::destination("d", &format!("engine = \"{engine}\"\n{extra}")).unwrap()
    }

    #[test]
    fn builds_local() {
        let d = build("orders", &dest("local", "database = \"/tmp/x\"")).unwrap();
        assert_eq!(d.kind(), "local");
    }

    #[test]
    fn builds_kafka_without_connecting() {
        let d = build(
            "orders",
            &dest("kafka", "host = \"127.0.0.1:1\"\ndatabase = \"topic\""),
        )
        .unwrap();
        assert_eq!(d.kind(), "kafka");
    }

    #[test]
    fn builds_relational_without_connecting() {
        let d = build("orders", &dest("postgres", "table = \"t\"")).unwrap();
        assert_eq!(d.kind(), "postgres");
        let d = build("orders", &dest("mysql", "table = \"t\"\ndatabase = \"d\"")).unwrap();
        assert_eq!(d.kind(), "mysql");
    }
}
