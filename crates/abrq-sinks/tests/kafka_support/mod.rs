//! Shared by the kafka_* tests: a fresh 4-partition topic, the destination
//! under test, batches and reading a topic back.

#![allow(dead_code)] // each test binary uses a different part

pub mod secured;

use std::collections::HashMap;
use std::time::Duration;

use abrq_core::{idempotency_key, Batch, BatchMeta, Item, Record};
use abrq_sinks::kafka::{KafkaDestination, KafkaSettings, SaslMechanism};
use abrq_testkit::names;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use tokio::time::{timeout, Instant};

pub const PARTITIONS: i32 = 4;

/// The client properties that reach `brokers` in plaintext.
pub fn plain(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// A new topic with [`PARTITIONS`] partitions on `brokers`.
pub async fn create_topic(brokers: &str, prefix: &str) -> String {
    create_topic_with(plain(brokers), prefix).await
}

/// [`create_topic`] through a client configured by `client`.
pub async fn create_topic_with(client: ClientConfig, prefix: &str) -> String {
    let brokers = client.get("bootstrap.servers").unwrap_or("?").to_string();
    let topic = names::topic(prefix);
    let admin: AdminClient<DefaultClientContext> = client.create().expect("admin client");
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let results = admin
        .create_topics(
            &[NewTopic::new(
                &topic,
                PARTITIONS,
                TopicReplication::Fixed(1),
            )],
            &options,
        )
        .await
        .unwrap_or_else(|e| panic!("kafka at {brokers} is unreachable: {e}"));
    for r in results {
        r.unwrap_or_else(|(name, code)| panic!("create topic {name}: {code}"));
    }
    topic
}

pub fn settings(brokers: &str, topic: &str, partition_key: Option<&str>) -> KafkaSettings {
    KafkaSettings {
        stream: "orders".into(),
        destination: "kafka-test".into(),
        brokers: brokers.into(),
        topic: abrq_sinks::kafka::topic::Topic::parse(topic).expect("a valid topic"),
        partition_key: partition_key.map(str::to_string),
        format: Default::default(),
        transaction_topic: None,
        source: Default::default(),
        username: None,
        password: None,
        sasl_mechanism: SaslMechanism::Plain,
        tls: false,
        ca_file: None,
        message_timeout: Duration::from_secs(30),
        linger: Duration::from_millis(5),
        overrides: Vec::new(),
    }
}

pub fn destination(settings: KafkaSettings) -> KafkaDestination {
    KafkaDestination::new(settings)
}

/// Records `first..first+n`, each `{"seq": i, "customer": "c-{i % keys}"}`.
pub fn records(first: usize, n: usize, keys: usize) -> Vec<Item> {
    (first..first + n)
        .map(|i| {
            let v = json!({"seq": i, "customer": format!("c-{}", i % keys), "pad": "x".repeat(40)});
            Item::Record(Record::insert(v.as_object().unwrap().clone()))
        })
        .collect()
}

pub fn batch(seq: u64, items: Vec<Item>) -> Batch {
    Batch {
        meta: BatchMeta {
            stream: "orders".into(),
            seq,
            idempotency_key: idempotency_key(uuid::Uuid::from_u128(7), seq, uuid::Uuid::nil()),
            staged_at: chrono::Utc::now(),
            records: items.len() as u64,
            bytes: 0,
        },
        items,
        lines: None,
    }
}

/// A message as read back.
#[derive(Debug, Clone)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: Value,
    pub headers: HashMap<String, String>,
}

impl Consumed {
    pub fn seq(&self) -> u64 {
        self.value["seq"].as_u64().expect("a seq field")
    }
}

/// Reads `expected` messages from every partition of `topic` (fails if
/// fewer arrive), then briefly waits for any extra.
pub async fn consume(brokers: &str, topic: &str, expected: usize) -> Vec<Consumed> {
    consume_with(plain(brokers), topic, expected).await
}

/// [`consume`] through a client configured by `client`.
pub async fn consume_with(mut client: ClientConfig, topic: &str, expected: usize) -> Vec<Consumed> {
    let consumer: StreamConsumer = client
        .set("group.id", names::topic("kafka-test-group"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut out = Vec::with_capacity(expected);
    loop {
        let wait = if out.len() < expected {
            deadline.saturating_duration_since(Instant::now())
        } else {
            Duration::from_secs(2)
        };
        let Ok(m) = timeout(wait, consumer.recv()).await else {
            assert!(
                out.len() >= expected,
                "only {} of {expected} came back",
                out.len()
            );
            return out;
        };
        let m = m.expect("consume");
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        let v = h.value.map(|v| String::from_utf8_lossy(v).into_owned());
                        (h.key.to_string(), v.unwrap_or_default())
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(Consumed {
            partition: m.partition(),
            offset: m.offset(),
            key: m
                .key()
                .map(|k| String::from_utf8(k.to_vec()).expect("utf-8 key")),
            value: serde_json::from_slice(m.payload().expect("a payload")).expect("JSON value"),
            headers,
        });
    }
}
