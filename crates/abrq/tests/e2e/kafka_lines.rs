//! `json` messages (here without a `partition_key`) are sent from the spool's
//! lines, not decoded records, through the binary against the real
//! broker (a consumer reads them back with its own client): each value is
//! the record as ingested, its headers say the batch's idempotency key and
//! index, unkeyed messages spread over every partition, and a batch whose
//! spooled payload rotted is an `encoding` dead letter naming its seq and
//! line while the batches around it are delivered.

use std::collections::{BTreeSet, HashMap};

use crate::common::*;
use serde_json::{json, Value};

const STREAM: &str = "lines";
const PARTITIONS: i32 = 4;
/// Each record's `_abrq_op`: a changed row's value says its operation.
const OPS: [Option<&str>; 4] = [None, Some("update"), Some("delete"), Some("insert")];

/// Batch `b`'s records: nested values, odd spacing and non-ASCII text, as
/// a client might send them.
fn request(b: u64) -> (String, Vec<Value>) {
    let records: Vec<Value> = (0..8usize)
        .map(|i| {
            let mut r = json!({
                "b": b,
                "i": i,
                "name": format!("n\u{e9}\u{2603} {b}/{i} \"q\""),
                "deep": {"list": [1, 2.5, null, {"x": [true]}]},
            });
            if let Some(op) = OPS[i % OPS.len()] {
                r["_abrq_op"] = json!(op);
            }
            r
        })
        .collect();
    let body: String = records
        .iter()
        .map(|r| format!("{}\n", r.to_string().replace(",\"", ", \"")))
        .collect();
    (body, records)
}

#[tokio::test(flavor = "multi_thread")]
async fn json_messages_are_the_ingested_lines_and_a_rotten_batch_is_dead_lettered() {
    let brokers = abrq_testkit::Kafka::from_env().brokers;
    let topic = sinks::create_topic(&brokers, "e2e-lines", PARTITIONS).await;
    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "http"
[[streams.destinations]]
name = "k"
engine = "kafka"
host = "{brokers}"
database = "{topic}"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
    ));
    abrq.start().await;
    abrq.act(STREAM, "k", "pause").await;
    let mut sent = HashMap::new();
    for b in 1..=3 {
        let (body, records) = request(b);
        abrq.ingest(STREAM, &body).await;
        sent.insert(b, records);
    }
    abrq.wait_status(STREAM, "three batches staged", |st| {
        u(&st["spool"]["last_seq"]) == 3
    })
    .await;
    abrq.kill();

    // Batch 2 rots on disk while abrq is down.
    abrq.rot_spooled(2, b"I{\"b\":2}\nI{\"b\":");

    abrq.start().await;
    abrq.act(STREAM, "k", "resume").await;
    let st = abrq
        .wait_status(STREAM, "k past all three batches", |st| {
            u(&dest_of(st, "k")["high_water_mark"]) == 3
        })
        .await;
    let k = dest_of(&st, "k");
    assert_eq!(u(&k["pending_dead_letters"]), 1, "{k}");
    let rows = abrq.dead_letters(STREAM, "k").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["seq"], 2);
    assert_eq!(rows[0]["reason_class"], "encoding");
    let error = rows[0]["error"].as_str().unwrap();
    assert!(
        error.contains("seq 2") && error.contains("line 2"),
        "{error}"
    );
    abrq.kill();

    let messages = sinks::kafka(&brokers, &topic).await;
    let mut partitions = BTreeSet::new();
    let mut got: HashMap<String, Value> = HashMap::new();
    for m in messages {
        partitions.insert(m.partition);
        assert_eq!(m.key, None, "unkeyed");
        let op = m.value.get("_abrq_op").and_then(Value::as_str);
        assert_eq!(m.headers["abrq_op"], op.unwrap_or("insert"));
        assert_eq!(m.headers["abrq_stream"], STREAM);
        let id = m.idempotency_key.expect("abrq_idempotency_key");
        // redelivered copies carry the same key and value
        let value = Value::Object(m.value);
        if let Some(before) = got.insert(id.clone(), value.clone()) {
            assert_eq!(before, value, "{id}");
        }
    }
    assert_eq!(got.len(), 16, "batches 1 and 3, once each by key");
    for (id, value) in &got {
        let (_, index) = id.rsplit_once(':').expect("{batch key}:{index}");
        let b = value["b"].as_u64().unwrap();
        assert!(b == 1 || b == 3, "{value}");
        let index: usize = index.parse().unwrap();
        let mut want = sent[&b][index].clone();
        // an insert says no operation
        if want["_abrq_op"] == "insert" {
            want.as_object_mut().unwrap().remove("_abrq_op");
        }
        assert_eq!(&want, value, "{id}");
    }
    assert_eq!(partitions.len(), PARTITIONS as usize, "{partitions:?}");
}
