//! `format = "debezium"`: each change as Debezium's envelope, as its JSON
//! converter writes it without schemas, so consumers written for Debezium
//! read abrq's topics unchanged:
//!
//! `{"before", "after", "source", "op", "ts_ms", "transaction"}`
//!
//! `op` is `c`, `u`, `d` or `t` (a truncate). `before` holds a delete's
//! row (its key, or the whole old row when the source sends it), `after`
//! an insert's or update's row. `source` says where the change came from
//! in the fields Debezium's PostgreSQL or MySQL connector uses; its
//! position and commit time come from the change's `_abrq_tx`, so they
//! are null (and `ts_ms` the time abrq staged it) unless the source sets
//! `transaction_metadata = true`. A delete is followed by a tombstone (the
//! key, no value), so a compacted topic forgets the row.

use abrq_core::config::{SourceEngine, SourceOrigin};
use abrq_core::{Op, Record, TableRef, TX_FIELD};
use serde_json::{json, Map, Value};

/// What every envelope of one destination shares.
pub struct Origin<'a> {
    pub source: &'a SourceOrigin,
    /// The stream: Debezium's logical server name (`source.name`).
    pub stream: &'a str,
    /// When the batch was staged, in ms: the envelope's `ts_ms` (the same
    /// on every retry).
    pub staged_ms: i64,
}

/// The envelope of one record of `table`.
pub fn change(record: &Record, table: Option<&TableRef>, origin: &Origin) -> Value {
    let tx = record.fields.get(TX_FIELD).filter(|t| t.is_object());
    let mut row = Map::with_capacity(record.fields.len());
    for (k, v) in &record.fields {
        if k != TX_FIELD {
            row.insert(k.clone(), v.clone());
        }
    }
    let (op, before, after) = match record.op {
        Op::Insert => ("c", Value::Null, Value::Object(row)),
        Op::Read => ("r", Value::Null, Value::Object(row)),
        Op::Update => ("u", Value::Null, Value::Object(row)),
        Op::Delete => ("d", Value::Object(row), Value::Null),
    };
    json!({
        "before": before,
        "after": after,
        "source": source(table, tx, origin, record.op == Op::Read),
        "op": op,
        "ts_ms": origin.staged_ms,
        "transaction": tx.map(transaction),
    })
}

/// The envelope of a truncate of `table`.
pub fn truncate(table: Option<&TableRef>, origin: &Origin) -> Value {
    json!({
        "before": null,
        "after": null,
        "source": source(table, None, origin, false),
        "op": "t",
        "ts_ms": origin.staged_ms,
        "transaction": null,
    })
}

/// Debezium's `transaction` block: the id, and the change's order in the
/// transaction and among its table's changes (from 1).
fn transaction(tx: &Value) -> Value {
    let order = |k: &str| tx.get(k).and_then(Value::as_u64).map(|i| i + 1);
    json!({
        "id": tx.get("id"),
        "total_order": order("index"),
        "data_collection_order": order("table_index"),
    })
}

/// The `source` block, in the fields of the connector the source is;
/// `snapshot` is "true" for a row a copy or a backfill read.
fn source(table: Option<&TableRef>, tx: Option<&Value>, origin: &Origin, read: bool) -> Value {
    let text = |k: &str| tx.and_then(|t| t.get(k)).and_then(Value::as_str);
    let ts_ms = text("time")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(origin.staged_ms, |t| t.timestamp_millis());
    let schema = table.and_then(|t| t.schema.as_deref());
    let name = table.map(|t| t.name.as_str());
    let mut out = json!({
        "version": concat!("abrq-", env!("CARGO_PKG_VERSION")),
        "connector": connector(origin.source.engine),
        "name": origin.stream,
        "ts_ms": ts_ms,
        "snapshot": if read { "true" } else { "false" },
        "db": origin.source.database,
        "sequence": null,
        "table": name,
    });
    let fields = out.as_object_mut().expect("an object");
    match origin.source.engine {
        Some(SourceEngine::Postgres) => {
            fields.insert("schema".into(), json!(schema));
            let tx_id = text("id").and_then(|i| i.parse::<i64>().ok());
            fields.insert("txId".into(), json!(tx_id));
            fields.insert("lsn".into(), json!(text("position").and_then(lsn)));
            fields.insert("xmin".into(), Value::Null);
        }
        Some(SourceEngine::Mysql) => {
            // MySQL's schema is its database
            fields.insert("db".into(), json!(schema));
            let (file, pos) = match text("position").and_then(|p| p.rsplit_once(':')) {
                Some((f, p)) => (json!(f), json!(p.parse::<i64>().ok())),
                None => (json!(""), json!(0)),
            };
            let gtid = text("id").filter(|id| Some(*id) != text("position"));
            // MariaDB's GTID is domain-server-sequence
            let server_id = gtid
                .and_then(|g| g.split('-').nth(1))
                .and_then(|s| s.parse::<i64>().ok())
                .unwrap_or(0);
            fields.insert("server_id".into(), json!(server_id));
            fields.insert("gtid".into(), json!(gtid));
            fields.insert("file".into(), file);
            fields.insert("pos".into(), pos);
            fields.insert("row".into(), json!(0));
            fields.insert("thread".into(), Value::Null);
            fields.insert("query".into(), Value::Null);
        }
        _ => {
            fields.insert("schema".into(), json!(schema));
        }
    }
    out
}

/// Debezium's connector name for the source.
fn connector(engine: Option<SourceEngine>) -> &'static str {
    match engine {
        Some(SourceEngine::Postgres) => "postgresql",
        Some(SourceEngine::Mysql) => "mysql",
        Some(e) => e.as_str(),
        None => "abrq",
    }
}

/// An LSN as PostgreSQL writes it (`16/B374D848`) as the number Debezium
/// gives.
fn lsn(text: &str) -> Option<i64> {
    let (hi, lo) = text.split_once('/')?;
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    i64::try_from((hi << 32) | lo).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(engine: SourceEngine) -> SourceOrigin {
        SourceOrigin {
            engine: Some(engine),
            database: Some("shop".into()),
        }
    }

    fn record(op: Op, fields: Value) -> Record {
        let Value::Object(fields) = fields else {
            unreachable!()
        };
        Record { op, fields }
    }

    #[test]
    fn a_postgres_update_names_its_transaction_and_place() {
        let src = origin(SourceEngine::Postgres);
        let o = Origin {
            source: &src,
            stream: "orders",
            staged_ms: 5,
        };
        let r = record(
            Op::Update,
            json!({"id": 7, "_abrq_tx": {"id": "741", "position": "1/A0", "time": "2026-01-02T03:04:05.006000Z", "index": 2, "table_index": 0}}),
        );
        let v = change(&r, Some(&TableRef::new(Some("public"), "t")), &o);
        assert_eq!(v["op"], "u");
        assert_eq!(v["after"], json!({"id": 7}));
        assert_eq!(v["before"], Value::Null);
        assert_eq!(v["ts_ms"], 5);
        let s = &v["source"];
        assert_eq!(s["connector"], "postgresql");
        assert_eq!(s["db"], "shop");
        assert_eq!(s["schema"], "public");
        assert_eq!(s["txId"], 741);
        assert_eq!(s["lsn"], (1_i64 << 32) | 0xA0);
        assert_eq!(s["ts_ms"], 1_767_323_045_006_i64);
        assert_eq!(v["transaction"]["total_order"], 3);
        assert_eq!(v["transaction"]["data_collection_order"], 1);
    }

    #[test]
    fn a_mariadb_delete_has_its_row_before_and_its_binlog_place() {
        let src = origin(SourceEngine::Mysql);
        let o = Origin {
            source: &src,
            stream: "s",
            staged_ms: 9,
        };
        let r = record(
            Op::Delete,
            json!({"id": 1, "_abrq_tx": {"id": "0-3-44", "position": "bin.000002:880", "time": null, "index": 0, "table_index": 0}}),
        );
        let v = change(&r, Some(&TableRef::new(Some("app"), "t")), &o);
        assert_eq!(v["op"], "d");
        assert_eq!(v["before"], json!({"id": 1}));
        let s = &v["source"];
        assert_eq!(s["db"], "app");
        assert_eq!((&s["file"], &s["pos"]), (&json!("bin.000002"), &json!(880)));
        assert_eq!((&s["gtid"], &s["server_id"]), (&json!("0-3-44"), &json!(3)));
        assert_eq!(s["ts_ms"], 9);
    }

    #[test]
    fn without_transaction_metadata_the_place_is_null() {
        let src = origin(SourceEngine::Postgres);
        let o = Origin {
            source: &src,
            stream: "s",
            staged_ms: 9,
        };
        let v = change(&record(Op::Insert, json!({"id": 1})), None, &o);
        assert_eq!(v["op"], "c");
        assert_eq!(v["source"]["lsn"], Value::Null);
        assert_eq!(v["transaction"], Value::Null);
        assert_eq!(truncate(None, &o)["op"], "t");
    }
}
