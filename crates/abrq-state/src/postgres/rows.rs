//! Conversions between PostgreSQL values and the store's row types, and the
//! lookups every module needs (stream and destination ids).

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row as _;

use crate::store::{StoreError, StoreResult};

/// Timestamps are stored as UTC milliseconds since the epoch (see
/// `schema.rs`), taken from this machine's clock as on SQLite.
pub(super) fn now() -> DateTime<Utc> {
    from_ms(Utc::now().timestamp_millis())
}

pub(super) fn to_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_ms(ms: i64) -> DateTime<Utc> {
    // Only out of range for dates past the year 262,000.
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A u64 to store: one past i64::MAX cannot be, and is refused rather than
/// wrapped into a negative number.
pub(super) fn int(value: u64, what: &str) -> StoreResult<i64> {
    i64::try_from(value)
        .map_err(|_| StoreError::Backend(anyhow!("{what} {value} is too large to store")))
}

/// A u64 to compare with: every stored value is at most i64::MAX, so a
/// larger bound clamps rather than fails.
pub(super) fn seq_bound(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// Reads a BIGINT column the store wrote from a u64.
pub(super) fn u64_at(row: &PgRow, idx: usize) -> StoreResult<u64> {
    let v: i64 = row.try_get(idx)?;
    u64::try_from(v).map_err(|_| corrupt("negative count", &v.to_string()))
}

pub(super) fn opt_u64_at(row: &PgRow, idx: usize) -> StoreResult<Option<u64>> {
    let v: Option<i64> = row.try_get(idx)?;
    v.map(|v| u64::try_from(v).map_err(|_| corrupt("negative count", &v.to_string())))
        .transpose()
}

pub(super) fn time_at(row: &PgRow, idx: usize) -> StoreResult<DateTime<Utc>> {
    Ok(from_ms(row.try_get(idx)?))
}

/// A value that does not parse is corruption (or a newer binary's data):
/// report the column and the value rather than inventing a default.
pub(super) fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Backend(anyhow!("corrupt state: unexpected {what} {value:?}"))
}

pub(super) fn parse_uuid(text: &str) -> StoreResult<uuid::Uuid> {
    uuid::Uuid::parse_str(text).map_err(|_| corrupt("stream uuid", text))
}

pub(super) struct StreamIds {
    pub id: i64,
    pub uuid: uuid::Uuid,
    pub last_seq: u64,
}

const STREAM_IDS: &str = "SELECT id, uuid::text, last_seq FROM abrq.streams WHERE name = $1";

fn stream_row(row: Option<PgRow>, stream: &str) -> StoreResult<StreamIds> {
    let row = row.ok_or_else(|| StoreError::UnknownStream(stream.to_owned()))?;
    Ok(StreamIds {
        id: row.try_get(0)?,
        uuid: parse_uuid(row.try_get(1)?)?,
        last_seq: u64_at(&row, 2)?,
    })
}

pub(super) async fn stream_ids(c: &mut PgConnection, stream: &str) -> StoreResult<StreamIds> {
    let row = sqlx::query(STREAM_IDS)
        .bind(stream)
        .fetch_optional(c)
        .await?;
    stream_row(row, stream)
}

/// Looks the stream up and locks its row until the transaction ends: the
/// writes that take this lock run one at a time per stream, and read
/// `last_seq` and the spool as the previous one left them. NO KEY UPDATE
/// still lets other transactions insert rows that reference the stream.
pub(super) async fn lock_stream(c: &mut PgConnection, stream: &str) -> StoreResult<StreamIds> {
    let sql = format!("{STREAM_IDS} FOR NO KEY UPDATE");
    let row = sqlx::query(&sql).bind(stream).fetch_optional(c).await?;
    stream_row(row, stream)
}

pub(super) struct DestIds {
    pub id: i64,
    pub last_seq: u64,
}

/// Looks a destination up by names; tells an unknown stream from an unknown
/// destination so the API can answer precisely.
pub(super) async fn dest_ids(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
) -> StoreResult<DestIds> {
    let row = sqlx::query(
        "SELECT d.id, s.last_seq
         FROM abrq.destinations d JOIN abrq.streams s ON s.id = d.stream_id
         WHERE s.name = $1 AND d.name = $2",
    )
    .bind(stream)
    .bind(destination)
    .fetch_optional(&mut *c)
    .await?;
    match row {
        Some(r) => Ok(DestIds {
            id: r.try_get(0)?,
            last_seq: u64_at(&r, 1)?,
        }),
        None => Err(unknown_destination(c, stream, destination).await),
    }
}

/// The error for a destination that was not found: an unknown stream when
/// the stream is missing too.
pub(super) async fn unknown_destination(
    c: &mut PgConnection,
    stream: &str,
    destination: &str,
) -> StoreError {
    match stream_ids(c, stream).await {
        Ok(_) => StoreError::UnknownDestination {
            stream: stream.to_owned(),
            destination: destination.to_owned(),
        },
        Err(e) => e,
    }
}
