//! The topic's partition count, from a metadata request: for round-robin
//! placement and for `check()`.

use std::time::{Duration, Instant};

use abrq_core::DeliveryError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::producer::Producer;

use super::context::ClientErrors;
use super::destination::KafkaProducer;
use super::errors::{classify, kafka_error, KafkaOpError};
use crate::failure::Failure;

/// How long a metadata request may take during deliveries: longer than a
/// connection's setup may (see `client_config`), so a stuck handshake is
/// reported as one.
pub(super) const METADATA_TIMEOUT: Duration = Duration::from_secs(12);
/// How long `check()` waits for metadata: a person is waiting, and the
/// client's last connection error says why when it gives up.
pub(super) const CHECK_WAIT: Duration = Duration::from_secs(3);
/// Metadata is asked for in steps this long, so a client the brokers
/// refuse (credentials, TLS) fails in about this time, not the whole wait.
const METADATA_STEP: Duration = Duration::from_secs(1);

/// The partition count of `topic` (a blocking call, so off the async
/// threads). A missing topic is an error an operator fixes (transient).
pub(super) async fn fetch_partitions(
    producer: KafkaProducer,
    topic: String,
    errors: ClientErrors,
    wait: Duration,
) -> Result<i32, DeliveryError> {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let deadline = started + wait;
        let md = loop {
            match producer
                .client()
                .fetch_metadata(Some(&topic), METADATA_STEP)
            {
                Ok(md) => break md,
                Err(e) if Instant::now() >= deadline || errors.refusal_since(started).is_some() => {
                    return Err(kafka_error("fetch metadata", &topic, e));
                }
                Err(_) => {}
            }
        };
        let missing = |code: Code| {
            classify(code).error(KafkaOpError {
                op: "find the topic",
                topic: topic.clone(),
                source: KafkaError::MetadataFetch(code),
            })
        };
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .ok_or_else(|| missing(Code::UnknownTopicOrPartition))?;
        if let Some(err) = t.error() {
            return Err(missing(Code::from(err)));
        }
        match i32::try_from(t.partitions().len()) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(missing(Code::UnknownPartition)),
        }
    })
    .await
    .map_err(|join| Failure::Unknown.error(join))?
}

/// How many topics the cluster has: proves the brokers answer, for
/// `check()` of a destination whose topic depends on the record.
pub(super) async fn fetch_topic_count(
    producer: KafkaProducer,
    what: String,
    errors: ClientErrors,
    wait: Duration,
) -> Result<usize, DeliveryError> {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let deadline = started + wait;
        loop {
            match producer.client().fetch_metadata(None, METADATA_STEP) {
                Ok(md) => return Ok(md.topics().len()),
                Err(e) if Instant::now() >= deadline || errors.refusal_since(started).is_some() => {
                    return Err(kafka_error("fetch metadata", &what, e));
                }
                Err(_) => {}
            }
        }
    })
    .await
    .map_err(|join| Failure::Unknown.error(join))?
}
