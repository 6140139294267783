//! Binlog values as JSON, by the column's declared type: integers as
//! numbers (unsigned ones read back from their two's complement), decimals
//! as exact strings (as the relational destinations take them), text as
//! strings, binary data as `\x` and hex, dates and times as text.

use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value as V;
use serde_json::{Map, Value};

use super::catalog::Column;
use super::charset;
use crate::error::{Failure, SourceError};

/// A binlog value: a string column's bytes are in the column's own
/// character set.
pub fn to_json(col: &Column, v: &BinlogValue<'_>) -> Result<Value, SourceError> {
    let stored = col.charset.as_deref();
    Ok(match v {
        // the binlog keeps a TIMESTAMP as seconds since the epoch: the
        // same UTC date and time the copy reads (its sessions are UTC)
        BinlogValue::Value(V::Bytes(b)) if col.data_type == "timestamp" => match epoch_text(b) {
            Some(v) => v,
            None => bytes(col, b, stored)?,
        },
        // ENUM and SET come as an index and a bit mask: their labels, as
        // the copy reads them
        BinlogValue::Value(V::Int(i)) if matches!(col.data_type.as_str(), "enum" | "set") => {
            labels_of(col, *i as u64)
        }
        BinlogValue::Value(V::UInt(u)) if matches!(col.data_type.as_str(), "enum" | "set") => {
            labels_of(col, *u)
        }
        BinlogValue::Value(V::Bytes(b))
            if matches!(col.data_type.as_str(), "enum" | "set") && b.len() <= 8 =>
        {
            let n = b
                .iter()
                .rev()
                .fold(0u64, |acc, byte| (acc << 8) | u64::from(*byte));
            labels_of(col, n)
        }
        // a YEAR is a number, as the copy reads it
        BinlogValue::Value(V::Bytes(b)) if col.data_type == "year" => {
            match std::str::from_utf8(b)
                .ok()
                .and_then(|t| t.parse::<u16>().ok())
            {
                Some(y) => Value::from(y),
                None => bytes(col, b, stored)?,
            }
        }
        // a signed MEDIUMINT comes as its 24 bits: the sign is bit 23
        BinlogValue::Value(V::Int(i))
            if col.data_type == "mediumint"
                && !col.column_type.contains("unsigned")
                && (0x80_0000..=0xff_ffff).contains(i) =>
        {
            Value::from(i - 0x100_0000)
        }
        BinlogValue::Value(v) => value_in(col, v, stored)?,
        BinlogValue::Jsonb(j) => {
            let parsed: Result<serde_json::Value, _> = j.clone().try_into();
            parsed.map_err(|e| {
                SourceError::new(
                    Failure::Decode,
                    format!(
                        "column {}: a binary JSON value abrq cannot read: {e}",
                        col.name
                    ),
                )
            })?
        }
        // refused with its event (PARTIAL_UPDATE_ROWS) before any value
        BinlogValue::JsonDiff(_) => {
            return Err(SourceError::new(
                Failure::Unsupported,
                format!("column {}: a partial JSON update", col.name),
            ))
        }
    })
}

/// An ENUM's label by its index (1-based; 0 is the empty error value) or
/// a SET's labels by its bit mask, joined by commas.
fn labels_of(col: &Column, n: u64) -> Value {
    let list = col
        .column_type
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_default();
    let mut labels = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('\'', true) if chars.peek() == Some(&'\'') => {
                cur.push('\'');
                chars.next();
            }
            ('\'', _) => quoted = !quoted,
            (',', false) => labels.push(std::mem::take(&mut cur)),
            (c, true) => cur.push(c),
            _ => {}
        }
    }
    labels.push(cur);
    let text = match col.data_type.as_str() {
        "enum" => match n {
            0 => String::new(),
            n => labels.get(n as usize - 1).cloned().unwrap_or_default(),
        },
        _ => labels
            .iter()
            .enumerate()
            .filter(|(i, _)| *i < 64 && n & (1 << i) != 0)
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join(","),
    };
    Value::String(text)
}

/// `1.000001` (seconds since the epoch) as `1970-01-01T00:00:01.000001`.
fn epoch_text(b: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(b).ok()?;
    let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
    let secs: i64 = secs.parse().ok()?;
    let micros: u32 = match frac {
        "" => 0,
        f => format!("{f:0<6}").get(..6)?.parse().ok()?,
    };
    let at = chrono::DateTime::from_timestamp(secs, micros * 1000)?.naive_utc();
    let whole = at.format("%Y-%m-%dT%H:%M:%S");
    Some(Value::String(match micros {
        0 => whole.to_string(),
        us => format!("{whole}.{us:06}"),
    }))
}

/// A row as a query returns it, by column name.
pub fn row(columns: &[Column], vals: &[V]) -> Result<Map<String, Value>, SourceError> {
    columns
        .iter()
        .zip(vals)
        .map(|(c, v)| Ok((c.name.clone(), value(c, v)?)))
        .collect()
}

/// A value as a query returns it (the snapshot copy reads rows so): text
/// in the session's `utf8mb4`.
pub fn value(col: &Column, v: &V) -> Result<Value, SourceError> {
    value_in(col, v, None)
}

fn value_in(col: &Column, v: &V, charset: Option<&str>) -> Result<Value, SourceError> {
    let unsigned = col.column_type.contains("unsigned");
    Ok(match v {
        V::NULL => Value::Null,
        V::Int(i) if unsigned && *i < 0 => Value::from(unsigned_of(col, *i)),
        V::Int(i) if col.data_type == "tinyint" && col.column_type.starts_with("tinyint(1)") => {
            Value::Bool(*i != 0)
        }
        V::Int(i) => Value::from(*i),
        V::UInt(u) => Value::from(*u),
        V::Float(f) => {
            serde_json::Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number)
        }
        V::Double(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        V::Bytes(b) => bytes(col, b, charset)?,
        V::Date(y, mo, d, h, mi, s, us) => match col.data_type.as_str() {
            "date" => Value::String(format!("{y:04}-{mo:02}-{d:02}")),
            _ if *us == 0 => Value::String(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}")),
            _ => Value::String(format!(
                "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{us:06}"
            )),
        },
        V::Time(neg, d, h, mi, s, us) => {
            let hours = u64::from(*d) * 24 + u64::from(*h);
            let sign = if *neg { "-" } else { "" };
            Value::String(match us {
                0 => format!("{sign}{hours:02}:{mi:02}:{s:02}"),
                _ => format!("{sign}{hours:02}:{mi:02}:{s:02}.{us:06}"),
            })
        }
    })
}

/// The binlog writes an unsigned column's value in the column's own width.
pub(super) fn unsigned_of(col: &Column, i: i64) -> u64 {
    match col.data_type.as_str() {
        "tinyint" => u64::from(i as u8),
        "smallint" => u64::from(i as u16),
        "mediumint" => (i as u64) & 0xff_ffff,
        "int" => u64::from(i as u32),
        _ => i as u64,
    }
}

/// Whether the column holds bytes, written as `\x` and hex: binary
/// strings, bits, and spatial values (MySQL's internal form: a 4-byte
/// SRID, then the WKB).
pub(super) fn is_binary(col: &Column) -> bool {
    matches!(
        col.data_type.as_str(),
        "binary"
            | "varbinary"
            | "blob"
            | "tinyblob"
            | "mediumblob"
            | "longblob"
            | "bit"
            | "geometry"
            | "point"
            | "linestring"
            | "polygon"
            | "multipoint"
            | "multilinestring"
            | "multipolygon"
            | "geometrycollection"
    ) || col.charset.as_deref() == Some("binary")
}

/// A text column's bytes, in `charset` (`None`: the session's), as text;
/// bytes that are not its text are refused naming the column.
pub(super) fn text<'a>(
    col: &Column,
    b: &'a [u8],
    charset: Option<&str>,
) -> Result<std::borrow::Cow<'a, str>, SourceError> {
    charset::decode(charset, b)
        .map_err(|why| SourceError::new(Failure::Decode, format!("column {}: {why}", col.name)))
}

/// A string value's bytes, in `charset` (`None`: the session's).
fn bytes(col: &Column, b: &[u8], charset: Option<&str>) -> Result<Value, SourceError> {
    if is_binary(col) {
        return Ok(Value::String(format!("\\x{}", hex::encode(b))));
    }
    let text = text(col, b, charset)?;
    Ok(match col.data_type.as_str() {
        // MariaDB's json is text the server checked: a value it let in
        // that is not JSON stays the text it is
        "json" => serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.into_owned())),
        _ => Value::String(text.into_owned()),
    })
}

/// A JSON value (a cursor's or a copied key's) back as a query parameter
/// for `col`: binary data goes back as the bytes its `\x` text stands
/// for; otherwise the server converts a string to the column's type when
/// it compares.
pub fn param(col: Option<&Column>, v: &Value) -> V {
    if let (Some(col), Value::String(s)) = (col, v) {
        if is_binary(col) {
            if let Some(raw) = s.strip_prefix("\\x").and_then(|h| hex::decode(h).ok()) {
                return V::Bytes(raw);
            }
        }
    }
    match v {
        Value::Null => V::NULL,
        Value::Bool(b) => V::Int(i64::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => V::Int(i),
            (None, Some(u)) => V::UInt(u),
            _ => V::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => V::Bytes(s.clone().into_bytes()),
        other => V::Bytes(other.to_string().into_bytes()),
    }
}
