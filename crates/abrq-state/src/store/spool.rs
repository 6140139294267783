//! Streams, staging and cursors, request keys, the spool and its GC.

use abrq_core::Batch;
use async_trait::async_trait;

use super::StoreResult;
use crate::types::*;

/// What is staged: streams, cursors, spooled batches and their counts.
#[async_trait]
pub trait SpoolRead: Send + Sync + 'static {
    async fn streams(&self) -> StoreResult<Vec<StreamRow>>;

    /// The source cursor last committed with a staged batch.
    async fn cursor(&self, stream: &str) -> StoreResult<Option<String>>;

    /// The lowest spooled batch with seq > `after`.
    async fn next_batch(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>>;

    /// The same batch as [`SpoolRead::next_batch`], as its lines
    /// (`Batch::lines`), not decoded.
    async fn next_lines(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>>;

    async fn spool_stats(&self, stream: &str) -> StoreResult<SpoolStats>;

    /// The spooled batches with seq > `after`: a destination's backlog.
    async fn backlog(&self, stream: &str, after: u64) -> StoreResult<Backlog>;
}

/// Staging (with the cursor) and removing what every destination passed.
#[async_trait]
pub trait SpoolWrite: Send + Sync + 'static {
    /// Registers the stream on first sight (making its uuid) and returns it.
    async fn register_stream(&self, name: &str) -> StoreResult<StreamRow>;

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

    /// Deletes spooled batches at or below the minimum mark of the enabled
    /// destinations (none when no destination is enabled). Returns how many.
    async fn gc(&self, stream: &str) -> StoreResult<u64>;
}
