//! The kafka destination against the Kafka-protocol broker (tansu) of
//! scripts/services.sh: placement, order (one batch or a group in flight),
//! headers, ignored instructions, oversize records and `check()`. Each test has its own 4-partition topic.

mod kafka_support;

use std::collections::{BTreeMap, HashMap, HashSet};

use abrq_core::{Destination, Disposition, Item, ReasonClass};
use abrq_testkit::Kafka;
use abrq_testkit::{java_partition, murmur2};
use kafka_support::*;

const RECORDS: usize = 20_000;
const PER_BATCH: usize = 1_000;

/// Kafka's own `UtilsTest.testMurmur2` vectors.
#[test]
fn murmur2_matches_kafkas_test_vectors() {
    let cases: [(&str, i32); 6] = [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        ("abc", 479470107),
    ];
    for (input, expected) in cases {
        assert_eq!(murmur2(input.as_bytes()), expected, "{input}");
    }
}

async fn deliver_all(dest: &impl Destination, keys: usize) {
    for (n, first) in (0..RECORDS).step_by(PER_BATCH).enumerate() {
        let b = batch(n as u64, records(first, PER_BATCH, keys));
        dest.deliver(&b)
            .await
            .unwrap_or_else(|e| panic!("batch {n}: {}", e.describe()));
    }
}

/// The same batches, as the drain hands them over with a backlog: several
/// in flight per attempt.
async fn deliver_grouped(dest: &impl Destination, keys: usize) {
    let all: Vec<_> = (0..RECORDS)
        .step_by(PER_BATCH)
        .enumerate()
        .map(|(n, first)| batch(n as u64, records(first, PER_BATCH, keys)))
        .collect();
    assert!(dest.group_limit() > 1);
    for group in all.chunks(dest.group_limit()) {
        let reports = dest
            .deliver_group(group)
            .await
            .unwrap_or_else(|e| panic!("group from {}: {}", group[0].meta.seq, e.describe()));
        assert_eq!(reports.len(), group.len());
        assert!(reports.iter().all(|r| r.bytes > 0));
    }
}

#[tokio::test]
async fn keyed_records_follow_java_placement_in_source_order() {
    keyed_placement_and_order(false).await;
}

#[tokio::test]
async fn grouped_batches_keep_placement_and_source_order() {
    keyed_placement_and_order(true).await;
}

async fn keyed_placement_and_order(grouped: bool) {
    let kafka = Kafka::from_env();
    let topic = create_topic(&kafka.brokers, "keyed").await;
    let dest = destination(settings(&kafka.brokers, &topic, Some("customer")));
    match grouped {
        true => deliver_grouped(&dest, 97).await,
        false => deliver_all(&dest, 97).await,
    }

    let got = consume(&kafka.brokers, &topic, RECORDS).await;
    assert_eq!(got.len(), RECORDS, "no duplicates without failures");
    let mut placed: HashMap<String, i32> = HashMap::new();
    let mut last: HashMap<String, u64> = HashMap::new();
    let mut idempotency = HashSet::new();
    for m in &got {
        let key = m.key.clone().expect("a key");
        assert_eq!(key, m.value["customer"].as_str().unwrap());
        let p = *placed.entry(key.clone()).or_insert(m.partition);
        assert_eq!(p, m.partition, "key {key} on two partitions");
        assert_eq!(p, java_partition(key.as_bytes(), PARTITIONS), "key {key}");
        if let Some(prev) = last.insert(key.clone(), m.seq()) {
            assert!(prev < m.seq(), "key {key}: {} after {prev}", m.seq());
        }
        // the three headers, on every message
        assert_eq!(m.headers["abrq_stream"], "orders");
        assert_eq!(m.headers["abrq_op"], "insert");
        let k = &m.headers["abrq_idempotency_key"];
        let (batch_key, index) = k.rsplit_once(':').expect("key:index");
        let seq = m.seq() as usize;
        assert_eq!(
            batch_key,
            batch((seq / PER_BATCH) as u64, vec![]).meta.idempotency_key
        );
        assert_eq!(index, (seq % PER_BATCH).to_string());
        assert!(idempotency.insert(k.clone()), "idempotency key {k} twice");
    }
    assert_eq!(placed.len(), 97);
}

#[tokio::test]
async fn unkeyed_records_round_robin_evenly() {
    let kafka = Kafka::from_env();
    let topic = create_topic(&kafka.brokers, "unkeyed").await;
    let dest = destination(settings(&kafka.brokers, &topic, None));
    deliver_all(&dest, 97).await;

    let got = consume(&kafka.brokers, &topic, RECORDS).await;
    assert_eq!(got.len(), RECORDS);
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    for m in &got {
        assert!(m.key.is_none());
        assert_eq!(m.headers.len(), 3, "{:?}", m.headers);
        *counts.entry(m.partition).or_default() += 1;
    }
    assert_eq!(counts.len(), PARTITIONS as usize, "{counts:?}");
    let (min, max) = (
        counts.values().min().unwrap(),
        counts.values().max().unwrap(),
    );
    assert!(max - min <= 1, "{counts:?}");
}

#[tokio::test]
async fn instructions_are_counted_never_sent() {
    let kafka = Kafka::from_env();
    let topic = create_topic(&kafka.brokers, "instructions").await;
    let dest = destination(settings(&kafka.brokers, &topic, Some("customer")));
    let mut items = records(0, 2, 2);
    items.insert(1, Item::Truncate);
    items.push(Item::Schema {
        columns: serde_json::Map::new(),
    });
    let report = dest.deliver(&batch(0, items)).await.unwrap();
    assert_eq!((report.ignored_truncates, report.ignored_schemas), (1, 1));
    let got = consume(&kafka.brokers, &topic, 2).await;
    assert_eq!(got.len(), 2);
    // the index is the item's place in the batch, instructions included
    let mut indexes: Vec<String> = got
        .iter()
        .map(|m| {
            m.headers["abrq_idempotency_key"]
                .rsplit_once(':')
                .unwrap()
                .1
                .to_string()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "2"]);
}

#[tokio::test]
async fn oversize_record_is_rejected_naming_its_index() {
    let kafka = Kafka::from_env();
    let topic = create_topic(&kafka.brokers, "oversize").await;
    let mut s = settings(&kafka.brokers, &topic, Some("customer"));
    s.overrides
        .push(("message.max.bytes".into(), "10000".into()));
    let dest = destination(s);
    let mut items = records(0, 5, 2);
    if let Item::Record(r) = &mut items[3] {
        r.fields.insert("big".into(), "y".repeat(50_000).into());
    }
    let e = dest.deliver(&batch(0, items)).await.unwrap_err();
    assert_eq!(
        e.disposition,
        Disposition::DeadLetter(ReasonClass::Rejected),
        "{}",
        e.describe()
    );
    assert_eq!(e.record_index, Some(3), "{}", e.describe());
}

#[tokio::test]
async fn check_reports_partitions_and_missing_topics() {
    let kafka = Kafka::from_env();
    let topic = create_topic(&kafka.brokers, "check").await;
    let report = destination(settings(&kafka.brokers, &topic, None))
        .check()
        .await
        .unwrap();
    assert!(report.detail.contains("4 partitions"), "{}", report.detail);

    let missing = abrq_testkit::names::topic("missing");
    let e = destination(settings(&kafka.brokers, &missing, None))
        .check()
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());
}
