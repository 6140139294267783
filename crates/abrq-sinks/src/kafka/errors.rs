//! The kafka engine's one error classification: librdkafka error code →
//! the shared [`Failure`] table. A record the broker or client can never take (too
//! large, invalid) is the batch's fault and is dead-lettered as `rejected`;
//! everything about reaching the cluster (brokers, leaders, replicas,
//! timeouts, credentials, a missing topic) is retried: an operator or the
//! cluster fixes it and the same batch then succeeds.

use abrq_core::DeliveryError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};

use crate::failure::Failure;

/// What was being done, with the client's error kept as the source.
#[derive(Debug, thiserror::Error)]
#[error("kafka topic {topic}: cannot {op}")]
pub struct KafkaOpError {
    pub op: &'static str,
    pub topic: String,
    #[source]
    pub source: KafkaError,
}

/// What a failure carrying `code` means.
pub fn classify(code: Code) -> Failure {
    match code {
        // The record itself: no retry can make it fit or valid.
        Code::MessageSizeTooLarge | Code::InvalidMessageSize | Code::MessageBatchTooLarge => {
            Failure::TooLarge { record: None }
        }
        Code::InvalidRecord
        | Code::InvalidTimestamp
        | Code::BadMessage
        | Code::InvalidMessage
        | Code::UnsupportedForMessageFormat => Failure::Rejected { record: None },
        // The cluster is unreachable.
        Code::BrokerTransportFailure
        | Code::AllBrokersDown
        | Code::Resolve
        | Code::NetworkException => Failure::Network,
        // The cluster is reachable but (momentarily) re-electing or short
        // of replicas.
        Code::BrokerNotAvailable
        | Code::LeaderNotAvailable
        | Code::NotLeaderForPartition
        | Code::ReplicaNotAvailable
        | Code::FencedLeaderEpoch
        | Code::UnknownLeaderEpoch
        | Code::NotEnoughReplicas
        | Code::NotEnoughReplicasAfterAppend
        | Code::RebootstrapRequired => Failure::Unavailable { retry_after: None },
        Code::KafkaStorageError => Failure::Storage,
        // Too fast for a quota, or for the local queue.
        Code::ThrottlingQuotaExceeded | Code::QueueFull => Failure::Throttled { retry_after: None },
        // Time ran out (a purge is the attempt giving up on its records).
        Code::MessageTimedOut
        | Code::RequestTimedOut
        | Code::OperationTimedOut
        | Code::TimedOutQueue
        | Code::PurgeQueue
        | Code::PurgeInflight => Failure::Timeout,
        // Set-up an operator fixes (topic creation, credentials, ACLs,
        // the topic's partitions): the same batch succeeds afterwards.
        Code::UnknownTopicOrPartition | Code::UnknownTopic | Code::UnknownPartition => {
            Failure::Missing
        }
        Code::TopicAuthorizationFailed
        | Code::ClusterAuthorizationFailed
        | Code::SaslAuthenticationFailed
        | Code::IllegalSASLState
        | Code::Authentication => Failure::Unauthorized,
        Code::UnsupportedSASLMechanism
        | Code::InvalidRequiredAcks
        | Code::PolicyViolation
        | Code::InvalidTopic => Failure::Misconfigured,
        // The idempotent producer's session went wrong; librdkafka resets
        // it (epoch bump) and the whole batch is sent again.
        Code::OutOfOrderSequenceNumber
        | Code::DuplicateSequenceNumber
        | Code::InvalidProducerEpoch
        | Code::UnknownProducerId
        | Code::ProducerFenced
        | Code::Fatal => Failure::Protocol,
        // RDKafkaErrorCode is #[non_exhaustive] (and has ~200 codes, most
        // for consumers and admin): the compiler wants this arm. Anything
        // not named above is not known to be the record's fault: retrying
        // is safe (at least once), dead-lettering good data is not.
        _ => Failure::Unknown,
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
    code_of(&source)
        .map_or(Failure::Misconfigured, classify)
        .error(KafkaOpError {
            op,
            topic: topic.to_string(),
            source,
        })
}
