//! The kafka destination against a raw rdkafka producer on the same broker
//! in the same run: the same records (200 B and 1 KiB JSON), the same
//! producer settings (acks=all, idempotence, murmur2, linger), the same
//! key and headers, the same batches, each batch fully acknowledged before
//! the next, as the delivery contract requires. The raw loop does only the
//! unavoidable work: serialize, send pipelined, await the reports.

use std::time::Instant;

use abrq_core::config::Config;
use abrq_core::{Batch, Destination};
use abrq_sinks::kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use abrq_sinks::kafka::rdkafka::client::DefaultClientContext;
use abrq_sinks::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use abrq_sinks::kafka::rdkafka::message::{Header, OwnedHeaders};
use abrq_sinks::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use abrq_sinks::kafka::{KafkaDestination, KafkaSettings};
use clap::Args;
use serde_json::{Map, Value};

#[derive(Args)]
pub struct KafkaArgs {
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long, default_value_t = 5_000)]
    batch: usize,
    #[arg(
        long,
        env = "ABRQ_TEST_KAFKA_BROKERS",
        default_value = "127.0.0.1:9092"
    )]
    brokers: String,
}

pub async fn run(a: KafkaArgs) -> anyhow::Result<()> {
    println!(
        "| {} records, batches of {}, acks=all + idempotence, keyed, 4 partitions; \
         broker: tansu (a Kafka-protocol broker, not Apache Kafka) | records/s | ratio |",
        a.records, a.batch
    );
    println!("|---|---|---|");
    for size in [200, 1024] {
        let records: Vec<Map<String, Value>> =
            (0..a.records).map(|i| super::record(i, size)).collect();
        let batches: Vec<Batch> = records
            .chunks(a.batch)
            .enumerate()
            .map(|(i, rs)| super::batch_of(i as u64, rs.to_vec()))
            .collect();
        let n = a.records as f64;
        let (mut raw, mut ours) = (Vec::new(), Vec::new());
        for round in 0..a.rounds {
            let topic = format!("abrq-bench-{}-{size}-{round}", std::process::id());
            create_topic(&a.brokers, &topic).await?;
            let settings = settings(&a.brokers, &topic)?;
            let r = raw_loop(&settings, &batches).await?;
            let dest = KafkaDestination::new(settings);
            let start = Instant::now();
            for b in &batches {
                dest.deliver(b)
                    .await
                    .map_err(|e| anyhow::anyhow!(e.describe()))?;
            }
            let o = start.elapsed().as_secs_f64();
            eprintln!(
                "{size} B round {round}: raw {:.0}/s, destination {:.0}/s",
                n / r,
                n / o
            );
            raw.push(n / r);
            ours.push(n / o);
        }
        let (r, o) = (super::median(raw), super::median(ours));
        println!("| {size} B: raw rdkafka producer | {r:.0} | 1.00 |");
        println!(
            "| {size} B: destination / raw (target >= 0.8) | {o:.0} | {:.2} |",
            o / r
        );
    }
    Ok(())
}

/// The destination's settings as an operator configures them.
fn settings(brokers: &str, topic: &str) -> anyhow::Result<KafkaSettings> {
    let lines = format!(
        "engine = \"kafka\"\nhost = \"{brokers}\"\ndatabase = \"{topic}\"\npartition_key = \"id\""
    );
    let cfg = Config::destination("k", &lines).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    KafkaSettings::from_config("bench", &cfg).map_err(anyhow::Error::msg)
}

/// Same producer config, same key, value and headers; no abrq code.
async fn raw_loop(settings: &KafkaSettings, batches: &[Batch]) -> anyhow::Result<f64> {
    let producer: FutureProducer = settings.client_config().create()?;
    let start = Instant::now();
    for b in batches {
        let mut pending = std::collections::VecDeque::with_capacity(b.items.len());
        for (i, r) in b.records().enumerate() {
            let value = serde_json::to_vec(&r.fields)?;
            let key = r.fields["id"].to_string();
            let idem = format!("{}:{i}", b.meta.idempotency_key);
            let headers = OwnedHeaders::new_with_capacity(3)
                .insert(Header {
                    key: "abrq_idempotency_key",
                    value: Some(&idem),
                })
                .insert(Header {
                    key: "abrq_stream",
                    value: Some("bench"),
                })
                .insert(Header {
                    key: "abrq_op",
                    value: Some("insert"),
                });
            let mut rec = FutureRecord::to(settings.topic.template())
                .key(key.as_str())
                .payload(value.as_slice())
                .headers(headers);
            loop {
                match producer.send_result(rec) {
                    Ok(f) => break pending.push_back(f),
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        rec = back;
                        if let Some(f) = pending.pop_front() {
                            f.await?.map_err(|(e, _)| e)?;
                        }
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            }
        }
        for f in pending {
            f.await?.map_err(|(e, _)| e)?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

pub(crate) async fn create_topic(brokers: &str, topic: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = abrq_sinks::kafka::rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let options = AdminOptions::new();
    for r in admin
        .create_topics(
            &[NewTopic::new(topic, 4, TopicReplication::Fixed(1))],
            &options,
        )
        .await?
    {
        r.map_err(|(t, code)| anyhow::anyhow!("create topic {t}: {code}"))?;
    }
    Ok(())
}
