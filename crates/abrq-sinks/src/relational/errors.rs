//! What a database failure means for the batch, for both engines: each
//! engine maps its own codes onto a [`Failure`] (`postgres/errors.rs`,
//! `mysql/errors.rs`), and [`Failure::disposition`] is the one exhaustive
//! decision. Retry when the database or the network is at fault; dead-letter
//! when this batch's data can never go in as it is.

use abrq_core::{DeliveryError, Disposition, ReasonClass};

use super::plan::PlanError;

/// The kinds of failure abrq tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    // the connection or the server, momentarily
    ConnectionLost,
    Timeout,
    Deadlock,
    SerializationFailure,
    LockTimeout,
    TooManyConnections,
    /// A read-only server: a replica, or a primary mid-failover.
    ReadOnly,
    ShuttingDown,
    /// Disk full, out of memory, other server limits an operator raises.
    ResourcesExhausted,
    // the destination's setup, which an operator fixes
    Unauthorized,
    /// A table, column or database is missing (or our view of it is stale).
    MissingObject,
    /// A concurrent DDL got there first.
    ObjectExists,
    Misconfigured,
    // this batch's data
    ConstraintViolation,
    ValueTooLong,
    OutOfRange,
    InvalidInput,
    RowTooLarge,
    /// A field name the server cannot take as a column name (MySQL:
    /// duplicate ignoring case, trailing space, outside the BMP, too long).
    /// Planning refuses these first; this is the server's word on any the
    /// checks miss.
    BadName,
    // anything else the server or the driver reports
    Unclassified,
}

impl Failure {
    pub fn disposition(self) -> Disposition {
        match self {
            Failure::ConnectionLost
            | Failure::Timeout
            | Failure::Deadlock
            | Failure::SerializationFailure
            | Failure::LockTimeout
            | Failure::TooManyConnections
            | Failure::ReadOnly
            | Failure::ShuttingDown
            | Failure::ResourcesExhausted => Disposition::Retry,
            // Not the batch's fault: the backlog waits and the breaker
            // opens while an operator fixes grants, the table or the config.
            Failure::Unauthorized
            | Failure::MissingObject
            | Failure::ObjectExists
            | Failure::Misconfigured => Disposition::Retry,
            Failure::ConstraintViolation
            | Failure::ValueTooLong
            | Failure::OutOfRange
            | Failure::InvalidInput
            | Failure::RowTooLarge
            | Failure::BadName => Disposition::DeadLetter(ReasonClass::Rejected),
            // Unknown is retried: the retry budget bounds it, and a dead
            // letter for what may be a server hiccup would need a replay.
            Failure::Unclassified => Disposition::Retry,
        }
    }

    /// Whether this failure blames one row, so finding the row is worth it.
    /// A bad name fails the DDL, before any row is written.
    pub fn blames_a_row(self) -> bool {
        self != Failure::BadName
            && self.disposition() == Disposition::DeadLetter(ReasonClass::Rejected)
    }
}

/// A database failure: what was being done, its kind, and the driver's
/// error (with the server's own message) as the source.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op}{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
pub struct DbError {
    pub op: String,
    pub kind: Failure,
    /// The server's detail line (PostgreSQL's `DETAIL`), when it sent one.
    pub detail: Option<String>,
    #[source]
    pub source: sqlx::Error,
}

impl DbError {
    pub fn into_delivery(self) -> DeliveryError {
        DeliveryError::new(self.kind.disposition(), self)
    }
}

impl From<PlanError> for DeliveryError {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Drift { item, .. } => {
                DeliveryError::dead_letter(ReasonClass::SchemaDrift, e).at_record(item)
            }
            PlanError::Rejected { item, .. } => {
                DeliveryError::dead_letter(ReasonClass::Rejected, e).at_record(item)
            }
            // the message names every bad record
            PlanError::Names(_) => DeliveryError::dead_letter(ReasonClass::Rejected, e),
            PlanError::NoKey(_) => DeliveryError::transient(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_errors_dead_letter_and_the_rest_retry() {
        for f in [
            Failure::ConstraintViolation,
            Failure::ValueTooLong,
            Failure::OutOfRange,
            Failure::InvalidInput,
            Failure::RowTooLarge,
        ] {
            assert!(f.blames_a_row(), "{f:?}");
        }
        assert_eq!(
            Failure::BadName.disposition(),
            Disposition::DeadLetter(ReasonClass::Rejected)
        );
        assert!(!Failure::BadName.blames_a_row());
        for f in [
            Failure::ConnectionLost,
            Failure::Deadlock,
            Failure::SerializationFailure,
            Failure::TooManyConnections,
            Failure::ReadOnly,
            Failure::Unclassified,
        ] {
            assert_eq!(f.disposition(), Disposition::Retry, "{f:?}");
        }
    }

    #[test]
    fn plan_errors_keep_the_record_index() {
        let e: DeliveryError = PlanError::Drift {
            item: 4,
            message: "x".into(),
        }
        .into();
        assert_eq!(
            (e.disposition, e.record_index),
            (Disposition::DeadLetter(ReasonClass::SchemaDrift), Some(4))
        );
        let e: DeliveryError = PlanError::NoKey("k".into()).into();
        assert!(e.is_transient());
    }
}
