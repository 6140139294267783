//! Conversions between SQLite values and the store's row types, and the
//! lookups every module needs (stream and destination ids).

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::store::{StoreError, StoreResult};

/// Timestamps are stored as UTC milliseconds since the epoch: sortable,
/// compact, and what `staged_at` promises.
pub(crate) fn now() -> DateTime<Utc> {
    from_ms(Utc::now().timestamp_millis())
}

pub(crate) fn to_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn from_ms(ms: i64) -> DateTime<Utc> {
    // Only out of range for dates past the year 262,000.
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Reads a millisecond timestamp column.
pub(crate) fn time(row: &Row<'_>, idx: usize) -> rusqlite::Result<DateTime<Utc>> {
    row.get::<_, i64>(idx).map(from_ms)
}

/// Seqs are u64 in the API and i64 in SQLite; a seq past i64::MAX can never
/// be stored, so comparisons clamp rather than fail.
pub(crate) fn seq_bound(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// A value that does not parse is corruption (or a newer binary's data):
/// report the column and the value rather than inventing a default.
pub(crate) fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Backend(anyhow!("corrupt state: unexpected {what} {value:?}"))
}

pub(crate) struct StreamIds {
    pub id: i64,
    pub uuid: uuid::Uuid,
    pub last_seq: u64,
}

pub(crate) fn stream_ids(conn: &Connection, stream: &str) -> StoreResult<StreamIds> {
    let row = conn
        .prepare_cached("SELECT id, uuid, last_seq FROM streams WHERE name = ?1")?
        .query_row([stream], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u64>(2)?,
            ))
        })
        .optional()?;
    let (id, uuid, last_seq) = row.ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))?;
    let uuid = uuid::Uuid::parse_str(&uuid).map_err(|_| corrupt("stream uuid", &uuid))?;
    Ok(StreamIds { id, uuid, last_seq })
}

pub(crate) struct DestIds {
    pub id: i64,
    pub stream_id: i64,
    pub hwm: u64,
    pub last_seq: u64,
}

/// Looks a destination up by names; tells an unknown stream from an unknown
/// destination so the API can answer precisely.
pub(crate) fn dest_ids(conn: &Connection, stream: &str, destination: &str) -> StoreResult<DestIds> {
    let row = conn
        .prepare_cached(
            "SELECT d.id, s.id, d.hwm, s.last_seq
             FROM destinations d JOIN streams s ON s.id = d.stream_id
             WHERE s.name = ?1 AND d.name = ?2",
        )?
        .query_row([stream, destination], |r| {
            Ok(DestIds {
                id: r.get(0)?,
                stream_id: r.get(1)?,
                hwm: r.get(2)?,
                last_seq: r.get(3)?,
            })
        })
        .optional()?;
    match row {
        Some(ids) => Ok(ids),
        None => {
            stream_ids(conn, stream)?;
            Err(StoreError::UnknownDestination {
                stream: stream.to_owned(),
                destination: destination.to_owned(),
            })
        }
    }
}
