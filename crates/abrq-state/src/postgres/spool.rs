//! Streams, staging, the spool and its garbage collection.

use abrq_core::{idempotency_key, staging_nonce, BatchMeta};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row as _;

use super::rows::{
    int, lock_stream, now, opt_u64_at, parse_uuid, seq_bound, stream_ids, time_at, to_ms, u64_at,
};
use crate::store::{StoreError, StoreResult};
use crate::types::{Backlog, NewBatch, RequestKey, SpoolStats, StageOutcome, StreamRow};

/// A spooled batch as stored; decoded off the async threads.
pub(super) struct Spooled {
    pub meta: BatchMeta,
    pub payload: Vec<u8>,
}

pub(super) async fn register_stream(c: &mut PgConnection, name: &str) -> StoreResult<StreamRow> {
    sqlx::query(
        "INSERT INTO abrq.streams (name, uuid, created_at) VALUES ($1, $2::uuid, $3)
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(uuid::Uuid::new_v4().to_string())
    .bind(to_ms(now()))
    .execute(&mut *c)
    .await?;
    // A statement of its own: it sees the row whoever inserted it.
    let s = stream_ids(c, name).await?;
    Ok(StreamRow {
        name: name.to_owned(),
        uuid: s.uuid,
        last_seq: s.last_seq,
    })
}

pub(super) async fn streams(c: &mut PgConnection) -> StoreResult<Vec<StreamRow>> {
    let rows = sqlx::query("SELECT name, uuid::text, last_seq FROM abrq.streams ORDER BY name")
        .fetch_all(c)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(StreamRow {
                name: r.try_get(0)?,
                uuid: parse_uuid(r.try_get(1)?)?,
                last_seq: u64_at(r, 2)?,
            })
        })
        .collect()
}

pub(super) async fn cursor(c: &mut PgConnection, stream: &str) -> StoreResult<Option<String>> {
    let row = sqlx::query("SELECT cursor FROM abrq.streams WHERE name = $1")
        .bind(stream)
        .fetch_optional(c)
        .await?
        .ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))?;
    Ok(row.try_get(0)?)
}

/// Stages in the caller's transaction: the stream's row is locked first, so
/// concurrent stages take turns and each continues from the last one's
/// `last_seq` (gapless, unique seqs), and a request key is checked against
/// every stage committed before.
pub(super) async fn stage(
    c: &mut PgConnection,
    stream: &str,
    batches: Vec<NewBatch>,
    cursor: Option<&str>,
    request_key: Option<RequestKey<'_>>,
) -> StoreResult<StageOutcome> {
    let s = lock_stream(c, stream).await?;
    if let Some(req) = request_key {
        let seen = sqlx::query(
            "SELECT first_seq, last_seq, digest FROM abrq.ingest_requests
             WHERE stream_id = $1 AND key = $2",
        )
        .bind(s.id)
        .bind(req.key)
        .fetch_optional(&mut *c)
        .await?;
        if let Some(r) = seen {
            if r.try_get::<&str, _>(2)? != req.digest {
                return Ok(StageOutcome::Conflict);
            }
            return Ok(StageOutcome::Duplicate {
                first_seq: opt_u64_at(&r, 0)?,
                last_seq: opt_u64_at(&r, 1)?,
            });
        }
    }

    let staged_at = to_ms(now());
    let n = batches.len();
    let seqs: Vec<u64> = (s.last_seq + 1..).take(n).collect();
    let last_seq = seqs.last().copied().unwrap_or(s.last_seq);
    let (mut records, mut bytes) = (0u64, 0u64);
    if n > 0 {
        // Columns as arrays, one INSERT for the whole group: one round trip
        // however many batches, and no limit on bind parameters.
        let mut cols = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (&seq, b) in seqs.iter().zip(batches) {
            records += b.records;
            bytes += b.bytes;
            cols.0.push(int(seq, "seq")?);
            cols.1.push(idempotency_key(s.uuid, seq, staging_nonce()));
            cols.2.push(int(b.records, "records")?);
            cols.3.push(int(b.bytes, "bytes")?);
            cols.4.push(b.payload);
        }
        sqlx::query(
            "INSERT INTO abrq.spool
                 (stream_id, seq, idempotency_key, staged_at, records, bytes, payload)
             SELECT $1, seq, key, $2, records, bytes, payload
             FROM UNNEST($3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::bytea[])
                  AS b (seq, key, records, bytes, payload)",
        )
        .bind(s.id)
        .bind(staged_at)
        .bind(cols.0)
        .bind(cols.1)
        .bind(cols.2)
        .bind(cols.3)
        .bind(cols.4)
        .execute(&mut *c)
        .await?;
    }

    sqlx::query(
        "UPDATE abrq.streams SET
             last_seq = $2,
             cursor = COALESCE($3, cursor),
             spool_batches = spool_batches + $4,
             spool_records = spool_records + $5,
             spool_bytes = spool_bytes + $6
         WHERE id = $1",
    )
    .bind(s.id)
    .bind(int(last_seq, "seq")?)
    .bind(cursor)
    .bind(n as i64)
    .bind(int(records, "records")?)
    .bind(int(bytes, "bytes")?)
    .execute(&mut *c)
    .await?;

    if let Some(req) = request_key {
        sqlx::query(
            "INSERT INTO abrq.ingest_requests (stream_id, key, digest, first_seq, last_seq, at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(s.id)
        .bind(req.key)
        .bind(req.digest)
        .bind(seqs.first().map(|&q| int(q, "seq")).transpose()?)
        .bind(seqs.last().map(|&q| int(q, "seq")).transpose()?)
        .bind(staged_at)
        .execute(&mut *c)
        .await?;
    }
    Ok(StageOutcome::Staged(seqs))
}

pub(super) async fn expire_request_keys(
    c: &mut PgConnection,
    before: chrono::DateTime<chrono::Utc>,
) -> StoreResult<u64> {
    let done = sqlx::query("DELETE FROM abrq.ingest_requests WHERE at < $1")
        .bind(to_ms(before))
        .execute(c)
        .await?;
    Ok(done.rows_affected())
}

/// One statement (a drain loop calls it for every batch): the stream, and
/// the lowest spooled batch after `after` if there is one.
pub(super) async fn next_batch(
    c: &mut PgConnection,
    stream: &str,
    after: u64,
) -> StoreResult<Option<Spooled>> {
    let row = sqlx::query(
        "SELECT b.seq, b.idempotency_key, b.staged_at, b.records, b.bytes, b.payload
         FROM abrq.streams s
         LEFT JOIN LATERAL (
             SELECT seq, idempotency_key, staged_at, records, bytes, payload
             FROM abrq.spool WHERE stream_id = s.id AND seq > $2
             ORDER BY seq LIMIT 1
         ) b ON true
         WHERE s.name = $1",
    )
    .bind(stream)
    .bind(seq_bound(after))
    .fetch_optional(c)
    .await?
    .ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))?;
    spooled(&row, stream)
}

/// A spool row read as `seq, idempotency_key, staged_at, records, bytes,
/// payload`; None when the seq is NULL (an outer join found nothing).
pub(super) fn spooled(row: &PgRow, stream: &str) -> StoreResult<Option<Spooled>> {
    let Some(seq) = opt_u64_at(row, 0)? else {
        return Ok(None);
    };
    Ok(Some(Spooled {
        meta: BatchMeta {
            stream: stream.to_owned(),
            seq,
            idempotency_key: row.try_get(1)?,
            staged_at: time_at(row, 2)?,
            records: u64_at(row, 3)?,
            bytes: u64_at(row, 4)?,
        },
        payload: row.try_get(5)?,
    }))
}

/// One statement, so the totals and the first seq come from one snapshot.
pub(super) async fn spool_stats(c: &mut PgConnection, stream: &str) -> StoreResult<SpoolStats> {
    let row = sqlx::query(
        "SELECT spool_batches, spool_bytes, spool_records, last_seq,
                (SELECT MIN(seq) FROM abrq.spool WHERE stream_id = streams.id)
         FROM abrq.streams WHERE name = $1",
    )
    .bind(stream)
    .fetch_optional(c)
    .await?
    .ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))?;
    Ok(SpoolStats {
        batches: u64_at(&row, 0)?,
        bytes: u64_at(&row, 1)?,
        records: u64_at(&row, 2)?,
        last_seq: u64_at(&row, 3)?,
        first_seq: opt_u64_at(&row, 4)?,
    })
}

pub(super) async fn backlog(
    c: &mut PgConnection,
    stream: &str,
    after: u64,
) -> StoreResult<Backlog> {
    // SUM of BIGINT is NUMERIC; the totals fit a BIGINT as the running
    // totals in `streams` do.
    let row = sqlx::query(
        "SELECT COUNT(b.seq), COALESCE(SUM(b.records), 0)::bigint,
                COALESCE(SUM(b.bytes), 0)::bigint, MIN(b.staged_at)
         FROM abrq.streams s
         LEFT JOIN abrq.spool b ON b.stream_id = s.id AND b.seq > $2
         WHERE s.name = $1
         GROUP BY s.id",
    )
    .bind(stream)
    .bind(seq_bound(after))
    .fetch_optional(c)
    .await?
    .ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))?;
    let oldest: Option<i64> = row.try_get(3)?;
    Ok(Backlog {
        batches: u64_at(&row, 0)?,
        records: u64_at(&row, 1)?,
        bytes: u64_at(&row, 2)?,
        oldest_staged_at: oldest.map(super::rows::from_ms),
    })
}

/// Deletes spooled batches at or below the minimum mark of the enabled
/// destinations (paused ones included: pausing must not lose data). The
/// stream's row is locked first, so a destination being enabled or
/// registered meanwhile sees the spool before or after, never halfway.
pub(super) async fn gc(c: &mut PgConnection, stream: &str) -> StoreResult<u64> {
    let s = lock_stream(c, stream).await?;
    let floor: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(hwm) FROM abrq.destinations WHERE stream_id = $1 AND enabled",
    )
    .bind(s.id)
    .fetch_one(&mut *c)
    .await?;
    // No enabled destination: nobody has passed anything, keep it all.
    let Some(floor) = floor else { return Ok(0) };

    // The totals drop by exactly what was deleted (RETURNING), in the same
    // statement; the row is left alone when nothing was.
    let deleted: Option<i64> = sqlx::query_scalar(
        "WITH gone AS (
             DELETE FROM abrq.spool WHERE stream_id = $1 AND seq <= $2
             RETURNING records, bytes
         ), total AS (
             SELECT COUNT(*) AS batches, COALESCE(SUM(records), 0)::bigint AS records,
                    COALESCE(SUM(bytes), 0)::bigint AS bytes
             FROM gone
         )
         UPDATE abrq.streams SET
             spool_batches = spool_batches - total.batches,
             spool_records = spool_records - total.records,
             spool_bytes = spool_bytes - total.bytes
         FROM total
         WHERE id = $1 AND total.batches > 0
         RETURNING total.batches",
    )
    .bind(s.id)
    .bind(floor)
    .fetch_optional(&mut *c)
    .await?;
    Ok(deleted.map_or(0, |n| n as u64))
}
