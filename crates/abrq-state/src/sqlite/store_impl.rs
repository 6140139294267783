//! The store traits for `SqliteStore`: each method picks the writer or a
//! reader and runs one of the module functions on the blocking pool.
//! Payloads are encoded before the writer lock is taken and decoded after a
//! reader is released, so neither holds a connection.

use abrq_core::{Batch, BreakerState, ReasonClass};
use async_trait::async_trait;

use super::spool::Spooled;
use super::{dead_letters, destinations, spool, SqliteStore};
use crate::payload;
use crate::store::{
    AuditRead, AuditWrite, DeadLettersRead, DeadLettersWrite, MarksRead, MarksWrite, SpoolRead,
    SpoolWrite, StoreError, StoreResult,
};
use crate::types::*;

fn decode(spooled: Spooled) -> StoreResult<Batch> {
    let items = payload::decode(spooled.meta.seq, &spooled.payload)?;
    Ok(Batch {
        meta: spooled.meta,
        items,
        lines: None,
    })
}

fn decode_dead_letter(
    (row, bytes): (DeadLetterRow, Vec<u8>),
) -> StoreResult<(DeadLetterRow, Batch)> {
    let items = payload::decode(row.seq, &bytes)?;
    let meta = abrq_core::BatchMeta {
        stream: row.stream.clone(),
        seq: row.seq,
        idempotency_key: row.idempotency_key.clone(),
        staged_at: row.staged_at,
        records: row.records,
        bytes: row.bytes,
    };
    Ok((row, Batch::new(meta, items)))
}

#[async_trait]
impl SpoolRead for SqliteStore {
    async fn streams(&self) -> StoreResult<Vec<StreamRow>> {
        self.run("streams", |db| db.read(|tx| spool::streams(tx)))
            .await
    }

    async fn cursor(&self, stream: &str) -> StoreResult<Option<String>> {
        let s = stream.to_owned();
        self.run("cursor", move |db| db.read(|tx| spool::cursor(tx, &s)))
            .await
    }

    async fn next_batch(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>> {
        let s = stream.to_owned();
        self.run("next_batch", move |db| {
            db.read(|tx| spool::next_batch(tx, &s, after))?
                .map(decode)
                .transpose()
        })
        .await
    }

    async fn next_lines(&self, stream: &str, after: u64) -> StoreResult<Option<Batch>> {
        let s = stream.to_owned();
        self.run("next_batch", move |db| {
            let found = db.read(|tx| spool::next_batch(tx, &s, after))?;
            Ok(found.map(|b| Batch::lines(b.meta, b.payload)))
        })
        .await
    }

    async fn spool_stats(&self, stream: &str) -> StoreResult<SpoolStats> {
        let s = stream.to_owned();
        self.run("spool_stats", move |db| {
            db.read(|tx| spool::spool_stats(tx, &s))
        })
        .await
    }

    async fn backlog(&self, stream: &str, after: u64) -> StoreResult<Backlog> {
        let s = stream.to_owned();
        self.run("backlog", move |db| {
            db.read(|tx| spool::backlog(tx, &s, after))
        })
        .await
    }
}

#[async_trait]
impl SpoolWrite for SqliteStore {
    async fn register_stream(&self, name: &str) -> StoreResult<StreamRow> {
        let name = name.to_owned();
        self.run("register_stream", move |db| {
            db.write(|tx| spool::register_stream(tx, &name))
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
        let s = stream.to_owned();
        let key = request_key.map(|k| (k.key.to_owned(), k.digest.to_owned()));
        self.run("stage", move |db| {
            let key = key.as_ref().map(|(key, digest)| RequestKey { key, digest });
            db.write(|tx| spool::stage(tx, &s, &batches, cursor.as_deref(), key))
        })
        .await
    }

    async fn expire_request_keys(&self, before: chrono::DateTime<chrono::Utc>) -> StoreResult<u64> {
        self.run("expire_request_keys", move |db| {
            db.write(|tx| spool::expire_request_keys(tx, before))
        })
        .await
    }

    async fn gc(&self, stream: &str) -> StoreResult<u64> {
        let s = stream.to_owned();
        self.run("gc", move |db| db.write(|tx| spool::gc(tx, &s)))
            .await
    }
}

#[async_trait]
impl MarksRead for SqliteStore {
    async fn destination(&self, stream: &str, destination: &str) -> StoreResult<DestinationRow> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("destination", move |db| {
            db.read(|tx| destinations::get(tx, &s, &d))
        })
        .await
    }

    async fn destinations(&self, stream: &str) -> StoreResult<Vec<DestinationRow>> {
        let s = stream.to_owned();
        self.run("destinations", move |db| {
            db.read(|tx| destinations::list(tx, &s))
        })
        .await
    }

    async fn skipped_ranges(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Vec<SkippedRange>> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("skipped_ranges", move |db| {
            db.read(|tx| destinations::skipped_ranges(tx, &s, &d))
        })
        .await
    }
}

#[async_trait]
impl MarksWrite for SqliteStore {
    async fn register_destination(
        &self,
        stream: &str,
        destination: &str,
        kind: &str,
        enabled: bool,
    ) -> StoreResult<DestinationRow> {
        let (s, d, k) = (stream.to_owned(), destination.to_owned(), kind.to_owned());
        self.run("register_destination", move |db| {
            db.write(|tx| destinations::register(tx, &s, &d, &k, enabled))
        })
        .await
    }

    async fn advance(&self, stream: &str, destination: &str, seq: u64) -> StoreResult<()> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("advance", move |db| {
            db.write(|tx| destinations::advance(tx, &s, &d, seq))
        })
        .await
    }

    async fn set_last_error(
        &self,
        stream: &str,
        destination: &str,
        error: Option<&str>,
    ) -> StoreResult<()> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        let e = error.map(str::to_owned);
        self.run("set_last_error", move |db| {
            db.write(|tx| destinations::set_last_error(tx, &s, &d, e.as_deref()))
        })
        .await
    }

    async fn set_paused(&self, stream: &str, destination: &str, paused: bool) -> StoreResult<()> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("set_paused", move |db| {
            db.write(|tx| destinations::set_paused(tx, &s, &d, paused))
        })
        .await
    }

    async fn set_enabled(
        &self,
        stream: &str,
        destination: &str,
        enabled: bool,
    ) -> StoreResult<Option<SkippedRange>> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("set_enabled", move |db| {
            db.write(|tx| destinations::set_enabled(tx, &s, &d, enabled))
        })
        .await
    }

    async fn save_breaker(
        &self,
        stream: &str,
        destination: &str,
        state: &BreakerState,
    ) -> StoreResult<()> {
        let (s, d, state) = (stream.to_owned(), destination.to_owned(), *state);
        self.run("save_breaker", move |db| {
            db.write(|tx| destinations::save_breaker(tx, &s, &d, &state))
        })
        .await
    }
}

#[async_trait]
impl DeadLettersRead for SqliteStore {
    async fn dead_letters(
        &self,
        stream: &str,
        destination: &str,
        state: Option<DeadLetterState>,
    ) -> StoreResult<Vec<DeadLetterRow>> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("dead_letters", move |db| {
            db.read(|tx| dead_letters::list(tx, &s, &d, state))
        })
        .await
    }

    async fn dead_letter_get(&self, id: i64) -> StoreResult<(DeadLetterRow, Batch)> {
        self.run("dead_letter_get", move |db| {
            decode_dead_letter(db.read(|tx| dead_letters::get(tx, id))?)
        })
        .await
    }

    async fn next_replay(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Option<(DeadLetterRow, Batch)>> {
        let (s, d) = (stream.to_owned(), destination.to_owned());
        self.run("next_replay", move |db| {
            let Some((row, bytes)) = db.read(|tx| dead_letters::next_replay(tx, &s, &d))? else {
                return Ok(None);
            };
            let (id, seq) = (row.id, row.seq);
            decode_dead_letter((row, bytes))
                .map(Some)
                .map_err(|e| match e {
                    StoreError::Payload { source, .. } => {
                        StoreError::ReplayPayload { id, seq, source }
                    }
                    other => other,
                })
        })
        .await
    }
}

#[async_trait]
impl DeadLettersWrite for SqliteStore {
    async fn dead_letter(
        &self,
        destination: &str,
        batch: &Batch,
        reason: ReasonClass,
        error: &str,
        attempts: u32,
    ) -> StoreResult<i64> {
        let (d, e) = (destination.to_owned(), error.to_owned());
        let (meta, batch) = (batch.meta.clone(), batch.clone());
        self.run("dead_letter", move |db| {
            let bytes = payload::of_batch(&batch).map_err(|e| {
                StoreError::Backend(
                    anyhow::Error::new(e)
                        .context(format!("encoding the dead letter of seq {}", meta.seq)),
                )
            })?;
            db.write(|tx| dead_letters::insert(tx, &d, &meta, &bytes, reason, &e, attempts))
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
        let (s, d, e) = (stream.to_owned(), destination.to_owned(), error.to_owned());
        self.run("dead_letter_undecodable", move |db| {
            db.write(|tx| {
                let spooled = spool::next_batch(tx, &s, seq.saturating_sub(1))?
                    .filter(|b| b.meta.seq == seq)
                    .ok_or_else(|| {
                        StoreError::Backend(anyhow::anyhow!(
                            "seq {seq} of stream {s:?} is not in the spool"
                        ))
                    })?;
                dead_letters::insert(
                    tx,
                    &d,
                    &spooled.meta,
                    &spooled.payload,
                    ReasonClass::Encoding,
                    &e,
                    0,
                )
            })
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
        let (s, d, a) = (stream.to_owned(), destination.to_owned(), actor.to_owned());
        self.run("request_replay", move |db| {
            db.write(|tx| dead_letters::request_replay(tx, &s, &d, id, &a))
        })
        .await
    }

    async fn finish_replay(
        &self,
        id: i64,
        outcome: Result<(), (ReasonClass, String)>,
    ) -> StoreResult<()> {
        self.run("finish_replay", move |db| {
            db.write(|tx| dead_letters::finish_replay(tx, id, outcome))
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
        let (s, d, a) = (stream.to_owned(), destination.to_owned(), actor.to_owned());
        self.run("discard", move |db| {
            db.write(|tx| dead_letters::discard(tx, &s, &d, id, &a))
        })
        .await
    }
}

#[async_trait]
impl AuditRead for SqliteStore {
    async fn audit_log(&self, stream: Option<&str>, limit: u32) -> StoreResult<Vec<AuditEntry>> {
        let s = stream.map(str::to_owned);
        self.run("audit_log", move |db| {
            db.read(|tx| dead_letters::audit_log(tx, s.as_deref(), limit))
        })
        .await
    }
}

#[async_trait]
impl AuditWrite for SqliteStore {
    async fn record_audit(&self, entry: NewAudit) -> StoreResult<i64> {
        self.run("record_audit", move |db| {
            db.write(|tx| dead_letters::insert_audit(tx, &entry))
        })
        .await
    }
}
