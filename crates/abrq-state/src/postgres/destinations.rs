//! Destinations: marks, operator state, breakers and skipped ranges.
//!
//! The calls a drain loop makes per batch (advance, last error, breaker)
//! are one UPDATE each, found by names; only when it matches nothing is the
//! reason looked up.

use abrq_core::BreakerState;
use anyhow::{anyhow, Context as _};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row as _;

use super::rows::{
    corrupt, dest_ids, int, lock_stream, now, stream_ids, time_at, to_ms, u64_at,
    unknown_destination,
};
use crate::store::{StoreError, StoreResult};
use crate::types::{DestinationRow, SkippedRange};

const SELECT_ROW: &str =
    "SELECT s.name, d.name, d.kind, d.enabled, d.paused, d.hwm, d.breaker::text, d.last_error
     FROM abrq.destinations d JOIN abrq.streams s ON s.id = d.stream_id";

fn read_row(r: &PgRow) -> StoreResult<DestinationRow> {
    let breaker: &str = r.try_get(6)?;
    Ok(DestinationRow {
        stream: r.try_get(0)?,
        name: r.try_get(1)?,
        kind: r.try_get(2)?,
        enabled: r.try_get(3)?,
        paused: r.try_get(4)?,
        high_water_mark: u64_at(r, 5)?,
        breaker: serde_json::from_str(breaker).map_err(|_| corrupt("breaker state", breaker))?,
        last_error: r.try_get(7)?,
    })
}

/// Registers in the caller's transaction, with the stream's row locked so
/// no GC runs between reading the oldest spooled seq and storing the mark
/// made from it.
pub(super) async fn register(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    kind: &str,
    enabled: bool,
) -> StoreResult<DestinationRow> {
    let s = lock_stream(c, stream).await?;
    // Just before the oldest spooled batch: a new destination receives
    // everything still spooled and its backlog is right from the start.
    let first: Option<i64> =
        sqlx::query_scalar("SELECT MIN(seq) FROM abrq.spool WHERE stream_id = $1")
            .bind(s.id)
            .fetch_one(&mut *c)
            .await?;
    let hwm = first.map_or(int(s.last_seq, "seq")?, |f| f - 1);
    let breaker = breaker_json(&BreakerState::Closed { failures: 0 })?;
    // On conflict only the kind follows the config: enabled, paused and the
    // mark are operator and delivery state, which the store owns.
    sqlx::query(
        "INSERT INTO abrq.destinations
             (stream_id, name, kind, enabled, hwm, breaker, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6::json, $7, $7)
         ON CONFLICT (stream_id, name) DO UPDATE SET kind = excluded.kind",
    )
    .bind(s.id)
    .bind(destination)
    .bind(kind)
    .bind(enabled)
    .bind(hwm)
    .bind(breaker)
    .bind(to_ms(now()))
    .execute(&mut *c)
    .await?;
    get(c, stream, destination).await
}

pub(super) async fn get(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
) -> StoreResult<DestinationRow> {
    let sql = format!("{SELECT_ROW} WHERE s.name = $1 AND d.name = $2");
    let row = sqlx::query(&sql)
        .bind(stream)
        .bind(destination)
        .fetch_optional(&mut *c)
        .await?;
    match row {
        Some(r) => read_row(&r),
        None => Err(unknown_destination(c, stream, destination).await),
    }
}

pub(super) async fn list(c: &mut PgConnection, stream: &str) -> StoreResult<Vec<DestinationRow>> {
    let s = stream_ids(c, stream).await?;
    let sql = format!("{SELECT_ROW} WHERE d.stream_id = $1 ORDER BY d.name");
    let rows = sqlx::query(&sql).bind(s.id).fetch_all(c).await?;
    rows.iter().map(read_row).collect()
}

pub(super) async fn advance(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    seq: u64,
) -> StoreResult<()> {
    // `last_seq` only grows, so checking it in the same statement is safe.
    let done = sqlx::query(
        "UPDATE abrq.destinations d
         SET hwm = GREATEST(d.hwm, $3), last_error = NULL, updated_at = $4
         FROM abrq.streams s
         WHERE s.id = d.stream_id AND s.name = $1 AND d.name = $2 AND $3 <= s.last_seq",
    )
    .bind(stream)
    .bind(destination)
    .bind(super::rows::seq_bound(seq))
    .bind(to_ms(now()))
    .execute(&mut *c)
    .await?;
    if done.rows_affected() > 0 {
        return Ok(());
    }
    let d = dest_ids(c, stream, destination).await?;
    // A mark past the last staged seq would silently skip future batches.
    Err(StoreError::Backend(anyhow!(
        "cannot move {stream}/{destination} to seq {seq}: the last staged seq is {}",
        d.last_seq
    )))
}

/// Runs `UPDATE abrq.destinations SET {set}, updated_at = $3` on the named
/// destination, `$3` being now and `value` bound as `$4`.
async fn update<T>(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    set: &str,
    value: T,
) -> StoreResult<()>
where
    T: Send + 'static + for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    let sql = format!(
        "UPDATE abrq.destinations d SET {set}, updated_at = $3
         FROM abrq.streams s
         WHERE s.id = d.stream_id AND s.name = $1 AND d.name = $2"
    );
    let done = sqlx::query(&sql)
        .bind(stream)
        .bind(destination)
        .bind(to_ms(now()))
        .bind(value)
        .execute(&mut *c)
        .await?;
    if done.rows_affected() == 0 {
        return Err(unknown_destination(c, stream, destination).await);
    }
    Ok(())
}

pub(super) async fn set_last_error(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    error: Option<&str>,
) -> StoreResult<()> {
    let error = error.map(str::to_owned);
    update(c, stream, destination, "last_error = $4", error).await
}

pub(super) async fn set_paused(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    paused: bool,
) -> StoreResult<()> {
    update(c, stream, destination, "paused = $4", paused).await
}

pub(super) async fn save_breaker(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    state: &BreakerState,
) -> StoreResult<()> {
    let json = breaker_json(state)?;
    update(c, stream, destination, "breaker = $4::json", json).await
}

/// Enabling also repairs a mark the GC passed while the destination was
/// disabled: the gap becomes a skipped range and the mark moves to just
/// before the oldest batch still spooled. In the caller's transaction, with
/// the stream's row locked (no GC meanwhile) and then the destination's.
pub(super) async fn set_enabled(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
    enabled: bool,
) -> StoreResult<Option<SkippedRange>> {
    let s = lock_stream(c, stream).await?;
    let found = sqlx::query(
        "SELECT id, hwm FROM abrq.destinations WHERE stream_id = $1 AND name = $2
         FOR NO KEY UPDATE",
    )
    .bind(s.id)
    .bind(destination)
    .fetch_optional(&mut *c)
    .await?;
    let Some(row) = found else {
        return Err(unknown_destination(c, stream, destination).await);
    };
    let (id, hwm): (i64, u64) = (row.try_get(0)?, u64_at(&row, 1)?);
    let at = now();
    sqlx::query("UPDATE abrq.destinations SET enabled = $2, updated_at = $3 WHERE id = $1")
        .bind(id)
        .bind(enabled)
        .bind(to_ms(at))
        .execute(&mut *c)
        .await?;
    if !enabled || hwm >= s.last_seq {
        return Ok(None);
    }
    let first_needed = hwm + 1;
    let oldest: Option<i64> =
        sqlx::query_scalar("SELECT MIN(seq) FROM abrq.spool WHERE stream_id = $1")
            .bind(s.id)
            .fetch_one(&mut *c)
            .await?;
    let available = oldest.map_or(s.last_seq + 1, |o| o as u64);
    if available <= first_needed {
        return Ok(None);
    }
    let range = SkippedRange {
        from_seq: first_needed,
        to_seq: available - 1,
        at,
    };
    sqlx::query(
        "INSERT INTO abrq.skipped_ranges (destination_id, from_seq, to_seq, at)
         VALUES ($1, $2, $3, $4)",
    )
    .bind(id)
    .bind(int(range.from_seq, "seq")?)
    .bind(int(range.to_seq, "seq")?)
    .bind(to_ms(at))
    .execute(&mut *c)
    .await?;
    sqlx::query("UPDATE abrq.destinations SET hwm = $2 WHERE id = $1")
        .bind(id)
        .bind(int(range.to_seq, "seq")?)
        .execute(&mut *c)
        .await?;
    Ok(Some(range))
}

pub(super) async fn skipped_ranges(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
) -> StoreResult<Vec<SkippedRange>> {
    let d = dest_ids(c, stream, destination).await?;
    let rows = sqlx::query(
        "SELECT from_seq, to_seq, at FROM abrq.skipped_ranges
         WHERE destination_id = $1 ORDER BY from_seq",
    )
    .bind(d.id)
    .fetch_all(c)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(SkippedRange {
                from_seq: u64_at(r, 0)?,
                to_seq: u64_at(r, 1)?,
                at: time_at(r, 2)?,
            })
        })
        .collect()
}

fn breaker_json(state: &BreakerState) -> StoreResult<String> {
    Ok(serde_json::to_string(state).context("encoding breaker state")?)
}
