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
pub mod keys;
pub mod local;
pub mod object;
pub mod registry;
pub mod relational;
pub mod spooled;

use std::sync::Arc;

use abrq_core::config::DestinationConfig;
use abrq_core::Destination;

pub use config::{check, describe_connection, object_settings, validate};
pub use keys::{BuildError, Connection};
pub use local::LocalTransport;
pub use object::{ObjectDestination, ObjectSettings, ObjectTransport};

/// Builds the destination `cfg` describes, for the stream named `stream`,
/// with its engine's entry in the registry.
pub fn build(stream: &str, cfg: &DestinationConfig) -> Result<Arc<dyn Destination>, BuildError> {
    (registry::entry(cfg.engine).build)(stream, cfg)
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
