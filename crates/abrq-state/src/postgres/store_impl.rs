//! The store traits for `PostgresStore`: each method runs one of the module
//! functions in a transaction (`write`) or on a plain connection (`run`).
//! Payloads are encoded before a connection is taken and decoded after it
//! is returned, on the blocking pool: a large batch's JSON must neither hold
//! a connection nor stall the async threads.

use abrq_core::{Batch, BatchMeta, BreakerState, ReasonClass};
use async_trait::async_trait;

use super::spool::Spooled;
use super::{dead_letters, destinations, spool, PostgresStore};
use crate::payload;
use crate::store::{
    AuditRead, AuditWrite, DeadLettersRead, DeadLettersWrite, MarksRead, MarksWrite, SpoolRead,
    SpoolWrite, StoreError, StoreResult,
};
use crate::types::*;

/// Runs CPU-bound payload work on the blocking pool.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        StoreError::Backend(anyhow::Error::new(e).context(format!("postgres state {what}")))
    })?
}

async fn decode(spooled: Spooled) -> StoreResult<Batch> {
    blocking("decoding a batch", move || {
        let items = payload::decode(spooled.meta.seq, &spooled.payload)?;
        Ok(Batch {
            meta: spooled.meta,
            items,
            lines: None,
        })
    })
    .await
}

async fn decode_dead_letter(
    (row, bytes): (DeadLetterRow, Vec<u8>),
) -> StoreResult<(DeadLetterRow, Batch)> {
    blocking("decoding a dead letter", move || {
        let items = payload::decode(row.seq, &bytes)?;
        let meta = BatchMeta {
            stream: row.stream.clone(),
            seq: row.seq,
            idempotency_key: row.idempotency_key.clone(),
            staged_at: row.staged_at,
            records: row.records,
            bytes: row.bytes,
        };
        Ok((row, Batch::new(meta, items)))
    })
    .await
}

#[async_trait]
impl SpoolRead for PostgresStore {
    async fn streams(&self) -> StoreResult<Vec<StreamRow>> {
        self.run("streams", async |c| spool::streams(c).await).await
    }

    async fn cursor(&self, stream: &str) -> StoreResult<Option<String>> {
        self.run("cursor", async |c| spool::cursor(c, stream).await)
            .await
    }

    async fn next_batch(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>> {
        let found = self
            .run("next_batch", async |c| {
                spool::next_batch(c, stream, after).await
            })
            .await?;
        match found {
            Some(spooled) => decode(spooled).await.map(Some),
            None => Ok(None),
        }
    }

    async fn next_lines(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>> {
        let found = self
            .run("next_batch", async |c| {
                spool::next_batch(c, stream, after).await
            })
            .await?;
        Ok(found.map(|b| Batch::lines(b.meta, b.payload)))
    }

    async fn spool_stats(&self, stream: &str) -> StoreResult<SpoolStats> {
        self.run("spool_stats", async |c| spool::spool_stats(c, stream).await)
            .await
    }

    async fn backlog(&self, stream: &str, after: u64) -> StoreResult<Backlog> {
        self.run("backlog", async |c| spool::backlog(c, stream, after).await)
            .await
    }
}

#[async_trait]
impl SpoolWrite for PostgresStore {
    async fn register_stream(&self, name: &str) -> StoreResult<StreamRow> {
        self.run("register_stream", async |c| {
            spool::register_stream(c, name).await
        })
        .await
    }

    async fn stage(
        &self,
        stream: &str,
        batches: Vec<NewBatch>,
        cursor: Option<String>,
        request_key: Option<RequestKey<'_>>,
    ) -> StoreResult<StageOutcome> {
        self.write("stage", async |c| {
            spool::stage(c, stream, batches, cursor.as_deref(), request_key).await
        })
        .await
    }

    async fn expire_request_keys(&self, before: chrono::DateTime<chrono::Utc>) -> StoreResult<u64> {
        self.run("expire_request_keys", async |c| {
            spool::expire_request_keys(c, before).await
        })
        .await
    }

    async fn gc(&self, stream: &str) -> StoreResult<u64> {
        self.write("gc", async |c| spool::gc(c, stream).await).await
    }
}

#[async_trait]
impl MarksRead for PostgresStore {
    async fn destination(&self, stream: &str, destination: &str) -> StoreResult<DestinationRow> {
        self.run("destination", async |c| {
            destinations::get(c, stream, destination).await
        })
        .await
    }

    async fn destinations(&self, stream: &str) -> StoreResult<Vec<DestinationRow>> {
        self.run("destinations", async |c| {
            destinations::list(c, stream).await
        })
        .await
    }

    async fn skipped_ranges(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Vec<SkippedRange>> {
        self.run("skipped_ranges", async |c| {
            destinations::skipped_ranges(c, stream, destination).await
        })
        .await
    }
}

#[async_trait]
impl MarksWrite for PostgresStore {
    async fn register_destination(
        &self,
        stream: &str,
        destination: &str,
        kind: &str,
        enabled: bool,
    ) -> StoreResult<DestinationRow> {
        self.write("register_destination", async |c| {
            destinations::register(c, stream, destination, kind, enabled).await
        })
        .await
    }

    async fn advance(&self, stream: &str, destination: &str, seq: u64) -> StoreResult<()> {
        self.holder_write("advance", async |c| {
            destinations::advance(c, stream, destination, seq).await
        })
        .await
    }

    async fn set_last_error(
        &self,
        stream: &str,
        destination: &str,
        error: Option<&str>,
    ) -> StoreResult<()> {
        self.holder_write("set_last_error", async |c| {
            destinations::set_last_error(c, stream, destination, error).await
        })
        .await
    }

    async fn set_paused(&self, stream: &str, destination: &str, paused: bool) -> StoreResult<()> {
        self.run("set_paused", async |c| {
            destinations::set_paused(c, stream, destination, paused).await
        })
        .await
    }

    async fn set_enabled(
        &self,
        stream: &str,
        destination: &str,
        enabled: bool,
    ) -> StoreResult<Option<SkippedRange>> {
        self.write("set_enabled", async |c| {
            destinations::set_enabled(c, stream, destination, enabled).await
        })
        .await
    }

    async fn save_breaker(
        &self,
        stream: &str,
        destination: &str,
        state: &BreakerState,
    ) -> StoreResult<()> {
        self.holder_write("save_breaker", async |c| {
            destinations::save_breaker(c, stream, destination, state).await
        })
        .await
    }
}

#[async_trait]
impl DeadLettersRead for PostgresStore {
    async fn dead_letters(
        &self,
        stream: &str,
        destination: &str,
        state: Option<DeadLetterState>,
    ) -> StoreResult<Vec<DeadLetterRow>> {
        self.run("dead_letters", async |c| {
            dead_letters::list(c, stream, destination, state).await
        })
        .await
    }

    async fn dead_letter_get(&self, id: i64) -> StoreResult<(DeadLetterRow, Batch)> {
        let found = self
            .run("dead_letter_get", async |c| dead_letters::get(c, id).await)
            .await?;
        decode_dead_letter(found).await
    }

    async fn next_replay(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Option<(DeadLetterRow, Batch)>> {
        let found = self
            .run("next_replay", async |c| {
                dead_letters::next_replay(c, stream, destination).await
            })
            .await?;
        let Some((row, bytes)) = found else {
            return Ok(None);
        };
        let (id, seq) = (row.id, row.seq);
        decode_dead_letter((row, bytes))
            .await
            .map(Some)
            .map_err(|e| match e {
                StoreError::Payload { source, .. } => StoreError::ReplayPayload { id, seq, source },
                other => other,
            })
    }
}

#[async_trait]
impl DeadLettersWrite for PostgresStore {
    async fn dead_letter(
        &self,
        destination: &str,
        batch: &Batch,
        reason: ReasonClass,
        error: &str,
        attempts: u32,
    ) -> StoreResult<i64> {
        let (seq, copy) = (batch.meta.seq, batch.clone());
        let bytes = blocking("encoding a dead letter", move || {
            payload::of_batch(&copy).map_err(|e| {
                StoreError::Backend(
                    anyhow::Error::new(e).context(format!("encoding the dead letter of seq {seq}")),
                )
            })
        })
        .await?;
        self.write("dead_letter", async |c| {
            dead_letters::insert(c, destination, &batch.meta, &bytes, reason, error, attempts).await
        })
        .await
    }

    async fn dead_letter_undecodable(
        &self,
        stream: &str,
        destination: &str,
        seq: u64,
        error: &str,
    ) -> StoreResult<i64> {
        self.write("dead_letter_undecodable", async |c| {
            let spooled = spool::next_batch(c, stream, seq.saturating_sub(1))
                .await?
                .filter(|b| b.meta.seq == seq)
                .ok_or_else(|| {
                    StoreError::Backend(anyhow::anyhow!(
                        "seq {seq} of stream {stream:?} is not in the spool"
                    ))
                })?;
            dead_letters::insert(
                c,
                destination,
                &spooled.meta,
                &spooled.payload,
                ReasonClass::Encoding,
                error,
                0,
            )
            .await
        })
        .await
    }

    async fn request_replay(
        &self,
        stream: &str,
        destination: &str,
        id: Option<i64>,
        actor: &str,
    ) -> StoreResult<u64> {
        self.write("request_replay", async |c| {
            dead_letters::request_replay(c, stream, destination, id, actor).await
        })
        .await
    }

    async fn finish_replay(
        &self,
        id: i64,
        outcome: Result<(), (ReasonClass, String)>,
    ) -> StoreResult<()> {
        self.write("finish_replay", async |c| {
            dead_letters::finish_replay(c, id, outcome).await
        })
        .await
    }

    async fn discard(
        &self,
        stream: &str,
        destination: &str,
        id: Option<i64>,
        actor: &str,
    ) -> StoreResult<Vec<DeadLetterRow>> {
        self.write("discard", async |c| {
            dead_letters::discard(c, stream, destination, id, actor).await
        })
        .await
    }
}

#[async_trait]
impl AuditRead for PostgresStore {
    async fn audit_log(&self, stream: Option<&str>, limit: u32) -> StoreResult<Vec<AuditEntry>> {
        self.run("audit_log", async |c| {
            dead_letters::audit_log(c, stream, limit).await
        })
        .await
    }
}

#[async_trait]
impl AuditWrite for PostgresStore {
    async fn record_audit(&self, entry: NewAudit) -> StoreResult<i64> {
        self.run("record_audit", async |c| {
            dead_letters::insert_audit(c, &entry).await
        })
        .await
    }
}
