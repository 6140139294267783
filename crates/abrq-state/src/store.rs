//! The state store contract. Every method that moves a mark or stages data
//! commits durably before it returns.

use abrq_core::{Batch, BreakerState, ReasonClass};
use async_trait::async_trait;

use crate::types::*;

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
    #[error("spool payload of seq {seq} cannot be decoded: {source}")]
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

#[async_trait]
pub trait StateStore: Send + Sync + 'static {
    /// Registers the stream on first sight (making its uuid) and returns it.
    async fn register_stream(&self, name: &str) -> StoreResult<StreamRow>;

    /// Registers a destination on first sight with `enabled` as its initial
    /// state; afterwards the stored operator state wins. Updates the kind.
    /// A new destination's mark starts just before the oldest spooled batch
    /// (`last_seq` when the spool is empty), so it receives everything still
    /// spooled and its backlog is right from the start.
    async fn register_destination(
        &self,
        stream: &str,
        destination: &str,
        kind: &str,
        enabled: bool,
    ) -> StoreResult<DestinationRow>;

    async fn streams(&self) -> StoreResult<Vec<StreamRow>>;

    /// The source cursor last committed with a staged batch.
    async fn cursor(&self, stream: &str) -> StoreResult<Option<String>>;

    /// Stages `batches` (seq gapless from last_seq+1) and sets the cursor,
    /// all in ONE durable transaction. With `request_key` already seen for
    /// this stream, stages nothing and returns `Duplicate` (same digest) or
    /// `Conflict` (another digest).
    async fn stage(
        &self,
        stream: &str,
        batches: Vec<NewBatch>,
        cursor: Option<String>,
        request_key: Option<RequestKey<'_>>,
    ) -> StoreResult<StageOutcome>;

    /// Forgets request keys staged before `before`, of every stream; a
    /// request retried after that stages again. Returns how many.
    async fn expire_request_keys(&self, before: chrono::DateTime<chrono::Utc>) -> StoreResult<u64>;

    /// The lowest spooled batch with seq > `after`.
    async fn next_batch(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>>;

    async fn spool_stats(&self, stream: &str) -> StoreResult<SpoolStats>;

    /// The spooled batches with seq > `after`: a destination's backlog.
    async fn backlog(&self, stream: &str, after: u64) -> StoreResult<Backlog>;

    async fn destination(&self, stream: &str, destination: &str) -> StoreResult<DestinationRow>;

    async fn destinations(&self, stream: &str) -> StoreResult<Vec<DestinationRow>>;

    /// Moves the high-water mark to `seq` (never backwards) and clears the
    /// last error. A `seq` past the stream's last staged seq is an error
    /// (it would silently skip batches staged later).
    async fn advance(&self, stream: &str, destination: &str, seq: u64) -> StoreResult<()>;

    async fn set_last_error(
        &self,
        stream: &str,
        destination: &str,
        error: Option<&str>,
    ) -> StoreResult<()>;

    async fn set_paused(&self, stream: &str, destination: &str, paused: bool) -> StoreResult<()>;

    /// Enables or disables. Enabling a destination whose mark is behind the
    /// oldest spooled batch records the skipped range and moves its mark to
    /// just before the oldest spooled batch, in the same transaction.
    async fn set_enabled(
        &self,
        stream: &str,
        destination: &str,
        enabled: bool,
    ) -> StoreResult<Option<SkippedRange>>;

    async fn save_breaker(
        &self,
        stream: &str,
        destination: &str,
        state: &BreakerState,
    ) -> StoreResult<()>;

    /// Deletes spooled batches at or below the minimum mark of the enabled
    /// destinations (none when no destination is enabled). Returns how many.
    async fn gc(&self, stream: &str) -> StoreResult<u64>;

    /// Dead-letters `batch` for one destination (keeping its own copy of the
    /// items) and moves that destination's mark past it, in one transaction.
    /// A batch is dead-lettered at most once per destination: a repeated
    /// call for the same seq returns the existing id and changes nothing.
    /// As with `advance`, a seq past the last staged seq is an error.
    async fn dead_letter(
        &self,
        destination: &str,
        batch: &Batch,
        reason: ReasonClass,
        error: &str,
        attempts: u32,
    ) -> StoreResult<i64>;

    /// Dead-letters spooled batch `seq`, whose payload cannot be decoded,
    /// with reason `encoding`: its bytes are copied as they are (an
    /// operator can still read or discard them) and the destination's mark
    /// moves past it, in one transaction, as with `dead_letter`.
    async fn dead_letter_undecodable(
        &self,
        stream: &str,
        destination: &str,
        seq: u64,
        error: &str,
    ) -> StoreResult<i64>;

    async fn dead_letters(
        &self,
        stream: &str,
        destination: &str,
        state: Option<DeadLetterState>,
    ) -> StoreResult<Vec<DeadLetterRow>>;

    async fn dead_letter_get(&self, id: i64) -> StoreResult<(DeadLetterRow, Batch)>;

    /// Marks one pending dead letter (or, with `id` None, all pending ones of
    /// the destination) for replay; returns how many were marked. `actor` is
    /// kept on the dead letter; no audit entry is written (the caller audits
    /// operator actions).
    async fn request_replay(
        &self,
        stream: &str,
        destination: &str,
        id: Option<i64>,
        actor: &str,
    ) -> StoreResult<u64>;

    /// The oldest dead letter of the destination waiting for replay.
    async fn next_replay(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Option<(DeadLetterRow, Batch)>>;

    /// Ends a replay: `Ok` marks it replayed; `Err` leaves it pending with
    /// the new reason and error and clears the request (`attempts` keeps the
    /// original delivery's count). The mark is not touched either way.
    async fn finish_replay(
        &self,
        id: i64,
        outcome: Result<(), (ReasonClass, String)>,
    ) -> StoreResult<()>;

    /// Discards one pending dead letter (or all pending ones of the
    /// destination): data loss, with an audit entry each (action `discard`,
    /// detail `{id, seq, records, bytes, reason_class, idempotency_key}`) in
    /// the same transaction. Returns the rows as they were discarded.
    async fn discard(
        &self,
        stream: &str,
        destination: &str,
        id: Option<i64>,
        actor: &str,
    ) -> StoreResult<Vec<DeadLetterRow>>;

    async fn record_audit(&self, entry: NewAudit) -> StoreResult<i64>;

    /// Newest first.
    async fn audit_log(&self, stream: Option<&str>, limit: u32) -> StoreResult<Vec<AuditEntry>>;

    async fn skipped_ranges(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Vec<SkippedRange>>;
}
