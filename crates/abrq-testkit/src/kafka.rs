//! A Kafka-protocol broker: tansu, from `scripts/services.sh`.

use crate::env::var;

/// Where the broker is.
#[derive(Clone, Debug)]
pub struct Kafka {
    /// `ABRQ_TEST_KAFKA_BROKERS`: bootstrap servers, `host:port[,host:port]`.
    pub brokers: String,
}

impl Kafka {
    pub fn from_env() -> Self {
        Self {
            brokers: var("ABRQ_TEST_KAFKA_BROKERS", "127.0.0.1:9092"),
        }
    }
}
