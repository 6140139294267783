//! One record as one Kafka message: the value is the record's fields as
//! JSON (plus `_abrq_op` for updates and deletes, as in JSONL objects), the
//! key is the `partition_key` field's value, or without one a database
//! source's primary key as a JSON object (so every change of a row goes
//! to one partition, in order), and three headers let
//! consumers deduplicate and tell operations apart (a fourth, `abrq_table`,
//! names a database source's table).

use abrq_core::{DeliveryError, Record};
use rdkafka::message::{Header, OwnedHeaders};
use serde_json::{Map, Value};

use crate::failure::Failure;
use crate::object::encode::{check_op_field, FlatJson};

/// Header names, fixed: consumers match on them.
pub const IDEMPOTENCY_HEADER: &str = "abrq_idempotency_key";
pub const STREAM_HEADER: &str = "abrq_stream";
pub const OP_HEADER: &str = "abrq_op";
/// The source table (`schema.name`), on records of database sources.
pub const TABLE_HEADER: &str = "abrq_table";

/// The message value. Item `index` names the record in an error.
pub fn value(record: &Record, index: usize) -> Result<Vec<u8>, DeliveryError> {
    check_op_field(record, index)?;
    serde_json::to_vec(&FlatJson(record)).map_err(|e| {
        Failure::Encoding {
            record: Some(index),
        }
        .error(e)
    })
}

/// The message key: the field's value as a string (a JSON string without
/// quotes, anything else as its JSON text). None when the field is absent
/// or null: such a record is placed round-robin like an unkeyed one.
pub fn key(record: &Record, field: &str) -> Option<String> {
    key_text(record.fields.get(field)?)
}

/// A key field's value as the message key (see [`key`]).
pub fn key_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The record's primary key as a JSON object (`{"id":7}`), in the key's
/// column order. None without a key, or when the record lacks a value of
/// it: such a record is placed round-robin.
pub fn primary_key(record: &Record, columns: &[String]) -> Option<String> {
    if columns.is_empty() {
        return None;
    }
    let mut key = Map::with_capacity(columns.len());
    for c in columns {
        match record.fields.get(c) {
            None | Some(Value::Null) => return None,
            Some(v) => key.insert(c.clone(), v.clone()),
        };
    }
    Some(Value::Object(key).to_string())
}

/// `{batch key}:{item index}`, then `part` (a second message of one
/// record: `:tombstone`): unique per message, identical when the batch is
/// replayed.
pub fn idempotency_key(batch_key: &str, index: usize, part: &str) -> String {
    format!("{batch_key}:{index}{part}")
}

/// The record's commit time from its `_abrq_tx`, when the source gave it.
pub fn commit_time(record: &Record) -> Option<String> {
    let tx = record.fields.get(abrq_core::TX_FIELD)?;
    tx.get("time")?.as_str().map(str::to_string)
}

/// abrq's headers (`abrq_idempotency_key`, `abrq_stream`, `abrq_op`, and
/// `abrq_table` for a database source's table), then `extra`.
pub fn headers(
    idempotency: &str,
    stream: &str,
    op: &str,
    table: Option<&str>,
    extra: &[(&'static str, String)],
) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(4 + extra.len())
        .insert(Header {
            key: IDEMPOTENCY_HEADER,
            value: Some(idempotency),
        })
        .insert(Header {
            key: STREAM_HEADER,
            value: Some(stream),
        })
        .insert(Header {
            key: OP_HEADER,
            value: Some(op),
        });
    if let Some(t) = table {
        headers = headers.insert(Header {
            key: TABLE_HEADER,
            value: Some(t),
        });
    }
    for (key, value) in extra {
        headers = headers.insert(Header {
            key,
            value: Some(value.as_str()),
        });
    }
    headers
}
