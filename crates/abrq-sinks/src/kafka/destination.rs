//! [`KafkaDestination`]: one message per record, sends pipelined, the batch
//! delivered only when every record's delivery report succeeded.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use abrq_core::{Batch, CheckReport, DeliveryError, DeliveryReport, Destination, Item, Op};
use async_trait::async_trait;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer, PurgeConfig};
use tokio_util::task::AbortOnDropHandle;

use super::config::KafkaSettings;
use super::context::ClientErrors;
use super::errors::kafka_error;
use super::message;
use super::metadata::fetch_partitions;

pub(super) type KafkaProducer = FutureProducer<ClientErrors>;

/// How often an attempt looks for a refusal (see `purge_if_refused`).
const REFUSAL_POLL: Duration = Duration::from_millis(250);

/// A record, encoded before anything is sent: a batch that cannot be
/// encoded is refused whole, with nothing of it in the topic.
struct Encoded {
    index: usize,
    op: Op,
    key: Option<String>,
    value: Vec<u8>,
}

pub struct KafkaDestination {
    settings: KafkaSettings,
    /// Made on first use: creating it starts librdkafka's threads, which
    /// connect, and `build()` must do no I/O.
    producer: Mutex<Option<KafkaProducer>>,
    /// Shared with every producer made: outlives their rebuilds.
    client_errors: ClientErrors,
    /// The topic's partition count for round-robin placement; forgotten
    /// after a failed attempt, so added partitions are picked up.
    partitions: Mutex<Option<i32>>,
    next_partition: AtomicUsize,
}

impl KafkaDestination {
    pub fn new(settings: KafkaSettings) -> Self {
        KafkaDestination {
            settings,
            producer: Mutex::new(None),
            client_errors: ClientErrors::default(),
            partitions: Mutex::new(None),
            next_partition: AtomicUsize::new(0),
        }
    }

    pub fn settings(&self) -> &KafkaSettings {
        &self.settings
    }

    fn producer(&self) -> Result<KafkaProducer, DeliveryError> {
        let mut slot = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let p: KafkaProducer = self
            .settings
            .client_config()
            .create_with_context(self.client_errors.clone())
            .map_err(|e| kafka_error("create a producer", &self.settings.topic, e))?;
        *slot = Some(p.clone());
        Ok(p)
    }

    fn cached_partitions(&self) -> std::sync::MutexGuard<'_, Option<i32>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn fetch_partitions(&self, producer: KafkaProducer) -> Result<i32, DeliveryError> {
        let (topic, errors) = (self.settings.topic.clone(), self.client_errors.clone());
        fetch_partitions(producer, topic, errors).await
    }

    async fn partition_count(&self, producer: &KafkaProducer) -> Result<i32, DeliveryError> {
        if let Some(n) = *self.cached_partitions() {
            return Ok(n);
        }
        let n = self.fetch_partitions(producer.clone()).await?;
        *self.cached_partitions() = Some(n);
        Ok(n)
    }

    fn encode(
        &self,
        batch: &Batch,
        report: &mut DeliveryReport,
    ) -> Result<Vec<Encoded>, DeliveryError> {
        let mut out = Vec::with_capacity(batch.items.len());
        for (index, item) in batch.items.iter().enumerate() {
            match item {
                Item::Record(r) => out.push(Encoded {
                    index,
                    op: r.op,
                    key: self
                        .settings
                        .partition_key
                        .as_deref()
                        .and_then(|f| message::key(r, f)),
                    value: message::value(r, index)?,
                }),
                // Kafka is a sink only: no truncation, no schema evolution.
                Item::Truncate => report.ignored_truncates += 1,
                Item::Schema { .. } => report.ignored_schemas += 1,
            }
        }
        Ok(out)
    }

    /// Sends every record without waiting for each report, then waits for
    /// all of them. The first failure stops further sends; the reports
    /// already in flight are still awaited, so a retry starts clean.
    async fn send_all(
        &self,
        producer: &KafkaProducer,
        batch: &Batch,
        records: &[Encoded],
        partitions: Option<i32>,
    ) -> Result<(), DeliveryError> {
        let topic = self.settings.topic.as_str();
        let mut pending: VecDeque<(usize, DeliveryFuture)> = VecDeque::new();
        let mut failed: Option<DeliveryError> = None;
        for m in records {
            let headers = message::headers(
                &batch.meta.idempotency_key,
                m.index,
                &self.settings.stream,
                m.op,
            );
            let mut rec = FutureRecord::<str, [u8]>::to(topic)
                .payload(&m.value)
                .headers(headers);
            match (&m.key, partitions) {
                (Some(k), _) => rec = rec.key(k.as_str()),
                (None, Some(n)) => {
                    let next = self.next_partition.fetch_add(1, Ordering::Relaxed);
                    rec = rec.partition(i32::try_from(next % n as usize).unwrap_or(0));
                }
                (None, None) => {}
            }
            loop {
                match producer.send_result(rec) {
                    Ok(f) => {
                        pending.push_back((m.index, f));
                        break;
                    }
                    // librdkafka's queue is full: wait for the oldest report
                    // (freeing room), then offer the same record again.
                    Err((KafkaError::MessageProduction(Code::QueueFull), back)) => {
                        rec = back;
                        match pending.pop_front() {
                            Some((i, f)) => note(&mut failed, topic, i, f.await),
                            None => tokio::time::sleep(Duration::from_millis(5)).await,
                        }
                    }
                    Err((e, _)) => {
                        failed.get_or_insert(kafka_error("send", topic, e).at_record(m.index));
                        break;
                    }
                }
            }
            if failed.is_some() {
                break;
            }
        }
        for (i, f) in pending {
            note(&mut failed, topic, i, f.await);
        }
        failed.map_or(Ok(()), Err)
    }
}

/// Keeps the first failure among the delivery reports. `Canceled` is the
/// report channel's error: the producer went away with the record unreported.
fn note<Canceled>(
    failed: &mut Option<DeliveryError>,
    topic: &str,
    index: usize,
    report: Result<OwnedDeliveryResult, Canceled>,
) {
    let err = match report {
        Ok(Ok(_)) => return,
        Ok(Err((e, _))) => e,
        Err(_) => KafkaError::Canceled,
    };
    failed.get_or_insert(kafka_error("deliver", topic, err).at_record(index));
}

#[async_trait]
impl Destination for KafkaDestination {
    fn kind(&self) -> &'static str {
        "kafka"
    }

    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        let result = self.attempt(batch).await;
        self.explained(result)
    }

    async fn check(&self) -> Result<CheckReport, DeliveryError> {
        let result = self.check_topic().await;
        self.explained(result)
    }
}

impl KafkaDestination {
    /// A transient failure gets the client's last connection-level error
    /// as a note: "timed out" alone does not tell an operator that the
    /// password or the CA is wrong.
    fn explained<T>(&self, result: Result<T, DeliveryError>) -> Result<T, DeliveryError> {
        match result {
            Ok(v) => {
                self.client_errors.clear();
                Ok(v)
            }
            Err(e) => match self.client_errors.last() {
                Some(why) if e.is_transient() => Err(e.with_note(why)),
                _ => Err(e),
            },
        }
    }

    async fn attempt(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        let mut report = DeliveryReport::default();
        let records = self.encode(batch, &mut report)?;
        if records.is_empty() {
            return Ok(report);
        }
        let producer = self.producer()?;
        let partitions = if records.iter().any(|m| m.key.is_none()) {
            Some(self.partition_count(&producer).await?)
        } else {
            None
        };
        // Aborted when dropped: on every way out of this attempt, the engine
        // cutting it off at its timeout included.
        let watchdog = self.purge_if_refused(&producer);
        let sent = self.send_all(&producer, batch, &records, partitions).await;
        drop(watchdog);
        if let Err(e) = sent {
            *self.cached_partitions() = None;
            // Every report is in, so the producer holds nothing: the next
            // attempt starts a new one. After timeouts librdkafka bumps its
            // idempotent epoch, which a broker may answer by fencing the
            // session for good (tansu does); a new producer id clears it.
            let old = self
                .producer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            // Destroying a librdkafka handle blocks while its threads stop.
            tokio::task::spawn_blocking(move || drop((old, producer)));
            return Err(e);
        }
        report.bytes = records
            .iter()
            .map(|m| (m.value.len() + m.key.as_ref().map_or(0, String::len)) as u64)
            .sum();
        Ok(report)
    }

    /// While an attempt runs: if the brokers refuse this client (its
    /// credentials, the TLS handshake), purges the producer's queue, so
    /// the attempt fails now with the reason instead of after the message
    /// timeout, and the breaker can open in seconds.
    fn purge_if_refused(&self, producer: &KafkaProducer) -> AbortOnDropHandle<()> {
        let (producer, errors) = (producer.clone(), self.client_errors.clone());
        let started = std::time::Instant::now();
        AbortOnDropHandle::new(tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFUSAL_POLL).await;
                if errors.refusal_since(started).is_some() {
                    let purge = PurgeConfig::default().queue().inflight();
                    let _ = tokio::task::spawn_blocking(move || producer.purge(purge)).await;
                    return;
                }
            }
        }))
    }

    async fn check_topic(&self) -> Result<CheckReport, DeliveryError> {
        let producer = self.producer()?;
        let n = self.fetch_partitions(producer).await?;
        *self.cached_partitions() = Some(n);
        Ok(CheckReport {
            detail: format!(
                "topic {} exists with {n} partitions (bootstrap {})",
                self.settings.topic, self.settings.brokers
            ),
        })
    }
}
