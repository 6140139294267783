//! Change streams into Kafka in the shapes consumers already read, through
//! the binary against the real broker and the real databases, with
//! `transaction_metadata = true`:
//!
//! - `format = "debezium"`, read by a consumer written against the
//!   envelope Debezium documents for its PostgreSQL and MySQL connectors
//!   (every field there, of its documented type; a tombstone after each
//!   delete; `t` for a truncate);
//! - `format = "cloudevents"`: the binary mode's `ce_*` headers;
//! - `_abrq_tx` in a JSON lines history: the server's own transaction id
//!   (PostgreSQL's `txid_current()`, MariaDB's `@@last_gtid`), and each
//!   change's index in its transaction.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Debezium's change event value, as its JSON converter writes it without
/// schemas (debezium.io, "Data change events", PostgreSQL and MySQL
/// connectors).
#[derive(Debug, Deserialize)]
struct Envelope {
    before: Option<Map<String, Value>>,
    after: Option<Map<String, Value>>,
    source: Map<String, Value>,
    op: String,
    ts_ms: i64,
    transaction: Option<Transaction>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Transaction {
    id: String,
    total_order: i64,
    data_collection_order: i64,
}

/// The PostgreSQL connector's `source` block.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PgSource {
    version: String,
    connector: String,
    name: String,
    ts_ms: i64,
    snapshot: String,
    db: String,
    sequence: Option<String>,
    schema: String,
    table: String,
    #[serde(rename = "txId")]
    tx_id: Option<i64>,
    lsn: Option<i64>,
    xmin: Option<i64>,
}

/// The MySQL connector's `source` block.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct MySource {
    version: String,
    connector: String,
    name: String,
    ts_ms: i64,
    snapshot: String,
    db: String,
    sequence: Option<String>,
    table: String,
    server_id: i64,
    gtid: Option<String>,
    file: String,
    pos: i64,
    row: i32,
    thread: Option<i64>,
    query: Option<String>,
}

/// Every field the documentation lists is there (serde would take a
/// missing optional field as null), then the value in its types.
fn envelope<S: serde::de::DeserializeOwned>(
    m: &sinks::KafkaMessage,
    fields: &[&str],
) -> (Envelope, S) {
    let mut keys: Vec<&str> = m.value.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = ["before", "after", "source", "op", "ts_ms", "transaction"];
    want.sort_unstable();
    assert_eq!(keys, want, "envelope fields of {m:?}");
    let e: Envelope = serde_json::from_value(Value::Object(m.value.clone()))
        .unwrap_or_else(|e| panic!("{e}: {:?}", m.value));
    let mut have: Vec<&str> = e.source.keys().map(String::as_str).collect();
    let mut fields = fields.to_vec();
    have.sort_unstable();
    fields.sort_unstable();
    assert_eq!(have, fields, "source fields");
    let source: S = serde_json::from_value(Value::Object(e.source.clone()))
        .unwrap_or_else(|err| panic!("{err}: {:?}", e.source));
    (e, source)
}

const PG_SOURCE: &[&str] = &[
    "version",
    "connector",
    "name",
    "ts_ms",
    "snapshot",
    "db",
    "sequence",
    "schema",
    "table",
    "txId",
    "lsn",
    "xmin",
];

const MY_SOURCE: &[&str] = &[
    "version",
    "connector",
    "name",
    "ts_ms",
    "snapshot",
    "db",
    "sequence",
    "table",
    "server_id",
    "gtid",
    "file",
    "pos",
    "row",
    "thread",
    "query",
];

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The history's records, in order.
fn history(abrq: &Abrq, stream: &str) -> Vec<Map<String, Value>> {
    let out = read_dest(&abrq.path("out"));
    out.verify_manifests(stream)
        .iter()
        .flat_map(|(_, key)| out.objects[key].records.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_changes_reach_debezium_and_cloudevents_consumers_with_their_transaction() {
    let brokers = std::env::var("ABRQ_TEST_KAFKA_BROKERS").unwrap_or("127.0.0.1:9092".into());
    let dbz = sinks::create_topic(&brokers, "e2e-debezium", 1).await;
    let ce = sinks::create_topic(&brokers, "e2e-cloudevents", 1).await;
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let db: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&src)
        .await
        .unwrap();
    let tag = pg::tag();
    let (schema, slot) = (format!("dbz_{tag}"), format!("abrq_dbz_{tag}"));
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, name text, v int)"),
        format!("INSERT INTO {table} VALUES (1, 'one', 1), (2, 'two', 2)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot)
        .transaction_metadata();
    let text = Config::new(&abrq)
        .stream(
            Stream::new("shop", source)
                .max_wait("20ms")
                .destination(
                    Destination::kafka("dbz")
                        .host(&brokers)
                        .database(&dbz)
                        .format("debezium"),
                )
                .destination(
                    Destination::kafka("ce")
                        .host(&brokers)
                        .database(&ce)
                        .format("cloudevents"),
                )
                .destination(
                    Destination::local("history", abrq.p("out"))
                        .format("jsonl")
                        .manifest(),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("shop", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    let started = now_ms();
    let mut tx = src.begin().await.unwrap();
    let xid: i64 = sqlx::query_scalar("SELECT txid_current()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    for sql in [
        format!("INSERT INTO {table} VALUES (3, 'three', 3)"),
        format!("UPDATE {table} SET v = 10 WHERE id = 1"),
        format!("DELETE FROM {table} WHERE id = 2"),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    let after_commit: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&src)
        .await
        .unwrap();
    sqlx::query(&format!("TRUNCATE {table}"))
        .execute(&src)
        .await
        .unwrap();
    // a last row after the truncate: once it is in the history, all
    // before it is staged
    sqlx::query(&format!("INSERT INTO {table} VALUES (99, 'last', 0)"))
        .execute(&src)
        .await
        .unwrap();
    wait_until(LONG, "the last row in the history", async || {
        let out = read_dest(&abrq.path("out"));
        out.objects.values().map(|o| o.records.len()).sum::<usize>() >= 6
    })
    .await;
    let st = abrq.wait_drained("shop", Duration::ZERO, LONG).await;
    for d in ["dbz", "ce", "history"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }

    // the history: each change names its transaction and its place in it
    let records = history(&abrq, "shop");
    let changes: Vec<&Map<String, Value>> = records
        .iter()
        .filter(|r| r.contains_key("_abrq_tx") && r["id"] != 99)
        .collect();
    assert_eq!(records.len(), 6, "{records:?}");
    assert_eq!(changes.len(), 3, "the copied rows carry no transaction");
    for (i, r) in changes.iter().enumerate() {
        let t = &r["_abrq_tx"];
        assert_eq!(t["id"], xid.to_string(), "{t}");
        assert_eq!(t["index"], i as u64, "{t}");
        assert_eq!(t["table_index"], i as u64, "{t}");
        assert_eq!(t["position"], changes[0]["_abrq_tx"]["position"]);
        let at = chrono::DateTime::parse_from_rfc3339(t["time"].as_str().unwrap()).unwrap();
        assert!((at.timestamp_millis() - started).abs() < 60_000, "{t}");
    }
    let commit_lsn = lsn(changes[0]["_abrq_tx"]["position"].as_str().unwrap());
    assert!(commit_lsn > 0 && commit_lsn <= lsn(&after_commit));

    // the Debezium consumer
    let messages = sinks::kafka(&brokers, &dbz).await;
    let ops: Vec<&str> = messages
        .iter()
        .map(|m| match m.tombstone {
            true => "tombstone",
            false => m.value["op"].as_str().unwrap_or("?"),
        })
        .collect();
    // the copied rows are reads, as Debezium's snapshot says them
    assert_eq!(ops, ["r", "r", "c", "u", "d", "tombstone", "t", "c"]);
    for m in messages.iter().filter(|m| !m.tombstone) {
        let (e, s): (Envelope, PgSource) = envelope(m, PG_SOURCE);
        assert_eq!(
            (s.connector.as_str(), s.name.as_str(), s.db.as_str()),
            ("postgresql", "shop", db.as_str())
        );
        assert_eq!(
            (s.schema.as_str(), s.table.as_str()),
            (schema.as_str(), "t")
        );
        assert!(e.ts_ms >= started - 60_000 && e.ts_ms <= now_ms(), "{e:?}");
        match e.op.as_str() {
            "c" | "u" | "r" => assert!(e.before.is_none() && e.after.is_some(), "{e:?}"),
            "d" => assert!(e.before.is_some() && e.after.is_none(), "{e:?}"),
            _ => assert!(e.before.is_none() && e.after.is_none(), "{e:?}"),
        }
        if let Some(row) = e.after.as_ref().or(e.before.as_ref()) {
            let id = &row["id"];
            assert_eq!(m.key.as_deref(), Some(format!("{{\"id\":{id}}}").as_str()));
            assert!(!row.contains_key("_abrq_tx"), "{row:?}");
        }
        let snapshot = if e.op == "r" { "true" } else { "false" };
        assert_eq!(s.snapshot, snapshot, "{s:?}");
        match &e.transaction {
            // the copied rows and the truncate's own transaction
            None => assert!(s.tx_id.is_none() && s.lsn.is_none(), "{s:?}"),
            Some(t) if t.id != xid.to_string() => {
                assert_eq!(e.after.as_ref().map(|a| a["id"].clone()), Some(99.into()));
                assert!(s.lsn > Some(commit_lsn), "{s:?}");
            }
            Some(t) => {
                assert_eq!(
                    (t.id.as_str(), s.tx_id),
                    (xid.to_string().as_str(), Some(xid))
                );
                assert_eq!(s.lsn, Some(commit_lsn));
                assert_eq!(t.total_order, t.data_collection_order);
                assert!((s.ts_ms - started).abs() < 60_000, "{s:?}");
            }
        }
    }
    let orders: Vec<i64> = messages
        .iter()
        .filter_map(|m| m.value.get("transaction")?.get("total_order")?.as_i64())
        .collect();
    assert_eq!(orders, [1, 2, 3, 1]);
    let (delete, tombstone) = (&messages[4], &messages[5]);
    assert_eq!(delete.value["before"]["id"], 2);
    assert_eq!(tombstone.key.as_deref(), Some("{\"id\":2}"));
    assert_eq!(messages[3].value["after"]["v"], 10);

    // the CloudEvents consumer: binary mode, one event per record
    let events = sinks::kafka(&brokers, &ce).await;
    assert_eq!(events.len(), 6);
    for m in &events {
        let h = &m.headers;
        assert_eq!(h["ce_specversion"], "1.0");
        assert_eq!(Some(&h["ce_id"]), m.idempotency_key.as_ref());
        assert_eq!(h["ce_source"], "/abrq/shop");
        assert_eq!(h["ce_subject"], format!("{schema}.t"));
        assert_eq!(h["content-type"], "application/json");
        let op = m.value.get("_abrq_op").and_then(Value::as_str);
        assert_eq!(
            h["ce_type"],
            format!("abrq.record.{}", op.unwrap_or("insert"))
        );
        chrono::DateTime::parse_from_rfc3339(&h["ce_time"]).expect("ce_time is RFC 3339");
    }
    let ids: std::collections::BTreeSet<&String> =
        events.iter().map(|m| &m.headers["ce_id"]).collect();
    assert_eq!(ids.len(), events.len(), "one id per event");
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}

/// `16/B374D848` as a number.
fn lsn(text: &str) -> i64 {
    let (hi, lo) = text.split_once('/').expect("an LSN");
    let hi = i64::from_str_radix(hi, 16).unwrap();
    (hi << 32) | i64::from_str_radix(lo, 16).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_changes_reach_a_debezium_consumer_with_their_gtid_and_binlog_place() {
    let brokers = std::env::var("ABRQ_TEST_KAFKA_BROKERS").unwrap_or("127.0.0.1:9092".into());
    let dbz = sinks::create_topic(&brokers, "e2e-debezium-my", 1).await;
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (db, dst_schema) = (format!("dbz_{tag}"), format!("dbz_dst_{tag}"));
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!("CREATE TABLE `{db}`.a (id int PRIMARY KEY, v int)"),
        format!("CREATE TABLE `{db}`.b (id int PRIMARY KEY, v int)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .tables(&[&format!("{db}.*")])
        .transaction_metadata();
    let text = Config::new(&abrq)
        .stream(
            Stream::new("mshop", source)
                .max_wait("20ms")
                .destination(
                    Destination::kafka("dbz")
                        .host(&brokers)
                        .database(&dbz)
                        .format("debezium"),
                )
                .destination(
                    Destination::local("history", abrq.p("out"))
                        .format("jsonl")
                        .manifest(),
                )
                .destination(
                    Destination::postgres("replica")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("{table}")
                        .mode("upsert"),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("mshop", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    // one transaction over both tables, on one connection to read its GTID
    let mut conn = src.acquire().await.unwrap();
    for sql in [
        "BEGIN".to_string(),
        format!("INSERT INTO `{db}`.a VALUES (1, 1), (2, 2)"),
        format!("INSERT INTO `{db}`.b VALUES (1, 1)"),
        format!("UPDATE `{db}`.a SET v = 20 WHERE id = 2"),
        format!("DELETE FROM `{db}`.b WHERE id = 1"),
        "COMMIT".to_string(),
    ] {
        sqlx::query(&sql).execute(&mut *conn).await.unwrap();
    }
    let gtid: String = sqlx::query_scalar("SELECT @@last_gtid")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    wait_until(LONG, "the transaction in the history", async || {
        read_dest(&abrq.path("out"))
            .objects
            .values()
            .map(|o| o.records.len())
            .sum::<usize>()
            >= 5
    })
    .await;
    let st = abrq.wait_drained("mshop", Duration::ZERO, LONG).await;
    for d in ["dbz", "history", "replica"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    // a relational replica keeps each row's last transaction in a JSON column
    let replica: Vec<(i32, i32, String, i64)> = sqlx::query_as(&format!(
        "SELECT id, v, _abrq_tx->>'id', (_abrq_tx->>'index')::bigint FROM \"{dst_schema}\".a ORDER BY id"
    ))
    .fetch_all(&dst)
    .await
    .unwrap();
    assert_eq!(replica, [(1, 1, gtid.clone(), 0), (2, 20, gtid.clone(), 3)]);
    let records = history(&abrq, "mshop");
    let places: Vec<(u64, u64)> = records
        .iter()
        .map(|r| {
            let t = &r["_abrq_tx"];
            assert_eq!(t["id"], gtid.as_str(), "{t}");
            (
                t["index"].as_u64().unwrap(),
                t["table_index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(places, [(0, 0), (1, 1), (2, 0), (3, 2), (4, 1)]);

    let messages = sinks::kafka(&brokers, &dbz).await;
    let ops: Vec<&str> = messages
        .iter()
        .map(|m| match m.tombstone {
            true => "tombstone",
            false => m.value["op"].as_str().unwrap_or("?"),
        })
        .collect();
    assert_eq!(ops, ["c", "c", "c", "u", "d", "tombstone"]);
    let server_id: i64 = gtid.split('-').nth(1).unwrap().parse().unwrap();
    for m in messages.iter().filter(|m| !m.tombstone) {
        let (e, s): (Envelope, MySource) = envelope(m, MY_SOURCE);
        assert_eq!(
            (s.connector.as_str(), s.db.as_str()),
            ("mysql", db.as_str())
        );
        assert_eq!(
            (s.gtid.as_deref(), s.server_id),
            (Some(gtid.as_str()), server_id)
        );
        assert!(s.file.contains('.') && s.pos > 0, "{s:?}");
        let t = e.transaction.expect("the transaction block");
        assert_eq!(t.id, gtid);
        let table_of = |o: i64| [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2)][o as usize - 1];
        assert_eq!(
            (s.table.as_str(), t.data_collection_order),
            table_of(t.total_order)
        );
    }
    abrq.kill();
    sqlx::query(&format!("DROP DATABASE `{db}`"))
        .execute(&src)
        .await
        .unwrap();
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

/// `transaction_markers = true`: each transaction's changes between its
/// begin and commit markers, in the JSON lines history and a Kafka topic
/// alike, also for a transaction that spans batches; Debezium's
/// transaction metadata (BEGIN, END with counts per table) on
/// `transaction_topic`.
#[tokio::test(flavor = "multi_thread")]
async fn transactions_begin_and_commit_with_markers() {
    let brokers = std::env::var("ABRQ_TEST_KAFKA_BROKERS").unwrap_or("127.0.0.1:9092".into());
    let events = sinks::create_topic(&brokers, "e2e-markers", 1).await;
    let txs = sinks::create_topic(&brokers, "e2e-markers-tx", 1).await;
    let dbz = sinks::create_topic(&brokers, "e2e-markers-dbz", 1).await;
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("marks_{tag}"), format!("abrq_marks_{tag}"));
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE \"{schema}\".a (id int PRIMARY KEY, v int)"),
        format!("CREATE TABLE \"{schema}\".b (id int PRIMARY KEY, v int)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .tables(&[&format!("{schema}.*")])
        .slot(&slot)
        .publication(&slot)
        .transaction_markers();
    let text = Config::new(&abrq)
        .stream(
            Stream::new("marks", source)
                .max_records(5)
                .max_wait("20ms")
                .destination(
                    Destination::kafka("events")
                        .host(&brokers)
                        .database(&events),
                )
                .destination(
                    Destination::kafka("dbz")
                        .host(&brokers)
                        .database(&dbz)
                        .format("debezium")
                        .transaction_topic(&txs),
                )
                .destination(
                    Destination::local("history", abrq.p("out"))
                        .format("jsonl")
                        .manifest(),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("marks", "streaming", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    let (a, b) = (format!("\"{schema}\".a"), format!("\"{schema}\".b"));
    let mut tx = src.begin().await.unwrap();
    for sql in [
        format!("INSERT INTO {a} VALUES (1, 1), (2, 2)"),
        format!("INSERT INTO {b} VALUES (1, 1)"),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    // twelve changes: more than a batch holds
    sqlx::query(&format!(
        "INSERT INTO {b} SELECT g, g FROM generate_series(10, 21) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
    sqlx::query(&format!("UPDATE {a} SET v = 5 WHERE id = 1"))
        .execute(&src)
        .await
        .unwrap();
    wait_until(LONG, "three transactions in the history", async || {
        let out = read_dest(&abrq.path("out"));
        out.objects.values().map(|o| o.records.len()).sum::<usize>() >= 16 + 6
    })
    .await;
    let st = abrq.wait_drained("marks", Duration::ZERO, LONG).await;
    for d in ["events", "dbz", "history"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    // the history and the topic: begin, the changes, commit (with counts)
    let lines = history(&abrq, "marks");
    let topic: Vec<Map<String, Value>> = sinks::kafka(&brokers, &events)
        .await
        .into_iter()
        .map(|m| m.value)
        .collect();
    for (name, items) in [("history", &lines), ("topic", &topic)] {
        let mut shape = Vec::new();
        let mut open: Option<(String, u64)> = None;
        for r in items {
            match r.get("_abrq_marker").and_then(Value::as_str) {
                Some("begin") => {
                    assert!(open.is_none(), "{name}: begin inside a transaction");
                    open = Some((r["_abrq_tx"]["id"].as_str().unwrap().to_string(), 0));
                }
                Some("commit") => {
                    let (id, n) = open.take().expect("a commit after its begin");
                    assert_eq!(r["_abrq_tx"]["id"], id.as_str(), "{name}");
                    assert_eq!(r["_abrq_tx"]["changes"], n, "{name}: {r:?}");
                    shape.push((n, r["_abrq_tx"]["tables"].clone()));
                }
                _ => open.as_mut().expect("a change inside a transaction").1 += 1,
            }
        }
        let (ta, tb) = (format!("{schema}.a"), format!("{schema}.b"));
        assert_eq!(
            shape,
            [
                (3, serde_json::json!({ta.clone(): 2, tb.clone(): 1})),
                (12, serde_json::json!({tb: 12})),
                (1, serde_json::json!({ta: 1})),
            ],
            "{name}"
        );
    }
    // Debezium's transaction metadata
    let meta: Vec<Map<String, Value>> = sinks::kafka(&brokers, &txs)
        .await
        .into_iter()
        .map(|m| m.value)
        .collect();
    let statuses: Vec<(&str, Option<i64>)> = meta
        .iter()
        .map(|m| (m["status"].as_str().unwrap(), m["event_count"].as_i64()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("BEGIN", None),
            ("END", Some(3)),
            ("BEGIN", None),
            ("END", Some(12)),
            ("BEGIN", None),
            ("END", Some(1))
        ]
    );
    for m in &meta {
        assert!(m["id"].is_string() && m["ts_ms"].is_i64(), "{m:?}");
    }
    let collections = &meta[1]["data_collections"];
    assert_eq!(
        collections,
        &serde_json::json!([
            {"data_collection": format!("{schema}.a"), "event_count": 2},
            {"data_collection": format!("{schema}.b"), "event_count": 1}
        ])
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
