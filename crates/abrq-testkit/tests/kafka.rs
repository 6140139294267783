//! Kafka through rdkafka, against the Kafka-protocol broker (tansu) of
//! scripts/services.sh: a 4-partition topic, keyed records with headers
//! produced as abrq produces them, read back in order.

use std::collections::BTreeMap;
use std::time::Duration;

use abrq_testkit::{java_partition, names, Kafka};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use tokio::time::{timeout, Instant};

const PARTITIONS: i32 = 4;
const RECORDS: usize = 400;
const KEYS: usize = 23;
const BATCH_KEY: &str = "0123456789abcdef0123456789abcdef";

/// What was sent for one record and where the broker put it.
struct Sent {
    key: String,
    partition: i32,
    offset: i64,
}

#[tokio::test]
async fn kafka_keyed_records_with_headers_round_trip() {
    let kafka = Kafka::from_env();
    let topic = names::topic("kafka-smoke");
    create_topic(&kafka, &topic).await;

    let sent = produce(&kafka, &topic).await;
    for record in &sent {
        // murmur2, as the Java client places keys, so other tools agree
        assert_eq!(
            record.partition,
            java_partition(record.key.as_bytes(), PARTITIONS),
            "key {}",
            record.key
        );
    }

    let consumed = consume(&kafka, &topic).await;
    let mut last_seq: BTreeMap<i32, usize> = BTreeMap::new();
    for (seq, partition, offset, key) in consumed {
        let expected = &sent[seq];
        assert_eq!(key, expected.key, "key of record {seq}");
        assert_eq!(partition, expected.partition, "partition of record {seq}");
        assert_eq!(offset, expected.offset, "offset of record {seq}");
        if let Some(previous) = last_seq.insert(partition, seq) {
            assert!(
                previous < seq,
                "partition {partition}: {seq} after {previous}"
            );
        }
    }
}

async fn create_topic(kafka: &Kafka, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &kafka.brokers)
        .create()
        .expect("admin client");
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &options,
        )
        .await
        .unwrap_or_else(|e| panic!("kafka at {} is unreachable: {e}", kafka.brokers));
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("create topic {name}: {code}"));
    }
}

async fn produce(kafka: &Kafka, topic: &str) -> Vec<Sent> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", "20000")
        .create()
        .expect("producer");

    let mut pending = Vec::with_capacity(RECORDS);
    for seq in 0..RECORDS {
        let key = format!("customer-{}", seq % KEYS);
        let payload = format!("{{\"seq\":{seq}}}");
        let idempotency_key = format!("{BATCH_KEY}:{seq}");
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "abrq_idempotency_key",
                value: Some(&idempotency_key),
            })
            .insert(Header {
                key: "abrq_stream",
                value: Some("smoke"),
            })
            .insert(Header {
                key: "abrq_op",
                value: Some("insert"),
            });
        let record = FutureRecord::to(topic)
            .key(&key)
            .payload(&payload)
            .headers(headers);
        let delivery = producer
            .send_result(record)
            .unwrap_or_else(|(e, _)| panic!("enqueue record {seq}: {e}"));
        pending.push((key, delivery));
    }

    let mut sent = Vec::with_capacity(RECORDS);
    for (seq, (key, delivery)) in pending.into_iter().enumerate() {
        let delivered = delivery
            .await
            .expect("delivery report")
            .unwrap_or_else(|(e, _)| panic!("deliver record {seq}: {e}"));
        sent.push(Sent {
            key,
            partition: delivered.partition,
            offset: delivered.offset,
        });
    }
    sent
}

/// Reads every record back; yields (seq, partition, offset, key) in the
/// order received, after checking each record's headers.
async fn consume(kafka: &Kafka, topic: &str) -> Vec<(usize, i32, i64, String)> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &kafka.brokers)
        .set("group.id", names::topic("kafka-smoke-group"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut consumed = Vec::with_capacity(RECORDS);
    while consumed.len() < RECORDS {
        let message = timeout(deadline - Instant::now(), consumer.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {RECORDS} records came back", consumed.len()))
            .expect("consume");
        let payload = std::str::from_utf8(message.payload().expect("a payload")).expect("utf-8");
        let seq: usize = payload
            .trim_start_matches("{\"seq\":")
            .trim_end_matches('}')
            .parse()
            .expect("a seq payload");
        let headers = message.headers().expect("headers");
        let header = |name: &str| {
            headers
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(
            header("abrq_idempotency_key"),
            Some(format!("{BATCH_KEY}:{seq}"))
        );
        assert_eq!(header("abrq_stream").as_deref(), Some("smoke"));
        assert_eq!(header("abrq_op").as_deref(), Some("insert"));
        let key = String::from_utf8(message.key().expect("a key").to_vec()).expect("utf-8 key");
        consumed.push((seq, message.partition(), message.offset(), key));
    }
    consumed
}
