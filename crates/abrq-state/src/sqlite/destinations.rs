//! Destinations: marks, operator state, breakers and skipped ranges.

use abrq_core::BreakerState;
use anyhow::{anyhow, Context as _};
use rusqlite::{params, Connection, Row};

use super::rows::{corrupt, dest_ids, now, stream_ids, time, to_ms};
use crate::store::{StoreError, StoreResult};
use crate::types::{DestinationRow, SkippedRange};

const SELECT_ROW: &str =
    "SELECT s.name, d.name, d.kind, d.enabled, d.paused, d.hwm, d.breaker, d.last_error
     FROM destinations d JOIN streams s ON s.id = d.stream_id";

fn read_row(r: &Row<'_>) -> rusqlite::Result<(DestinationRow, String)> {
    let row = DestinationRow {
        stream: r.get(0)?,
        name: r.get(1)?,
        kind: r.get(2)?,
        enabled: r.get(3)?,
        paused: r.get(4)?,
        high_water_mark: r.get(5)?,
        // Filled in by `finish` (a JSON error is not a rusqlite error).
        breaker: BreakerState::Closed { failures: 0 },
        last_error: r.get(7)?,
    };
    Ok((row, r.get(6)?))
}

fn finish((mut row, breaker): (DestinationRow, String)) -> StoreResult<DestinationRow> {
    row.breaker = serde_json::from_str(&breaker).map_err(|_| corrupt("breaker state", &breaker))?;
    Ok(row)
}

/// The mark a new destination starts at: just before the oldest spooled
/// batch, so it receives everything still spooled and its backlog is right
/// from the start (the GC floor is unaffected: nothing older exists).
fn initial_mark(conn: &Connection, stream_id: i64, last_seq: u64) -> StoreResult<u64> {
    let first: Option<u64> = conn
        .prepare_cached("SELECT MIN(seq) FROM spool WHERE stream_id = ?1")?
        .query_row([stream_id], |r| r.get(0))?;
    Ok(first.map_or(last_seq, |f| f - 1))
}

pub(crate) fn register(
    conn: &Connection,
    stream: &str,
    destination: &str,
    kind: &str,
    enabled: bool,
) -> StoreResult<DestinationRow> {
    let s = stream_ids(conn, stream)?;
    let hwm = initial_mark(conn, s.id, s.last_seq)?;
    let breaker = breaker_json(&BreakerState::Closed { failures: 0 })?;
    let at = to_ms(now());
    // On conflict only the kind follows the config: enabled, paused and the
    // mark are operator and delivery state, which the store owns.
    conn.prepare_cached(
        "INSERT INTO destinations
             (stream_id, name, kind, enabled, hwm, breaker, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
         ON CONFLICT (stream_id, name) DO UPDATE SET kind = excluded.kind",
    )?
    .execute(params![s.id, destination, kind, enabled, hwm, breaker, at])?;
    get(conn, stream, destination)
}

pub(crate) fn get(
    conn: &Connection,
    stream: &str,
    destination: &str,
) -> StoreResult<DestinationRow> {
    let found = conn
        .prepare_cached(&format!("{SELECT_ROW} WHERE s.name = ?1 AND d.name = ?2"))?
        .query_row([stream, destination], read_row);
    match found {
        Ok(row) => finish(row),
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            // Tells an unknown stream from an unknown destination.
            dest_ids(conn, stream, destination)?;
            Err(StoreError::UnknownDestination {
                stream: stream.to_owned(),
                destination: destination.to_owned(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn list(conn: &Connection, stream: &str) -> StoreResult<Vec<DestinationRow>> {
    let s = stream_ids(conn, stream)?;
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT_ROW} WHERE d.stream_id = ?1 ORDER BY d.name"
    ))?;
    let rows = stmt.query_map([s.id], read_row)?;
    rows.map(|r| finish(r?)).collect()
}

pub(crate) fn advance(
    conn: &Connection,
    stream: &str,
    destination: &str,
    seq: u64,
) -> StoreResult<()> {
    let d = dest_ids(conn, stream, destination)?;
    // A mark past the last staged seq would silently skip future batches.
    if seq > d.last_seq {
        return Err(StoreError::Backend(anyhow!(
            "cannot move {stream}/{destination} to seq {seq}: the last staged seq is {}",
            d.last_seq
        )));
    }
    conn.prepare_cached(
        "UPDATE destinations SET hwm = MAX(hwm, ?2), last_error = NULL, updated_at = ?3
         WHERE id = ?1",
    )?
    .execute(params![d.id, seq, to_ms(now())])?;
    Ok(())
}

pub(crate) fn set_last_error(
    conn: &Connection,
    stream: &str,
    destination: &str,
    error: Option<&str>,
) -> StoreResult<()> {
    let d = dest_ids(conn, stream, destination)?;
    conn.prepare_cached("UPDATE destinations SET last_error = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![d.id, error, to_ms(now())])?;
    Ok(())
}

pub(crate) fn set_paused(
    conn: &Connection,
    stream: &str,
    destination: &str,
    paused: bool,
) -> StoreResult<()> {
    let d = dest_ids(conn, stream, destination)?;
    conn.prepare_cached("UPDATE destinations SET paused = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![d.id, paused, to_ms(now())])?;
    Ok(())
}

/// Enabling also repairs a mark the GC passed while the destination was
/// disabled: the gap becomes a skipped range and the mark moves to just
/// before the oldest batch still spooled.
pub(crate) fn set_enabled(
    conn: &Connection,
    stream: &str,
    destination: &str,
    enabled: bool,
) -> StoreResult<Option<SkippedRange>> {
    let d = dest_ids(conn, stream, destination)?;
    let at = now();
    conn.prepare_cached("UPDATE destinations SET enabled = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![d.id, enabled, to_ms(at)])?;
    if !enabled || d.hwm >= d.last_seq {
        return Ok(None);
    }
    let first_needed = d.hwm + 1;
    let oldest: Option<u64> = conn
        .prepare_cached("SELECT MIN(seq) FROM spool WHERE stream_id = ?1")?
        .query_row([d.stream_id], |r| r.get(0))?;
    let available = oldest.unwrap_or(d.last_seq + 1);
    if available <= first_needed {
        return Ok(None);
    }
    let range = SkippedRange {
        from_seq: first_needed,
        to_seq: available - 1,
        at,
    };
    conn.prepare_cached(
        "INSERT INTO skipped_ranges (destination_id, from_seq, to_seq, at) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![d.id, range.from_seq, range.to_seq, to_ms(at)])?;
    conn.prepare_cached("UPDATE destinations SET hwm = ?2 WHERE id = ?1")?
        .execute(params![d.id, range.to_seq])?;
    Ok(Some(range))
}

pub(crate) fn save_breaker(
    conn: &Connection,
    stream: &str,
    destination: &str,
    state: &BreakerState,
) -> StoreResult<()> {
    let d = dest_ids(conn, stream, destination)?;
    conn.prepare_cached("UPDATE destinations SET breaker = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![d.id, breaker_json(state)?, to_ms(now())])?;
    Ok(())
}

pub(crate) fn skipped_ranges(
    conn: &Connection,
    stream: &str,
    destination: &str,
) -> StoreResult<Vec<SkippedRange>> {
    let d = dest_ids(conn, stream, destination)?;
    let mut stmt = conn.prepare_cached(
        "SELECT from_seq, to_seq, at FROM skipped_ranges
         WHERE destination_id = ?1 ORDER BY from_seq",
    )?;
    let rows = stmt.query_map([d.id], |r| {
        Ok(SkippedRange {
            from_seq: r.get(0)?,
            to_seq: r.get(1)?,
            at: time(r, 2)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn breaker_json(state: &BreakerState) -> StoreResult<String> {
    Ok(serde_json::to_string(state).context("encoding breaker state")?)
}
