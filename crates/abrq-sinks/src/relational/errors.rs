//! What a database failure means, for both engines: each engine maps its
//! own codes onto a [`Kind`] (`postgres/errors.rs`, `mysql/errors.rs`), and
//! [`Kind::failure`] puts every kind in the shared [`Failure`] table, whose
//! `disposition()` decides. The kinds stay finer than the table because
//! the flow needs to know more: whether one row is to blame (then it is
//! found), and which collisions are another writer's (then retried).

use abrq_core::DeliveryError;

use super::plan::PlanError;
use crate::failure::Failure;

/// The kinds of database failure abrq tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
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

impl Kind {
    /// This kind in the shared table.
    pub fn failure(self) -> Failure {
        match self {
            Kind::ConnectionLost => Failure::Network,
            Kind::Timeout => Failure::Timeout,
            Kind::Deadlock | Kind::SerializationFailure | Kind::LockTimeout => Failure::Conflict,
            Kind::TooManyConnections | Kind::ReadOnly | Kind::ShuttingDown => {
                Failure::Unavailable { retry_after: None }
            }
            Kind::ResourcesExhausted => Failure::Storage,
            // Not the batch's fault: the backlog waits and the breaker
            // opens while an operator fixes grants, the table or the config.
            Kind::Unauthorized => Failure::Unauthorized,
            Kind::MissingObject => Failure::Missing,
            Kind::ObjectExists => Failure::Conflict,
            Kind::Misconfigured => Failure::Misconfigured,
            Kind::ConstraintViolation
            | Kind::ValueTooLong
            | Kind::OutOfRange
            | Kind::InvalidInput
            | Kind::BadName => Failure::Rejected { record: None },
            Kind::RowTooLarge => Failure::TooLarge { record: None },
            Kind::Unclassified => Failure::Unknown,
        }
    }

    /// Whether this failure blames one row, so finding the row is worth it.
    /// A bad name fails the DDL, before any row is written.
    pub fn blames_a_row(self) -> bool {
        self != Kind::BadName
            && matches!(
                self.failure(),
                Failure::Rejected { .. } | Failure::TooLarge { .. }
            )
    }
}

/// A database failure: what was being done, its kind, and the driver's
/// error (with the server's own message) as the source.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op}{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
pub struct DbError {
    pub op: String,
    pub kind: Kind,
    /// The server's detail line (PostgreSQL's `DETAIL`), when it sent one.
    pub detail: Option<String>,
    #[source]
    pub source: sqlx::Error,
}

impl DbError {
    pub fn into_delivery(self) -> DeliveryError {
        self.kind.failure().error(self)
    }
}

impl From<PlanError> for DeliveryError {
    fn from(e: PlanError) -> Self {
        let failure = match &e {
            PlanError::Drift { item, .. } => Failure::Drift {
                record: Some(*item),
            },
            PlanError::Rejected { item, .. } => Failure::Rejected {
                record: Some(*item),
            },
            // the message names every bad record
            PlanError::Names(_) => Failure::Rejected { record: None },
            // upsert into a table without a primary key: the table's setup
            PlanError::NoKey(_) => Failure::Misconfigured,
        };
        failure.error(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Disposition, ReasonClass};

    #[test]
    fn data_errors_dead_letter_and_the_rest_retry() {
        for f in [
            Kind::ConstraintViolation,
            Kind::ValueTooLong,
            Kind::OutOfRange,
            Kind::InvalidInput,
            Kind::RowTooLarge,
        ] {
            assert!(f.blames_a_row(), "{f:?}");
        }
        assert_eq!(
            Kind::BadName.failure().disposition(),
            Disposition::DeadLetter(ReasonClass::Rejected)
        );
        assert!(!Kind::BadName.blames_a_row());
        for f in [
            Kind::ConnectionLost,
            Kind::Deadlock,
            Kind::SerializationFailure,
            Kind::TooManyConnections,
            Kind::ReadOnly,
            Kind::Unclassified,
        ] {
            assert_eq!(f.failure().disposition(), Disposition::Retry, "{f:?}");
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
