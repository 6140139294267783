//! A Kafka broker cut off mid-run, through the real binary: a tansu broker
//! of the test's own behind a loopback proxy, beside a local destination of
//! the same stream.
//!
//! While the link is cut, kafka's attempts fail (their records time out
//! inside the attempt), its breaker opens and the trip is counted, and
//! local keeps delivering. Once the link is back the backlog drains; every
//! record is in the topic, and after deduplicating by
//! `abrq_idempotency_key` each key's records are in source order.

use std::collections::{BTreeMap, HashSet};

use crate::common::*;
use serde_json::json;

const STREAM: &str = "orders";
const PER_PHASE: u64 = 2_000;
const BATCH: u64 = 250;
const PARTITIONS: i32 = 4;
const CUSTOMERS: u64 = 13;

fn append_orders(path: &std::path::Path, ids: std::ops::RangeInclusive<u64>) {
    append_ndjson(
        path,
        ids.map(|id| json!({"order_id": id, "customer": format!("c{}", id % CUSTOMERS)})),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_outage_opens_the_breaker_and_drains_in_key_order_once_restored() {
    let broker = abrq_testkit::ProxiedBroker::start().await;
    let brokers = broker.brokers();
    let topic = sinks::create_topic(&brokers, "e2e-outage", PARTITIONS).await;

    let mut abrq = Abrq::new();
    let input = abrq.path("in/orders.ndjson");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    append_orders(&input, 1..=PER_PHASE);
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "file"
path = "{input}"
follow = true
[streams.batch]
max_records = {BATCH}
max_wait = "50ms"

[[streams.destinations]]
name = "events"
engine = "kafka"
host = "{brokers}"
database = "{topic}"
partition_key = "customer"
[streams.destinations.retry]
max_attempts = 100000
initial_backoff = "50ms"
max_backoff = "400ms"
attempt_timeout = "3s"
[streams.destinations.breaker]
failure_threshold = 3
cooldown = "1s"

[[streams.destinations]]
name = "local"
engine = "local"
database = "{local}"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        input = input.display(),
        local = abrq.p("out/local"),
    ));
    abrq.start().await;

    let phase1 = PER_PHASE / BATCH;
    abrq.wait_status(STREAM, "both destinations through phase one", |st| {
        u(&st["spool"]["last_seq"]) == phase1
            && ["events", "local"]
                .iter()
                .all(|d| u(&dest_of(st, d)["high_water_mark"]) == phase1)
    })
    .await;

    broker.proxy.cut();
    append_orders(&input, PER_PHASE + 1..=2 * PER_PHASE);
    let last = 2 * phase1;
    abrq.wait_circuit_opened("kafka").await;
    let st = abrq
        .wait_status(
            STREAM,
            "local through phase two while kafka is down",
            |st| u(&dest_of(st, "local")["high_water_mark"]) == last,
        )
        .await;
    let down = dest_of(&st, "events");
    assert_eq!(u(&down["high_water_mark"]), phase1, "delivered while cut");
    assert_eq!(u(&down["pending_dead_letters"]), 0, "{down}");
    let failures = abrq
        .metric(
            "abrq_stream_fanout_attempts_total",
            &[("destination", "events"), ("outcome", "failure")],
        )
        .await;
    assert!(failures >= 3.0, "{failures} failed attempts");

    broker.proxy.restore();
    let st = abrq
        .wait_status(
            STREAM,
            "kafka to drain its backlog after the restore",
            |st| u(&dest_of(st, "events")["high_water_mark"]) == last,
        )
        .await;
    let up = dest_of(&st, "events");
    assert_eq!(up["breaker"]["state"], "closed", "{up}");
    assert_eq!(u(&up["pending_dead_letters"]), 0, "{up}");
    abrq.kill();

    // Every record at least once; after deduplication, once, and each
    // customer's orders in source order (order_id ascending).
    let total = 2 * PER_PHASE as usize;
    let messages = sinks::kafka(&brokers, &topic).await;
    let mut seen = HashSet::new();
    let mut per_customer: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for m in messages {
        let key = m
            .idempotency_key
            .expect("every message has abrq_idempotency_key");
        if seen.insert(key) {
            let customer = m.key.expect("a message key");
            per_customer
                .entry(customer)
                .or_default()
                .push(m.value["order_id"].as_u64().unwrap());
        }
    }
    assert_eq!(seen.len(), total, "distinct idempotency keys");
    let mut ids: Vec<u64> = Vec::new();
    for (customer, list) in &per_customer {
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "{customer}: out of source order: {list:?}"
        );
        ids.extend(list);
    }
    ids.sort_unstable();
    assert!(ids.iter().copied().eq(1..=2 * PER_PHASE));
}
