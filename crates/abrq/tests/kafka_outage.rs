//! A Kafka broker cut off mid-run, through the real binary: a tansu broker
//! of the test's own behind a loopback proxy, beside a local destination of
//! the same stream.
//!
//! While the link is cut, kafka's attempts fail (their records time out
//! inside the attempt), its breaker opens and the trip is counted, and
//! local keeps delivering. Once the link is back the backlog drains; every
//! record is in the topic, and after deduplicating by
//! `abrq_idempotency_key` each key's records are in source order.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use abrq_sinks::kafka::rdkafka;
use common::*;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
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

async fn create_topic(brokers: &str) -> String {
    let topic = abrq_testkit::names::topic("e2e-outage");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let new = NewTopic::new(&topic, PARTITIONS, TopicReplication::Fixed(1));
    for r in admin.create_topics(&[new], &options).await.unwrap() {
        r.unwrap_or_else(|(name, code)| panic!("create topic {name}: {code}"));
    }
    topic
}

/// (idempotency key, customer, order_id) of the messages, in offset order
/// per partition, read until `expected` distinct idempotency keys arrived
/// (duplicates from retried attempts included as they come).
async fn consume(brokers: &str, topic: &str, expected: usize) -> Vec<(String, String, u64)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", abrq_testkit::names::topic("e2e-outage-group"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut out = Vec::new();
    let mut distinct = HashSet::new();
    while distinct.len() < expected {
        let m = tokio::time::timeout(LONG, consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {expected} records came back", distinct.len()))
            .unwrap();
        let key = m
            .headers()
            .and_then(|h| {
                h.iter()
                    .find(|h| h.key == "abrq_idempotency_key")
                    .and_then(|h| h.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            })
            .expect("every message has abrq_idempotency_key");
        let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        let customer = String::from_utf8_lossy(m.key().unwrap()).into_owned();
        distinct.insert(key.clone());
        out.push((key, customer, value["order_id"].as_u64().unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn kafka_outage_opens_the_breaker_and_drains_in_key_order_once_restored() {
    let broker = abrq_testkit::ProxiedBroker::start().await;
    let brokers = broker.brokers();
    let topic = create_topic(&brokers).await;

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
    let messages = consume(&brokers, &topic, total).await;
    let mut seen = HashSet::new();
    let mut per_customer: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, customer, id) in messages {
        if seen.insert(key) {
            per_customer.entry(customer).or_default().push(id);
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
