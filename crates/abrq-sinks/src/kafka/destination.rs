//! [`KafkaDestination`]: one message per record, sends pipelined, the batch
//! delivered only when every record's delivery report succeeded.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abrq_core::{Batch, CheckReport, DeliveryError, DeliveryReport, Destination, Item, Op};
use async_trait::async_trait;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};
use rdkafka::producer::{BaseRecord, Producer, PurgeConfig, ThreadedProducer};
use tokio_util::task::AbortOnDropHandle;

use super::cloudevents;
use super::config::{KafkaSettings, MessageFormat};
use super::debezium;
use super::errors::kafka_error;
use super::markers;
use super::message;
use super::metadata::{fetch_partitions, fetch_topic_count, CHECK_WAIT, METADATA_TIMEOUT};
use super::reports::Context;
use crate::failure::Failure;

pub(super) type KafkaProducer = ThreadedProducer<Context>;

/// Batches one attempt keeps in flight at most (the engine also caps the
/// records it holds decoded).
const GROUP_BATCHES: usize = 16;

/// How long a send waits when librdkafka's queue is full, before it
/// offers the same record again.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(2);

/// How often an attempt looks for a refusal (see `purge_if_refused`).
const REFUSAL_POLL: Duration = Duration::from_millis(250);

/// A record, encoded before anything is sent: a batch that cannot be
/// encoded is refused whole, with nothing of it in the topic. Its value
/// may be the spooled batch's own bytes.
pub(super) struct Encoded<'a> {
    pub(super) index: usize,
    /// `abrq_op`: insert, update, delete or truncate.
    pub(super) op: &'static str,
    pub(super) topic: Arc<str>,
    /// The source table, for the `abrq_table` header.
    pub(super) table: Option<Arc<str>>,
    pub(super) key: Option<String>,
    /// None: a tombstone.
    pub(super) value: Option<Cow<'a, [u8]>>,
    /// After the idempotency key, for a second message of one record (a
    /// delete's tombstone).
    pub(super) part: &'static str,
    /// More headers (CloudEvents' attributes).
    pub(super) extra: Vec<(&'static str, String)>,
}

/// The topic of `table`'s records; item `index` names the record in an
/// error.
fn scope_topic(
    topic: &super::topic::Topic,
    table: Option<&abrq_core::TableRef>,
    index: usize,
) -> Result<Arc<str>, DeliveryError> {
    topic.render(table).map(Arc::from).map_err(|e| {
        Failure::Encoding {
            record: Some(index),
        }
        .error(e)
    })
}

/// A value as JSON; item `index` names the record in an error.
pub(super) fn json_bytes(
    value: &serde_json::Value,
    index: usize,
) -> Result<Vec<u8>, DeliveryError> {
    serde_json::to_vec(value).map_err(|e| {
        Failure::Encoding {
            record: Some(index),
        }
        .error(e)
    })
}

pub struct KafkaDestination {
    settings: KafkaSettings,
    /// Made on first use: creating it starts librdkafka's threads, which
    /// connect, and `build()` must do no I/O.
    producer: Mutex<Option<KafkaProducer>>,
    /// Shared with every producer made: outlives their rebuilds.
    context: Context,
    /// Each topic's partition count for round-robin placement; forgotten
    /// after a failed attempt, so added partitions are picked up.
    partitions: Mutex<HashMap<Arc<str>, i32>>,
    next_partition: AtomicUsize,
}

impl KafkaDestination {
    pub fn new(settings: KafkaSettings) -> Self {
        KafkaDestination {
            settings,
            producer: Mutex::new(None),
            context: Context::default(),
            partitions: Mutex::new(HashMap::new()),
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
            .create_with_context(self.context.clone())
            .map_err(|e| kafka_error("create a producer", self.settings.topic.template(), e))?;
        *slot = Some(p.clone());
        Ok(p)
    }

    fn cached_partitions(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, i32>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn partition_count(
        &self,
        producer: &KafkaProducer,
        topic: &Arc<str>,
        wait: Duration,
    ) -> Result<i32, DeliveryError> {
        if let Some(n) = self.cached_partitions().get(topic) {
            return Ok(*n);
        }
        let errors = self.context.errors.clone();
        let n = fetch_partitions(producer.clone(), topic.to_string(), errors, wait).await?;
        self.cached_partitions().insert(topic.clone(), n);
        Ok(n)
    }

    /// The partition count of each topic an unkeyed record goes to.
    async fn partition_counts<'r>(
        &self,
        producer: &KafkaProducer,
        records: impl Iterator<Item = &'r Encoded<'r>>,
    ) -> Result<HashMap<Arc<str>, i32>, DeliveryError> {
        let mut out = HashMap::new();
        for m in records.filter(|m| m.key.is_none()) {
            if !out.contains_key(&m.topic) {
                let n = self
                    .partition_count(producer, &m.topic, METADATA_TIMEOUT)
                    .await?;
                out.insert(m.topic.clone(), n);
            }
        }
        Ok(out)
    }

    /// A batch of lines is written from them where it can be (`lines.rs`),
    /// else decoded.
    fn encode<'b>(
        &self,
        batch: &'b Batch,
        report: &mut DeliveryReport,
    ) -> Result<Vec<Encoded<'b>>, DeliveryError> {
        let Some(bytes) = &batch.lines else {
            return self.encode_items(batch, report);
        };
        let key = self.settings.partition_key.as_deref();
        if let Some((out, truncates)) =
            super::lines::encoded(&self.settings.topic, key, batch.meta.seq, bytes)?
        {
            report.ignored_truncates += truncates;
            return Ok(out);
        }
        self.encode_items(&crate::spooled::decoded(batch, bytes)?, report)
    }

    fn encode_items(
        &self,
        batch: &Batch,
        report: &mut DeliveryReport,
    ) -> Result<Vec<Encoded<'static>>, DeliveryError> {
        let mut out = Vec::with_capacity(batch.items.len());
        let settings = &self.settings;
        let origin = debezium::Origin {
            source: &settings.source,
            stream: &settings.stream,
            staged_ms: batch.meta.staged_at.timestamp_millis(),
        };
        // the topic and table of the current scope, rendered once per scope
        let mut scope: Option<(Arc<str>, Option<Arc<str>>)> = None;
        let mut current = None;
        // each table's key columns, as the batch declares them (a table's
        // schema comes once per batch, at its first scope)
        let mut keys: HashMap<Option<&abrq_core::TableRef>, Vec<String>> = HashMap::new();
        for (index, table, item) in abrq_core::scoped(&batch.items) {
            let record = match item {
                Item::Record(r) => Some(r),
                Item::Marker { fields } => {
                    let topic = match &settings.transaction_topic {
                        Some(t) => Arc::from(t.as_str()),
                        None => scope_topic(&settings.topic, table, index)?,
                    };
                    out.push(markers::encoded(
                        fields,
                        settings.format,
                        &batch.meta,
                        index,
                        topic,
                    )?);
                    continue;
                }
                Item::Truncate if settings.format == MessageFormat::Debezium => None,
                // Kafka is a sink only: no truncation, no schema evolution.
                Item::Truncate => {
                    report.ignored_truncates += 1;
                    continue;
                }
                Item::Schema { columns } => {
                    report.ignored_schemas += 1;
                    keys.insert(table, abrq_core::key_columns(columns));
                    continue;
                }
                Item::Table(_) => continue,
            };
            if scope.is_none() || current != table {
                let name = scope_topic(&settings.topic, table, index)?;
                let t = table.map(|t| Arc::<str>::from(t.to_string()));
                scope = Some((name, t));
                current = table;
            }
            let (topic, table_name) = scope.clone().expect("set above");
            let Some(r) = record else {
                // a truncate, in Debezium's shape (no key: it is no row's)
                out.push(Encoded {
                    index,
                    op: "truncate",
                    topic,
                    table: table_name,
                    key: None,
                    value: Some(Cow::Owned(json_bytes(
                        &debezium::truncate(table, &origin),
                        index,
                    )?)),
                    part: "",
                    extra: Vec::new(),
                });
                continue;
            };
            let key = match settings.partition_key.as_deref() {
                Some(f) => message::key(r, f),
                None => keys.get(&current).and_then(|k| message::primary_key(r, k)),
            };
            let (value, extra) = match settings.format {
                MessageFormat::Json => (message::value(r, index)?, Vec::new()),
                MessageFormat::Debezium => {
                    let envelope = debezium::change(r, table, &origin);
                    (json_bytes(&envelope, index)?, Vec::new())
                }
                MessageFormat::Cloudevents => {
                    let id = message::idempotency_key(&batch.meta.idempotency_key, index, "");
                    let time = message::commit_time(r)
                        .unwrap_or_else(|| batch.meta.staged_at.to_rfc3339());
                    let stream = &settings.stream;
                    let kind = format!("record.{}", r.op.as_str());
                    let headers =
                        cloudevents::headers(id, stream, table_name.as_deref(), &kind, time);
                    (message::value(r, index)?, headers)
                }
            };
            let tombstone =
                settings.format == MessageFormat::Debezium && r.op == Op::Delete && key.is_some();
            out.push(Encoded {
                index,
                op: r.op.as_str(),
                topic: topic.clone(),
                table: table_name.clone(),
                key: key.clone(),
                value: Some(Cow::Owned(value)),
                part: "",
                extra,
            });
            if tombstone {
                // so a compacted topic forgets the row
                out.push(Encoded {
                    index,
                    op: "delete",
                    topic,
                    table: table_name,
                    key,
                    value: None,
                    part: ":tombstone",
                    extra: Vec::new(),
                });
            }
        }
        Ok(out)
    }

    /// Sends every record of every batch without waiting for each report,
    /// then waits for all of them. The first failure stops further sends;
    /// the reports already in flight are still awaited, so a retry starts
    /// clean.
    async fn send_all(
        &self,
        producer: &KafkaProducer,
        work: &[(&Batch, Vec<Encoded<'_>>)],
        partitions: &HashMap<Arc<str>, i32>,
    ) -> Result<(), DeliveryError> {
        let attempt = self.context.begin();
        let tally = &attempt.tally;
        let mut failed: Option<DeliveryError> = None;
        'batches: for (batch, records) in work {
            for m in records {
                if tally.has_failed() {
                    break 'batches;
                }
                let id = message::idempotency_key(&batch.meta.idempotency_key, m.index, m.part);
                let headers = message::headers(
                    &id,
                    &self.settings.stream,
                    m.op,
                    m.table.as_deref(),
                    &m.extra,
                );
                let name: &str = &m.topic;
                let mut rec =
                    BaseRecord::<str, [u8], usize>::with_opaque_to(name, attempt.number(m.index))
                        .headers(headers);
                if let Some(v) = &m.value {
                    rec = rec.payload(v.as_ref());
                }
                match (&m.key, partitions.get(&m.topic)) {
                    (Some(k), _) => rec = rec.key(k.as_str()),
                    (None, Some(&n)) => {
                        let next = self.next_partition.fetch_add(1, Ordering::Relaxed);
                        rec = rec.partition(i32::try_from(next % n as usize).unwrap_or(0));
                    }
                    (None, None) => {}
                }
                loop {
                    tally.sending();
                    match producer.send(rec) {
                        Ok(()) => break,
                        // librdkafka's queue is full: let reports free room,
                        // then offer the same record again.
                        Err((KafkaError::MessageProduction(Code::QueueFull), back)) => {
                            tally.not_sent();
                            rec = back;
                            tokio::time::sleep(QUEUE_FULL_WAIT).await;
                        }
                        Err((e, _)) => {
                            tally.not_sent();
                            failed = Some(kafka_error("send", name, e).at_record(m.index));
                            break 'batches;
                        }
                    }
                }
            }
        }
        let reported = tally.settled().await;
        match (failed, reported) {
            (Some(e), _) => Err(e),
            (None, Some(f)) => {
                Err(kafka_error("deliver", &f.topic, f.error.clone()).at_record(f.index))
            }
            (None, None) => Ok(()),
        }
    }
}

#[async_trait]
impl Destination for KafkaDestination {
    fn kind(&self) -> &'static str {
        "kafka"
    }

    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        let result = self.attempt(std::slice::from_ref(batch)).await;
        self.explained(result)
            .map(|mut r| r.pop().unwrap_or_default())
    }

    fn group_limit(&self) -> usize {
        GROUP_BATCHES
    }

    /// `json` messages are written from the spool's lines (`lines.rs`):
    /// no record is decoded into a map.
    fn reads_lines(&self) -> bool {
        self.settings.format == MessageFormat::Json
    }

    /// Several batches' records in flight at once; a failure fails the
    /// group, and the engine goes again one batch at a time (a record
    /// already sent is then sent again, as any retry does: its headers
    /// carry the batch's idempotency key).
    async fn deliver_group(&self, batches: &[Batch]) -> Result<Vec<DeliveryReport>, DeliveryError> {
        let result = self.attempt(batches).await;
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
                self.context.errors.clear();
                Ok(v)
            }
            Err(e) => match self.context.errors.last() {
                Some(why) if e.is_transient() => Err(e.with_note(why)),
                _ => Err(e),
            },
        }
    }

    /// Sends the batches' records in one pipeline (a group keeps several
    /// batches in flight) and succeeds once every report is in.
    async fn attempt(&self, batches: &[Batch]) -> Result<Vec<DeliveryReport>, DeliveryError> {
        let mut reports = vec![DeliveryReport::default(); batches.len()];
        let mut work = Vec::with_capacity(batches.len());
        for (batch, report) in batches.iter().zip(&mut reports) {
            work.push((batch, self.encode(batch, report)?));
        }
        if work.iter().all(|(_, records)| records.is_empty()) {
            return Ok(reports);
        }
        let producer = self.producer()?;
        let all = work.iter().flat_map(|(_, records)| records);
        let partitions = self.partition_counts(&producer, all).await?;
        // Aborted when dropped: on every way out of this attempt, the engine
        // cutting it off at its timeout included.
        let watchdog = self.purge_if_refused(&producer);
        let sent = self.send_all(&producer, &work, &partitions).await;
        drop(watchdog);
        if let Err(e) = sent {
            self.cached_partitions().clear();
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
        for ((_, records), report) in work.iter().zip(&mut reports) {
            report.bytes = records
                .iter()
                .map(|m| {
                    let value = m.value.as_ref().map_or(0, |v| v.len());
                    (value + m.key.as_ref().map_or(0, String::len)) as u64
                })
                .sum();
        }
        Ok(reports)
    }

    /// While an attempt runs: if the brokers refuse this client (its
    /// credentials, the TLS handshake), purges the producer's queue, so
    /// the attempt fails now with the reason instead of after the message
    /// timeout, and the breaker can open in seconds.
    fn purge_if_refused(&self, producer: &KafkaProducer) -> AbortOnDropHandle<()> {
        let (producer, errors) = (producer.clone(), self.context.errors.clone());
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
        let topic = &self.settings.topic;
        let brokers = &self.settings.brokers;
        if topic.per_table() {
            let errors = self.context.errors.clone();
            let what = topic.template().to_string();
            let n = fetch_topic_count(producer, what, errors, CHECK_WAIT).await?;
            return Ok(CheckReport {
                detail: format!(
                    "connected (bootstrap {brokers}, {n} topics); topic {:?} is chosen per source \
                     table, and each must exist (or the brokers must create topics)",
                    topic.template()
                ),
            });
        }
        let name: Arc<str> = Arc::from(topic.template());
        self.cached_partitions().remove(&name);
        let n = self.partition_count(&producer, &name, CHECK_WAIT).await?;
        Ok(CheckReport {
            detail: format!("topic {name} exists with {n} partitions (bootstrap {brokers})"),
        })
    }
}
