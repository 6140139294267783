//! The kafka engine's one error classification: librdkafka error code →
//! [`Disposition`]. A record the broker or client can never take (too
//! large, invalid) is the batch's fault and is dead-lettered as `rejected`;
//! everything about reaching the cluster (brokers, leaders, replicas,
//! timeouts, credentials, a missing topic) is retried: an operator or the
//! cluster fixes it and the same batch then succeeds.

use abrq_core::{DeliveryError, Disposition, ReasonClass};
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};

/// What was being done, with the client's error kept as the source.
#[derive(Debug, thiserror::Error)]
#[error("kafka topic {topic}: cannot {op}")]
pub struct KafkaOpError {
    pub op: &'static str,
    pub topic: String,
    #[source]
    pub source: KafkaError,
}

/// Decides what the drain loop does with a failure carrying `code`.
pub fn classify(code: Code) -> Disposition {
    match code {
        // The record itself: no retry can make it fit or valid.
        Code::MessageSizeTooLarge
        | Code::InvalidMessageSize
        | Code::MessageBatchTooLarge
        | Code::InvalidRecord
        | Code::InvalidTimestamp
        | Code::BadMessage
        | Code::InvalidMessage
        | Code::UnsupportedForMessageFormat => Disposition::DeadLetter(ReasonClass::Rejected),
        // The cluster is (momentarily) unreachable or re-electing.
        Code::BrokerTransportFailure
        | Code::AllBrokersDown
        | Code::Resolve
        | Code::BrokerNotAvailable
        | Code::LeaderNotAvailable
        | Code::NotLeaderForPartition
        | Code::ReplicaNotAvailable
        | Code::FencedLeaderEpoch
        | Code::UnknownLeaderEpoch
        | Code::NetworkException
        | Code::NotEnoughReplicas
        | Code::NotEnoughReplicasAfterAppend
        | Code::KafkaStorageError
        | Code::ThrottlingQuotaExceeded
        | Code::RebootstrapRequired => Disposition::Retry,
        // Time ran out or the local queue is full: try again later.
        Code::MessageTimedOut
        | Code::RequestTimedOut
        | Code::OperationTimedOut
        | Code::TimedOutQueue
        | Code::QueueFull
        | Code::PurgeQueue
        | Code::PurgeInflight => Disposition::Retry,
        // Set-up an operator fixes (topic creation, credentials, ACLs,
        // the topic's partitions): the same batch succeeds afterwards.
        Code::UnknownTopicOrPartition
        | Code::UnknownTopic
        | Code::UnknownPartition
        | Code::TopicAuthorizationFailed
        | Code::ClusterAuthorizationFailed
        | Code::SaslAuthenticationFailed
        | Code::UnsupportedSASLMechanism
        | Code::IllegalSASLState
        | Code::Authentication
        | Code::InvalidRequiredAcks
        | Code::PolicyViolation
        | Code::InvalidTopic => Disposition::Retry,
        // The idempotent producer's session went wrong; librdkafka resets
        // it (epoch bump) and the whole batch is sent again.
        Code::OutOfOrderSequenceNumber
        | Code::DuplicateSequenceNumber
        | Code::InvalidProducerEpoch
        | Code::UnknownProducerId
        | Code::ProducerFenced
        | Code::Fatal => Disposition::Retry,
        // RDKafkaErrorCode is #[non_exhaustive] (and has ~200 codes, most
        // for consumers and admin), so this arm cannot be avoided. Anything
        // not named above is not known to be the record's fault: retrying
        // is safe (at least once), dead-lettering good data is not.
        _ => Disposition::Retry,
    }
}

/// The code inside a client error, if it has one.
fn code_of(e: &KafkaError) -> Option<Code> {
    match e {
        // rdkafka's own helper covers the variants carrying a code.
        KafkaError::Canceled => Some(Code::PurgeQueue),
        other => other.rdkafka_error_code(),
    }
}

/// Wraps a client error from doing `op`, classified, keeping the source.
pub fn kafka_error(op: &'static str, topic: &str, source: KafkaError) -> DeliveryError {
    // No code (client creation, bad property): the config is wrong and an
    // operator fixes it, so retry with the breaker rather than dead-letter.
    let disposition = code_of(&source).map_or(Disposition::Retry, classify);
    DeliveryError::new(
        disposition,
        KafkaOpError {
            op,
            topic: topic.to_string(),
            source,
        },
    )
}
