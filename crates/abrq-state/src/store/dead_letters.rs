//! Dead letters: a batch one destination could not take, its replay and
//! its discard.

use abrq_core::{Batch, ReasonClass};
use async_trait::async_trait;

use super::StoreResult;
use crate::types::*;

/// Dead letters, and the next one waiting for replay.
#[async_trait]
pub trait DeadLettersRead: Send + Sync + 'static {
    async fn dead_letters(
        &self,
        stream: &str,
        destination: &str,
        state: Option<DeadLetterState>,
    ) -> StoreResult<Vec<DeadLetterRow>>;

    async fn dead_letter_get(&self, id: i64) -> StoreResult<(DeadLetterRow, Batch)>;

    /// The oldest dead letter of the destination waiting for replay.
    async fn next_replay(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Option<(DeadLetterRow, Batch)>>;
}

/// A drain's dead letters and replays; an operator's replay requests and discards.
#[async_trait]
pub trait DeadLettersWrite: Send + Sync + 'static {
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
}
