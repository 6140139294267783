//! Streams, staging, the spool and its garbage collection.

use abrq_core::{idempotency_key, staging_nonce, BatchMeta};
use rusqlite::{params, Connection, OptionalExtension};

use super::rows::{corrupt, from_ms, now, seq_bound, stream_ids, time, to_ms};
use crate::store::{StoreError, StoreResult};
use crate::types::{Backlog, NewBatch, RequestKey, SpoolStats, StageOutcome, StreamRow};

/// A spooled batch as stored; decoded after its connection is released.
pub(crate) struct Spooled {
    pub meta: BatchMeta,
    pub payload: Vec<u8>,
}

pub(crate) fn register_stream(conn: &Connection, name: &str) -> StoreResult<StreamRow> {
    conn.prepare_cached(
        "INSERT INTO streams (name, uuid, created_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO NOTHING",
    )?
    .execute(params![
        name,
        uuid::Uuid::new_v4().to_string(),
        to_ms(now())
    ])?;
    let s = stream_ids(conn, name)?;
    Ok(StreamRow {
        name: name.to_owned(),
        uuid: s.uuid,
        last_seq: s.last_seq,
    })
}

pub(crate) fn streams(conn: &Connection) -> StoreResult<Vec<StreamRow>> {
    let mut stmt = conn.prepare_cached("SELECT name, uuid, last_seq FROM streams ORDER BY name")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, u64>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (name, uuid, last_seq) = row?;
        let uuid = uuid::Uuid::parse_str(&uuid).map_err(|_| corrupt("stream uuid", &uuid))?;
        out.push(StreamRow {
            name,
            uuid,
            last_seq,
        });
    }
    Ok(out)
}

pub(crate) fn cursor(conn: &Connection, stream: &str) -> StoreResult<Option<String>> {
    conn.prepare_cached("SELECT cursor FROM streams WHERE name = ?1")?
        .query_row([stream], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))
}

/// Stages in the caller's transaction: request-key check, gapless seqs,
/// spool rows, last_seq, running totals, cursor and the request key.
pub(crate) fn stage(
    conn: &Connection,
    stream: &str,
    batches: &[NewBatch],
    cursor: Option<&str>,
    request_key: Option<RequestKey<'_>>,
) -> StoreResult<StageOutcome> {
    let s = stream_ids(conn, stream)?;
    if let Some(req) = request_key {
        let seen = conn
            .prepare_cached(
                "SELECT first_seq, last_seq, digest FROM ingest_requests
                 WHERE stream_id = ?1 AND key = ?2",
            )?
            .query_row(params![s.id, req.key], |r| {
                Ok((
                    r.get::<_, Option<u64>>(0)?,
                    r.get::<_, Option<u64>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .optional()?;
        if let Some((first_seq, last_seq, digest)) = seen {
            // Keys stored before digests were kept match any body.
            if digest.is_some_and(|d| d != req.digest) {
                return Ok(StageOutcome::Conflict);
            }
            return Ok(StageOutcome::Duplicate {
                first_seq,
                last_seq,
            });
        }
    }

    let staged_at = to_ms(now());
    let mut insert = conn.prepare_cached(
        "INSERT INTO spool (stream_id, seq, idempotency_key, staged_at, records, bytes, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    let mut seqs = Vec::with_capacity(batches.len());
    let (mut records, mut bytes) = (0u64, 0u64);
    for (seq, b) in (s.last_seq + 1..).zip(batches) {
        let key = idempotency_key(s.uuid, seq, staging_nonce());
        insert.execute(params![
            s.id, seq, key, staged_at, b.records, b.bytes, b.payload
        ])?;
        seqs.push(seq);
        records += b.records;
        bytes += b.bytes;
    }
    let last_seq = seqs.last().copied().unwrap_or(s.last_seq);

    conn.prepare_cached(
        "UPDATE streams SET
             last_seq = ?2,
             cursor = COALESCE(?3, cursor),
             spool_batches = spool_batches + ?4,
             spool_records = spool_records + ?5,
             spool_bytes = spool_bytes + ?6
         WHERE id = ?1",
    )?
    .execute(params![
        s.id,
        last_seq,
        cursor,
        seqs.len() as u64,
        records,
        bytes
    ])?;

    if let Some(req) = request_key {
        conn.prepare_cached(
            "INSERT INTO ingest_requests (stream_id, key, first_seq, last_seq, at, digest)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            s.id,
            req.key,
            seqs.first(),
            seqs.last(),
            staged_at,
            req.digest
        ])?;
    }
    Ok(StageOutcome::Staged(seqs))
}

pub(crate) fn expire_request_keys(
    conn: &Connection,
    before: chrono::DateTime<chrono::Utc>,
) -> StoreResult<u64> {
    let n = conn
        .prepare_cached("DELETE FROM ingest_requests WHERE at < ?1")?
        .execute([to_ms(before)])?;
    Ok(n as u64)
}

pub(crate) fn next_batch(
    conn: &Connection,
    stream: &str,
    after: u64,
) -> StoreResult<Option<Spooled>> {
    let s = stream_ids(conn, stream)?;
    let found = conn
        .prepare_cached(
            "SELECT seq, idempotency_key, staged_at, records, bytes, payload
             FROM spool WHERE stream_id = ?1 AND seq > ?2
             ORDER BY seq LIMIT 1",
        )?
        .query_row(params![s.id, seq_bound(after)], |r| {
            Ok(Spooled {
                meta: BatchMeta {
                    stream: stream.to_owned(),
                    seq: r.get(0)?,
                    idempotency_key: r.get(1)?,
                    staged_at: time(r, 2)?,
                    records: r.get(3)?,
                    bytes: r.get(4)?,
                },
                payload: r.get(5)?,
            })
        })
        .optional()?;
    Ok(found)
}

/// One statement, so the totals and the first seq come from one snapshot.
pub(crate) fn spool_stats(conn: &Connection, stream: &str) -> StoreResult<SpoolStats> {
    conn.prepare_cached(
        "SELECT spool_batches, spool_bytes, spool_records, last_seq,
                (SELECT MIN(seq) FROM spool WHERE stream_id = streams.id)
         FROM streams WHERE name = ?1",
    )?
    .query_row([stream], |r| {
        Ok(SpoolStats {
            batches: r.get(0)?,
            bytes: r.get(1)?,
            records: r.get(2)?,
            last_seq: r.get(3)?,
            first_seq: r.get(4)?,
        })
    })
    .optional()?
    .ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))
}

pub(crate) fn backlog(conn: &Connection, stream: &str, after: u64) -> StoreResult<Backlog> {
    let s = stream_ids(conn, stream)?;
    let (batches, records, bytes, oldest): (u64, u64, u64, Option<i64>) = conn
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(records), 0), COALESCE(SUM(bytes), 0), MIN(staged_at)
             FROM spool WHERE stream_id = ?1 AND seq > ?2",
        )?
        .query_row(params![s.id, seq_bound(after)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
    Ok(Backlog {
        batches,
        records,
        bytes,
        oldest_staged_at: oldest.map(from_ms),
    })
}

/// Deletes spooled batches at or below the minimum mark of the enabled
/// destinations (paused ones included: pausing must not lose data).
pub(crate) fn gc(conn: &Connection, stream: &str) -> StoreResult<u64> {
    let s = stream_ids(conn, stream)?;
    let floor: Option<u64> = conn
        .prepare_cached("SELECT MIN(hwm) FROM destinations WHERE stream_id = ?1 AND enabled = 1")?
        .query_row([s.id], |r| r.get(0))?;
    // No enabled destination: nobody has passed anything, keep it all.
    let Some(floor) = floor else { return Ok(0) };

    let (batches, records, bytes): (u64, u64, u64) = conn
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(records), 0), COALESCE(SUM(bytes), 0)
             FROM spool WHERE stream_id = ?1 AND seq <= ?2",
        )?
        .query_row(params![s.id, seq_bound(floor)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    if batches == 0 {
        return Ok(0);
    }
    conn.prepare_cached("DELETE FROM spool WHERE stream_id = ?1 AND seq <= ?2")?
        .execute(params![s.id, seq_bound(floor)])?;
    conn.prepare_cached(
        "UPDATE streams SET
             spool_batches = spool_batches - ?2,
             spool_records = spool_records - ?3,
             spool_bytes = spool_bytes - ?4
         WHERE id = ?1",
    )?
    .execute(params![s.id, batches, records, bytes])?;
    Ok(batches)
}
