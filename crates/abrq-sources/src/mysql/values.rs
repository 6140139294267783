//! Binlog values as JSON, by the column's declared type: integers as
//! numbers (unsigned ones read back from their two's complement), decimals
//! as exact strings (as the relational destinations take them), text as
//! strings, binary data as `\x` and hex, dates and times as text.

use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value as V;
use serde_json::Value;

use super::catalog::Column;

pub fn to_json(col: &Column, v: &BinlogValue<'_>) -> Value {
    match v {
        BinlogValue::Value(v) => value(col, v),
        BinlogValue::Jsonb(j) => {
            let parsed: Result<serde_json::Value, _> = j.clone().try_into();
            parsed.unwrap_or(Value::Null)
        }
        BinlogValue::JsonDiff(_) => Value::Null,
    }
}

/// A value as a query returns it (the snapshot copy reads rows so).
pub fn value(col: &Column, v: &V) -> Value {
    let unsigned = col.column_type.contains("unsigned");
    match v {
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
        V::Bytes(b) => bytes(col, b),
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
    }
}

/// The binlog writes an unsigned column's value in the column's own width.
fn unsigned_of(col: &Column, i: i64) -> u64 {
    match col.data_type.as_str() {
        "tinyint" => u64::from(i as u8),
        "smallint" => u64::from(i as u16),
        "mediumint" => (i as u64) & 0xff_ffff,
        "int" => u64::from(i as u32),
        _ => i as u64,
    }
}

/// Whether the column holds bytes, written as `\x` and hex.
fn is_binary(col: &Column) -> bool {
    matches!(
        col.data_type.as_str(),
        "binary" | "varbinary" | "blob" | "tinyblob" | "mediumblob" | "longblob" | "bit"
    )
}

fn bytes(col: &Column, b: &[u8]) -> Value {
    match col.data_type.as_str() {
        _ if is_binary(col) => Value::String(format!("\\x{}", hex::encode(b))),
        "json" => serde_json::from_slice(b)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned())),
        _ => Value::String(String::from_utf8_lossy(b).into_owned()),
    }
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
