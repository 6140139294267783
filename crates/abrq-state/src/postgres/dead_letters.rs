//! Dead letters (each with its own copy of the batch) and the audit log.
//!
//! Calls that check a dead letter's state before changing it lock its row
//! first (`FOR UPDATE`), so two operators cannot both discard, or both
//! finish, the same one.

use abrq_core::{BatchMeta, ReasonClass};
use anyhow::{anyhow, Context as _};
use serde_json::json;
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row as _;

use super::rows::{corrupt, dest_ids, int, now, time_at, to_ms, u64_at};
use crate::store::{StoreError, StoreResult};
use crate::types::{AuditEntry, DeadLetterRow, DeadLetterState, NewAudit};

/// The row without its payload: lists never read the batch copies.
const SELECT_ROW: &str = "SELECT dl.id, s.name, d.name, dl.seq, dl.idempotency_key, dl.staged_at,
            dl.records, dl.bytes, dl.reason_class, dl.error, dl.attempts, dl.state,
            dl.replay_requested, dl.created_at, dl.updated_at
     FROM abrq.dead_letters dl
     JOIN abrq.destinations d ON d.id = dl.destination_id
     JOIN abrq.streams s ON s.id = d.stream_id";

/// The row with its payload as column 15.
const SELECT_FULL: &str = "SELECT dl.id, s.name, d.name, dl.seq, dl.idempotency_key, dl.staged_at,
            dl.records, dl.bytes, dl.reason_class, dl.error, dl.attempts, dl.state,
            dl.replay_requested, dl.created_at, dl.updated_at, dl.payload
     FROM abrq.dead_letters dl
     JOIN abrq.destinations d ON d.id = dl.destination_id
     JOIN abrq.streams s ON s.id = d.stream_id";

fn read_row(r: &PgRow) -> StoreResult<DeadLetterRow> {
    let reason: &str = r.try_get(8)?;
    let state: &str = r.try_get(11)?;
    let attempts: i64 = r.try_get(10)?;
    Ok(DeadLetterRow {
        id: r.try_get(0)?,
        stream: r.try_get(1)?,
        destination: r.try_get(2)?,
        seq: u64_at(r, 3)?,
        idempotency_key: r.try_get(4)?,
        staged_at: time_at(r, 5)?,
        records: u64_at(r, 6)?,
        bytes: u64_at(r, 7)?,
        reason_class: ReasonClass::parse(reason).ok_or_else(|| corrupt("reason class", reason))?,
        error: r.try_get(9)?,
        attempts: u32::try_from(attempts)
            .map_err(|_| corrupt("attempts", &attempts.to_string()))?,
        state: DeadLetterState::parse(state).ok_or_else(|| corrupt("dead letter state", state))?,
        replay_requested: r.try_get(12)?,
        created_at: time_at(r, 13)?,
        updated_at: time_at(r, 14)?,
    })
}

fn read_full(r: &PgRow) -> StoreResult<(DeadLetterRow, Vec<u8>)> {
    Ok((read_row(r)?, r.try_get(15)?))
}

/// One dead letter of the named destination, which must be pending; its
/// row stays locked until the transaction ends.
async fn pending_of(
    c: &mut PgConnection,
    destination_id: i64,
    id: i64,
) -> StoreResult<DeadLetterRow> {
    let sql = format!("{SELECT_ROW} WHERE dl.id = $1 AND dl.destination_id = $2 FOR UPDATE OF dl");
    let row = sqlx::query(&sql)
        .bind(id)
        .bind(destination_id)
        .fetch_optional(c)
        .await?
        .ok_or(StoreError::UnknownDeadLetter(id))?;
    let row = read_row(&row)?;
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

/// Inserts the dead letter and moves the destination's mark past it, in the
/// caller's transaction. A second call for the same (destination, seq)
/// returns the existing id, so a retried call cannot duplicate a dead letter.
pub(super) async fn insert(
    c: &mut PgConnection,
    destination: &str,
    meta: &BatchMeta,
    payload: &[u8],
    reason: ReasonClass,
    error: &str,
    attempts: u32,
) -> StoreResult<i64> {
    let d = dest_ids(c, &meta.stream, destination).await?;
    if meta.seq > d.last_seq {
        return Err(StoreError::Backend(anyhow!(
            "cannot dead-letter seq {} for {}/{destination}: the last staged seq is {}",
            meta.seq,
            meta.stream,
            d.last_seq
        )));
    }
    let at = to_ms(now());
    let seq = int(meta.seq, "seq")?;
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO abrq.dead_letters
             (destination_id, seq, idempotency_key, staged_at, records, bytes, reason_class,
              error, attempts, state, created_at, updated_at, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $10, $11)
         ON CONFLICT (destination_id, seq) DO NOTHING
         RETURNING id",
    )
    .bind(d.id)
    .bind(seq)
    .bind(&meta.idempotency_key)
    .bind(to_ms(meta.staged_at))
    .bind(int(meta.records, "records")?)
    .bind(int(meta.bytes, "bytes")?)
    .bind(reason.as_str())
    .bind(error)
    .bind(i64::from(attempts))
    .bind(at)
    .bind(payload)
    .fetch_optional(&mut *c)
    .await?;
    let id = match inserted {
        Some(id) => id,
        // A statement of its own: it sees the row whoever inserted it.
        None => {
            sqlx::query_scalar(
                "SELECT id FROM abrq.dead_letters WHERE destination_id = $1 AND seq = $2",
            )
            .bind(d.id)
            .bind(seq)
            .fetch_one(&mut *c)
            .await?
        }
    };
    sqlx::query(
        "UPDATE abrq.destinations SET hwm = GREATEST(hwm, $2), updated_at = $3 WHERE id = $1",
    )
    .bind(d.id)
    .bind(seq)
    .bind(at)
    .execute(&mut *c)
    .await?;
    Ok(id)
}

pub(super) async fn list(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    state: Option<DeadLetterState>,
) -> StoreResult<Vec<DeadLetterRow>> {
    let d = dest_ids(c, stream, destination).await?;
    let sql = format!(
        "{SELECT_ROW} WHERE dl.destination_id = $1 AND ($2::text IS NULL OR dl.state = $2)
         ORDER BY dl.id"
    );
    let rows = sqlx::query(&sql)
        .bind(d.id)
        .bind(state.map(DeadLetterState::as_str))
        .fetch_all(c)
        .await?;
    rows.iter().map(read_row).collect()
}

pub(super) async fn get(c: &mut PgConnection, id: i64) -> StoreResult<(DeadLetterRow, Vec<u8>)> {
    let sql = format!("{SELECT_FULL} WHERE dl.id = $1");
    let row = sqlx::query(&sql)
        .bind(id)
        .fetch_optional(c)
        .await?
        .ok_or(StoreError::UnknownDeadLetter(id))?;
    read_full(&row)
}

pub(super) async fn request_replay(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    id: Option<i64>,
    actor: &str,
) -> StoreResult<u64> {
    let d = dest_ids(c, stream, destination).await?;
    if let Some(id) = id {
        pending_of(c, d.id, id).await?;
    }
    // With an id, that one (checked and locked above); without, every
    // pending one of the destination.
    let done = sqlx::query(
        "UPDATE abrq.dead_letters SET replay_requested = true, replay_requested_by = $3,
             updated_at = $4
         WHERE destination_id = $1 AND state = 'pending' AND ($2::bigint IS NULL OR id = $2)",
    )
    .bind(d.id)
    .bind(id)
    .bind(actor)
    .bind(to_ms(now()))
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

pub(super) async fn next_replay(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
) -> StoreResult<Option<(DeadLetterRow, Vec<u8>)>> {
    let d = dest_ids(c, stream, destination).await?;
    let sql = format!(
        "{SELECT_FULL} WHERE dl.destination_id = $1 AND dl.state = 'pending'
             AND dl.replay_requested
         ORDER BY dl.id LIMIT 1"
    );
    let row = sqlx::query(&sql).bind(d.id).fetch_optional(c).await?;
    row.as_ref().map(read_full).transpose()
}

pub(super) async fn finish_replay(
    c: &mut PgConnection,
    id: i64,
    outcome: Result<(), (ReasonClass, String)>,
) -> StoreResult<()> {
    let sql = format!("{SELECT_ROW} WHERE dl.id = $1 FOR UPDATE OF dl");
    let row = sqlx::query(&sql)
        .bind(id)
        .fetch_optional(&mut *c)
        .await?
        .ok_or(StoreError::UnknownDeadLetter(id))?;
    ensure_pending(&read_row(&row)?)?;
    let at = to_ms(now());
    match outcome {
        Ok(()) => {
            sqlx::query(
                "UPDATE abrq.dead_letters SET state = 'replayed', replay_requested = false,
                 updated_at = $2
             WHERE id = $1",
            )
            .bind(id)
            .bind(at)
            .execute(&mut *c)
            .await?
        }
        Err((reason, error)) => {
            sqlx::query(
                "UPDATE abrq.dead_letters SET reason_class = $2, error = $3,
                 replay_requested = false, updated_at = $4
             WHERE id = $1",
            )
            .bind(id)
            .bind(reason.as_str())
            .bind(error)
            .bind(at)
            .execute(&mut *c)
            .await?
        }
    };
    Ok(())
}

/// Discards pending dead letters with one audit entry each, in the caller's
/// transaction: data loss is never recorded apart from its audit trail.
pub(super) async fn discard(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    id: Option<i64>,
    actor: &str,
) -> StoreResult<Vec<DeadLetterRow>> {
    let d = dest_ids(c, stream, destination).await?;
    let targets = match id {
        Some(id) => vec![pending_of(c, d.id, id).await?],
        None => {
            // Locked; rows another transaction discarded meanwhile drop out
            // when the lock is granted (the state is checked again).
            let sql = format!(
                "{SELECT_ROW} WHERE dl.destination_id = $1 AND dl.state = 'pending'
                 ORDER BY dl.id FOR UPDATE OF dl"
            );
            let rows = sqlx::query(&sql).bind(d.id).fetch_all(&mut *c).await?;
            rows.iter().map(read_row).collect::<StoreResult<_>>()?
        }
    };
    let at = now();
    let mut out = Vec::with_capacity(targets.len());
    for mut row in targets {
        sqlx::query(
            "UPDATE abrq.dead_letters SET state = 'discarded', replay_requested = false,
                 updated_at = $2
             WHERE id = $1",
        )
        .bind(row.id)
        .bind(to_ms(at))
        .execute(&mut *c)
        .await?;
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
        insert_audit(c, &entry).await?;
        row.state = DeadLetterState::Discarded;
        row.replay_requested = false;
        row.updated_at = at;
        out.push(row);
    }
    Ok(out)
}

pub(super) async fn insert_audit(c: &mut PgConnection, entry: &NewAudit) -> StoreResult<i64> {
    let detail = serde_json::to_string(&entry.detail).context("encoding audit detail")?;
    let id = sqlx::query_scalar(
        "INSERT INTO abrq.audit (at, actor, action, stream, destination, detail)
         VALUES ($1, $2, $3, $4, $5, $6::json) RETURNING id",
    )
    .bind(to_ms(now()))
    .bind(&entry.actor)
    .bind(&entry.action)
    .bind(&entry.stream)
    .bind(&entry.destination)
    .bind(detail)
    .fetch_one(c)
    .await?;
    Ok(id)
}

pub(super) async fn audit_log(
    c: &mut PgConnection,
    stream: Option<&str>,
    limit: u32,
) -> StoreResult<Vec<AuditEntry>> {
    // Two statements rather than `$1 IS NULL OR stream = $1`, so the
    // (stream, id) index serves the filtered one.
    const COLUMNS: &str =
        "SELECT id, at, actor, action, stream, destination, detail::text FROM abrq.audit";
    let rows = match stream {
        Some(s) => {
            let sql = format!("{COLUMNS} WHERE stream = $1 ORDER BY id DESC LIMIT $2");
            sqlx::query(&sql)
                .bind(s)
                .bind(i64::from(limit))
                .fetch_all(c)
                .await?
        }
        None => {
            let sql = format!("{COLUMNS} ORDER BY id DESC LIMIT $1");
            sqlx::query(&sql)
                .bind(i64::from(limit))
                .fetch_all(c)
                .await?
        }
    };
    rows.iter()
        .map(|r| {
            let detail: &str = r.try_get(6)?;
            Ok(AuditEntry {
                id: r.try_get(0)?,
                at: time_at(r, 1)?,
                actor: r.try_get(2)?,
                action: r.try_get(3)?,
                stream: r.try_get(4)?,
                destination: r.try_get(5)?,
                detail: serde_json::from_str(detail)
                    .map_err(|_| corrupt("audit detail", detail))?,
            })
        })
        .collect()
}
