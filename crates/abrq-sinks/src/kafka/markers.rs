//! A source transaction's begin and commit markers as messages
//! (`transaction_markers = true` on the source): keyed by the
//! transaction's id, on `transaction_topic` when set, else on the topic of
//! the table whose change they stand beside. `json` and `cloudevents`
//! write the marker as abrq stages it (`{"_abrq_marker": "begin" |
//! "commit", "_abrq_tx": {...}}`); `debezium` writes Debezium's
//! transaction metadata (`status` BEGIN or END, `id`, `ts_ms`,
//! `event_count`, `data_collections`).

use std::sync::Arc;

use abrq_core::{BatchMeta, DeliveryError, MARKER_FIELD, TX_FIELD};
use serde_json::{json, Map, Value};

use super::cloudevents;
use super::config::MessageFormat;
use super::destination::{json_bytes, Encoded};
use super::message;

/// The message of the marker at batch item `index`.
pub(super) fn encoded(
    fields: &Map<String, Value>,
    format: MessageFormat,
    meta: &BatchMeta,
    index: usize,
    topic: Arc<str>,
) -> Result<Encoded<'static>, DeliveryError> {
    let tx = fields.get(TX_FIELD).cloned().unwrap_or(Value::Null);
    let commit = fields.get(MARKER_FIELD).and_then(Value::as_str) == Some("commit");
    let op = if commit { "commit" } else { "begin" };
    let id = tx.get("id").and_then(Value::as_str).map(str::to_string);
    let time = tx.get("time").and_then(Value::as_str);
    let (value, extra) = match format {
        MessageFormat::Json => (
            json_bytes(&Value::Object(fields.clone()), index)?,
            Vec::new(),
        ),
        MessageFormat::Debezium => (json_bytes(&debezium(&tx, commit, meta), index)?, Vec::new()),
        MessageFormat::Cloudevents => {
            let ce_id = message::idempotency_key(&meta.idempotency_key, index, "");
            let time = time.map_or_else(|| meta.staged_at.to_rfc3339(), str::to_string);
            let headers = cloudevents::headers(
                ce_id,
                &meta.stream,
                None,
                &format!("transaction.{op}"),
                time,
            );
            (json_bytes(&Value::Object(fields.clone()), index)?, headers)
        }
    };
    Ok(Encoded {
        index,
        op,
        topic,
        table: None,
        key: id,
        value: Some(std::borrow::Cow::Owned(value)),
        part: "",
        extra,
    })
}

/// Debezium's transaction metadata message.
fn debezium(tx: &Value, commit: bool, meta: &BatchMeta) -> Value {
    let ts_ms = tx
        .get("time")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(meta.staged_at.timestamp_millis(), |t| t.timestamp_millis());
    let collections = tx.get("tables").and_then(Value::as_object).map(|tables| {
        tables
            .iter()
            .map(|(t, n)| json!({"data_collection": t, "event_count": n}))
            .collect::<Vec<_>>()
    });
    json!({
        "status": if commit { "END" } else { "BEGIN" },
        "id": tx.get("id"),
        "ts_ms": ts_ms,
        "event_count": if commit { tx.get("changes").cloned() } else { None },
        "data_collections": if commit { collections } else { None },
    })
}
