//! The state store contract, in four parts that follow the conformance
//! suite's files: the spool, the destinations' marks, dead letters, and
//! the audit log. Each has a read half and a write half, so a handle can
//! be given for reading only ([`StateRead`]) or for writing ([`StateWrite`],
//! for a lease holder fenced with its epoch: `LeaseStore::fenced`). Every
//! method that moves a mark or stages data commits durably before it
//! returns.

mod audit;
mod dead_letters;
mod marks;
mod spool;

use std::sync::Arc;

pub use audit::{AuditRead, AuditWrite};
pub use dead_letters::{DeadLettersRead, DeadLettersWrite};
pub use marks::{MarksRead, MarksWrite};
pub use spool::{SpoolRead, SpoolWrite};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unknown stream {0:?}")]
    UnknownStream(String),
    #[error("unknown destination {destination:?} of stream {stream:?}")]
    UnknownDestination { stream: String, destination: String },
    #[error("unknown dead letter {0}")]
    UnknownDeadLetter(i64),
    #[error("dead letter {id} is {state}, not pending")]
    NotPending { id: i64, state: &'static str },
    #[error("{}", abrq_core::lines::undecodable(*seq, source))]
    Payload {
        seq: u64,
        #[source]
        source: crate::payload::LineError,
    },
    /// A dead letter picked for replay whose copy of the batch cannot be
    /// decoded: the replay fails with reason `encoding`, by its id.
    #[error("dead letter {id} (seq {seq}) cannot be decoded: {source}")]
    ReplayPayload {
        id: i64,
        seq: u64,
        #[source]
        source: crate::payload::LineError,
    },
    /// A holder's write after another process took its lease over.
    #[error("lease {resource:?} is no longer held by this process at epoch {epoch} (it was handed back or taken over; the lease is at epoch {current}); the write was refused")]
    Fenced {
        resource: String,
        epoch: i64,
        current: i64,
    },
    #[error(transparent)]
    Backend(#[from] anyhow::Error),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Every read of the state: what status, the follower and the read-only
/// parts of the API use.
pub trait StateRead: SpoolRead + MarksRead + DeadLettersRead + AuditRead {}

impl<T: SpoolRead + MarksRead + DeadLettersRead + AuditRead> StateRead for T {}

/// Every write to the state: a task's handle (fenced with its lease's
/// epoch when processes share the state) or an operator's.
pub trait StateWrite: SpoolWrite + MarksWrite + DeadLettersWrite + AuditWrite {}

impl<T: SpoolWrite + MarksWrite + DeadLettersWrite + AuditWrite> StateWrite for T {}

/// The whole store: for whoever opens it (the binary, tests), who hands
/// out its halves.
pub trait StateStore: StateRead + StateWrite {
    /// The same store, for reading only.
    fn read_half(self: Arc<Self>) -> Arc<dyn StateRead>;

    /// The same store, for writing (and nothing else).
    fn write_half(self: Arc<Self>) -> Arc<dyn StateWrite>;
}

impl<T: StateRead + StateWrite> StateStore for T {
    fn read_half(self: Arc<Self>) -> Arc<dyn StateRead> {
        self
    }

    fn write_half(self: Arc<Self>) -> Arc<dyn StateWrite> {
        self
    }
}
