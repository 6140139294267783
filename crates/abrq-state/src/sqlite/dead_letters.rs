//! Dead letters (each with its own copy of the batch) and the audit log.

use abrq_core::{BatchMeta, ReasonClass};
use anyhow::{anyhow, Context as _};
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::json;

use super::rows::{corrupt, dest_ids, now, time, to_ms};
use crate::store::{StoreError, StoreResult};
use crate::types::{AuditEntry, DeadLetterRow, DeadLetterState, NewAudit};

/// The row without its payload: lists never read the batch copies.
const SELECT_ROW: &str = "SELECT dl.id, s.name, d.name, dl.seq, dl.idempotency_key, dl.staged_at,
            dl.records, dl.bytes, dl.reason_class, dl.error, dl.attempts, dl.state,
            dl.replay_requested, dl.created_at, dl.updated_at
     FROM dead_letters dl
     JOIN destinations d ON d.id = dl.destination_id
     JOIN streams s ON s.id = d.stream_id";

/// The row with its payload as column 15.
const SELECT_FULL: &str = "SELECT dl.id, s.name, d.name, dl.seq, dl.idempotency_key, dl.staged_at,
            dl.records, dl.bytes, dl.reason_class, dl.error, dl.attempts, dl.state,
            dl.replay_requested, dl.created_at, dl.updated_at, dl.payload
     FROM dead_letters dl
     JOIN destinations d ON d.id = dl.destination_id
     JOIN streams s ON s.id = d.stream_id";

/// A row as read, before the text columns are parsed (a parse failure is
/// not a rusqlite error, so it happens outside the row closure).
struct Raw {
    row: DeadLetterRow,
    reason: String,
    state: String,
    payload: Vec<u8>,
}

fn read_meta(r: &Row<'_>) -> rusqlite::Result<Raw> {
    read_raw(r, false)
}

fn read_full(r: &Row<'_>) -> rusqlite::Result<Raw> {
    read_raw(r, true)
}

fn read_raw(r: &Row<'_>, with_payload: bool) -> rusqlite::Result<Raw> {
    Ok(Raw {
        row: DeadLetterRow {
            id: r.get(0)?,
            stream: r.get(1)?,
            destination: r.get(2)?,
            seq: r.get(3)?,
            idempotency_key: r.get(4)?,
            staged_at: time(r, 5)?,
            records: r.get(6)?,
            bytes: r.get(7)?,
            reason_class: ReasonClass::Rejected,
            error: r.get(9)?,
            attempts: r.get(10)?,
            state: DeadLetterState::Pending,
            replay_requested: r.get(12)?,
            created_at: time(r, 13)?,
            updated_at: time(r, 14)?,
        },
        reason: r.get(8)?,
        state: r.get(11)?,
        payload: if with_payload { r.get(15)? } else { Vec::new() },
    })
}

impl Raw {
    fn parse(mut self) -> StoreResult<(DeadLetterRow, Vec<u8>)> {
        self.row.reason_class = ReasonClass::parse(&self.reason)
            .ok_or_else(|| corrupt("reason class", &self.reason))?;
        self.row.state = DeadLetterState::parse(&self.state)
            .ok_or_else(|| corrupt("dead letter state", &self.state))?;
        Ok((self.row, self.payload))
    }
}

fn one(conn: &Connection, id: i64, with_payload: bool) -> StoreResult<(DeadLetterRow, Vec<u8>)> {
    let sql = if with_payload {
        SELECT_FULL
    } else {
        SELECT_ROW
    };
    conn.prepare_cached(&format!("{sql} WHERE dl.id = ?1"))?
        .query_row([id], |r| read_raw(r, with_payload))
        .optional()?
        .ok_or(StoreError::UnknownDeadLetter(id))?
        .parse()
}

/// One dead letter of the named destination, which must be pending.
fn pending_of(conn: &Connection, destination_id: i64, id: i64) -> StoreResult<DeadLetterRow> {
    let found = conn
        .prepare_cached(&format!(
            "{SELECT_ROW} WHERE dl.id = ?1 AND dl.destination_id = ?2"
        ))?
        .query_row([id, destination_id], read_meta)
        .optional()?;
    let (row, _) = found.ok_or(StoreError::UnknownDeadLetter(id))?.parse()?;
    ensure_pending(&row)?;
    Ok(row)
}

fn ensure_pending(row: &DeadLetterRow) -> StoreResult<()> {
    match row.state {
        DeadLetterState::Pending => Ok(()),
        DeadLetterState::Replayed | DeadLetterState::Discarded => Err(StoreError::NotPending {
            id: row.id,
            state: row.state.as_str(),
        }),
    }
}

/// Inserts the dead letter and moves the destination's mark past it. A
/// second call for the same (destination, seq) returns the existing id, so
/// a retried call cannot duplicate a dead letter.
pub(crate) fn insert(
    conn: &Connection,
    destination: &str,
    meta: &BatchMeta,
    payload: &[u8],
    reason: ReasonClass,
    error: &str,
    attempts: u32,
) -> StoreResult<i64> {
    let d = dest_ids(conn, &meta.stream, destination)?;
    if meta.seq > d.last_seq {
        return Err(StoreError::Backend(anyhow!(
            "cannot dead-letter seq {} for {}/{destination}: the last staged seq is {}",
            meta.seq,
            meta.stream,
            d.last_seq
        )));
    }
    let at = to_ms(now());
    let inserted: Option<i64> = conn
        .prepare_cached(
            "INSERT INTO dead_letters
                 (destination_id, seq, idempotency_key, staged_at, records, bytes, reason_class,
                  error, attempts, state, created_at, updated_at, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending', ?10, ?10, ?11)
             ON CONFLICT (destination_id, seq) DO NOTHING
             RETURNING id",
        )?
        .query_row(
            params![
                d.id,
                meta.seq,
                meta.idempotency_key,
                to_ms(meta.staged_at),
                meta.records,
                meta.bytes,
                reason.as_str(),
                error,
                attempts,
                at,
                payload
            ],
            |r| r.get(0),
        )
        .optional()?;
    let id = match inserted {
        Some(id) => id,
        None => conn
            .prepare_cached("SELECT id FROM dead_letters WHERE destination_id = ?1 AND seq = ?2")?
            .query_row(params![d.id, meta.seq], |r| r.get(0))?,
    };
    conn.prepare_cached(
        "UPDATE destinations SET hwm = MAX(hwm, ?2), updated_at = ?3 WHERE id = ?1",
    )?
    .execute(params![d.id, meta.seq, at])?;
    Ok(id)
}

pub(crate) fn list(
    conn: &Connection,
    stream: &str,
    destination: &str,
    state: Option<DeadLetterState>,
) -> StoreResult<Vec<DeadLetterRow>> {
    let d = dest_ids(conn, stream, destination)?;
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT_ROW} WHERE dl.destination_id = ?1 AND (?2 IS NULL OR dl.state = ?2) ORDER BY dl.id"
    ))?;
    let rows = stmt.query_map(params![d.id, state.map(DeadLetterState::as_str)], read_meta)?;
    rows.map(|r| Ok(r?.parse()?.0)).collect()
}

pub(crate) fn get(conn: &Connection, id: i64) -> StoreResult<(DeadLetterRow, Vec<u8>)> {
    one(conn, id, true)
}

pub(crate) fn request_replay(
    conn: &Connection,
    stream: &str,
    destination: &str,
    id: Option<i64>,
    actor: &str,
) -> StoreResult<u64> {
    let d = dest_ids(conn, stream, destination)?;
    let at = to_ms(now());
    let marked = match id {
        Some(id) => {
            pending_of(conn, d.id, id)?;
            conn.prepare_cached(
                "UPDATE dead_letters SET replay_requested = 1, replay_requested_by = ?2,
                     updated_at = ?3
                 WHERE id = ?1",
            )?
            .execute(params![id, actor, at])?
        }
        None => conn
            .prepare_cached(
                "UPDATE dead_letters SET replay_requested = 1, replay_requested_by = ?2,
                     updated_at = ?3
                 WHERE destination_id = ?1 AND state = 'pending'",
            )?
            .execute(params![d.id, actor, at])?,
    };
    Ok(marked as u64)
}

pub(crate) fn next_replay(
    conn: &Connection,
    stream: &str,
    destination: &str,
) -> StoreResult<Option<(DeadLetterRow, Vec<u8>)>> {
    let d = dest_ids(conn, stream, destination)?;
    conn.prepare_cached(&format!(
        "{SELECT_FULL} WHERE dl.destination_id = ?1 AND dl.state = 'pending'
             AND dl.replay_requested = 1
         ORDER BY dl.id LIMIT 1"
    ))?
    .query_row([d.id], read_full)
    .optional()?
    .map(Raw::parse)
    .transpose()
}

pub(crate) fn finish_replay(
    conn: &Connection,
    id: i64,
    outcome: Result<(), (ReasonClass, String)>,
) -> StoreResult<()> {
    let (row, _) = one(conn, id, false)?;
    ensure_pending(&row)?;
    let at = to_ms(now());
    match outcome {
        Ok(()) => conn
            .prepare_cached(
                "UPDATE dead_letters SET state = 'replayed', replay_requested = 0, updated_at = ?2
                 WHERE id = ?1",
            )?
            .execute(params![id, at])?,
        Err((reason, error)) => conn
            .prepare_cached(
                "UPDATE dead_letters SET reason_class = ?2, error = ?3, replay_requested = 0,
                     updated_at = ?4
                 WHERE id = ?1",
            )?
            .execute(params![id, reason.as_str(), error, at])?,
    };
    Ok(())
}

/// Discards pending dead letters with one audit entry each, in the caller's
/// transaction: data loss is never recorded apart from its audit trail.
pub(crate) fn discard(
    conn: &Connection,
    stream: &str,
    destination: &str,
    id: Option<i64>,
    actor: &str,
) -> StoreResult<Vec<DeadLetterRow>> {
    let d = dest_ids(conn, stream, destination)?;
    let targets = match id {
        Some(id) => vec![pending_of(conn, d.id, id)?],
        None => list(conn, stream, destination, Some(DeadLetterState::Pending))?,
    };
    let at = now();
    let mut update = conn.prepare_cached(
        "UPDATE dead_letters SET state = 'discarded', replay_requested = 0, updated_at = ?2
         WHERE id = ?1",
    )?;
    let mut out = Vec::with_capacity(targets.len());
    for mut row in targets {
        update.execute(params![row.id, to_ms(at)])?;
        let detail = json!({
            "id": row.id,
            "seq": row.seq,
            "records": row.records,
            "bytes": row.bytes,
            "reason_class": row.reason_class.as_str(),
            "idempotency_key": row.idempotency_key,
        });
        let entry = NewAudit {
            actor: actor.to_owned(),
            action: "discard".to_owned(),
            stream: row.stream.clone(),
            destination: Some(row.destination.clone()),
            detail,
        };
        insert_audit(conn, &entry)?;
        row.state = DeadLetterState::Discarded;
        row.replay_requested = false;
        row.updated_at = at;
        out.push(row);
    }
    Ok(out)
}

pub(crate) fn insert_audit(conn: &Connection, entry: &NewAudit) -> StoreResult<i64> {
    let detail = serde_json::to_string(&entry.detail).context("encoding audit detail")?;
    let id = conn
        .prepare_cached(
            "INSERT INTO audit (at, actor, action, stream, destination, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        )?
        .query_row(
            params![
                to_ms(now()),
                entry.actor,
                entry.action,
                entry.stream,
                entry.destination,
                detail
            ],
            |r| r.get(0),
        )?;
    Ok(id)
}

pub(crate) fn audit_log(
    conn: &Connection,
    stream: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<AuditEntry>> {
    const COLUMNS: &str = "SELECT id, at, actor, action, stream, destination, detail FROM audit";
    let read = |r: &Row<'_>| -> rusqlite::Result<(AuditEntry, String)> {
        let entry = AuditEntry {
            id: r.get(0)?,
            at: time(r, 1)?,
            actor: r.get(2)?,
            action: r.get(3)?,
            stream: r.get(4)?,
            destination: r.get(5)?,
            detail: serde_json::Value::Null,
        };
        Ok((entry, r.get(6)?))
    };
    // Two statements rather than `?1 IS NULL OR stream = ?1`, which would
    // keep SQLite from using the (stream, id) index.
    let raw: Vec<(AuditEntry, String)> = match stream {
        Some(s) => conn
            .prepare_cached(&format!(
                "{COLUMNS} WHERE stream = ?1 ORDER BY id DESC LIMIT ?2"
            ))?
            .query_map(params![s, limit], read)?
            .collect::<Result<_, _>>()?,
        None => conn
            .prepare_cached(&format!("{COLUMNS} ORDER BY id DESC LIMIT ?1"))?
            .query_map(params![limit], read)?
            .collect::<Result<_, _>>()?,
    };
    raw.into_iter()
        .map(|(mut entry, detail)| {
            entry.detail =
                serde_json::from_str(&detail).map_err(|_| corrupt("audit detail", &detail))?;
            Ok(entry)
        })
        .collect()
}
