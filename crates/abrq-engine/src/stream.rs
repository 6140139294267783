//! What the tasks of one stream share: the store's read half, the
//! staged-seq signal that wakes drain loops, the spool accounting behind
//! backpressure, and what the source task tells status and takes from
//! operators.
//!
//! Nothing here writes to the store: a task writes through its tenure
//! (`tenure.rs`), an operator or an ingest request through an
//! [`Unfenced`] handle.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abrq_core::config::{BatchConfig, Config, SourceConfig, SourceEngine, StreamConfig};
use abrq_sources::{Progress, Source, SourceError, SourceFactory, SourceSpec};
use abrq_state::{
    NewBatch, RequestKey, StageOutcome, StateRead, StateWrite, StoreError, StreamRow,
};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::destination::DestShared;
use crate::engine::Handles;
use crate::events::Events;
use crate::supervise::{LoopHealth, LoopKind};
use crate::tenure::TenureSlot;
use crate::unfenced::Unfenced;

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("spool is full ({bytes} of {max} bytes); retry later")]
    SpoolFull { bytes: u64, max: u64 },
    #[error("shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A backfill asked for: its audit entry and table (None: every table).
pub type BackfillRequest = abrq_sources::BackfillAsk;

pub struct StreamShared {
    name: String,
    uuid: Uuid,
    source: SourceConfig,
    /// Makes the source task's source from the stored cursor.
    open_source: Arc<SourceFactory>,
    batch: BatchConfig,
    store: Arc<dyn StateRead>,
    events: Events,
    /// Highest staged seq; drain loops wait on changes.
    staged: watch::Sender<u64>,
    /// Bytes in the spool as last counted (staging adds, GC recounts).
    spool_bytes: AtomicU64,
    max_spool_bytes: u64,
    /// Notified when the GC frees spool space.
    spool_freed: Notify,
    source_paused: AtomicBool,
    /// True once a finite source has staged everything it had.
    source_done: watch::Sender<bool>,
    /// Where a database source reads, as it last said.
    source_progress: std::sync::Mutex<Option<Progress>>,
    /// Backfills asked for; the source task holds the receiver while it
    /// runs, so a restarted one reads those not read yet.
    backfill: UnboundedSender<BackfillRequest>,
    backfill_requests: tokio::sync::Mutex<UnboundedReceiver<BackfillRequest>>,
    /// The source task's health: failing while it cannot read or stage.
    source_health: LoopHealth,
    gc_health: LoopHealth,
    /// The engine's clock (breaker cooldowns).
    clock: Clock,
    /// How long an ingest Idempotency-Key is remembered.
    idempotency_window: Duration,
    destinations: Vec<Arc<DestShared>>,
    /// Ends every task of the stream (shutdown).
    cancel: CancellationToken,
    /// The source task's write handle and token.
    source_tenure: TenureSlot,
}

impl StreamShared {
    /// The stream as the store registered it (`row`, with `spool_bytes`
    /// spooled), with its destinations.
    pub(crate) fn new(
        sc: &StreamConfig,
        config: &Config,
        row: &StreamRow,
        spool_bytes: u64,
        destinations: Vec<Arc<DestShared>>,
        handles: &Handles,
    ) -> StreamShared {
        let name = sc.name.as_str();
        let source_health = LoopHealth::new(name, "", LoopKind::Source);
        let gc_health = LoopHealth::new(name, "", LoopKind::Gc);
        handles.events.register_task(&source_health);
        handles.events.register_task(&gc_health);
        let (backfill, backfill_requests) = mpsc::unbounded_channel();
        let resource = abrq_state::source_resource(name);
        StreamShared {
            name: name.to_string(),
            uuid: row.uuid,
            source: sc.source.get_ref().clone(),
            open_source: handles.sources.clone(),
            batch: sc.batch.clone(),
            store: handles.store.clone(),
            events: handles.events.clone(),
            staged: watch::Sender::new(row.last_seq),
            spool_bytes: AtomicU64::new(spool_bytes),
            max_spool_bytes: config.spool.max_bytes.0,
            spool_freed: Notify::new(),
            source_paused: AtomicBool::new(false),
            source_done: watch::Sender::new(false),
            source_progress: std::sync::Mutex::new(None),
            backfill,
            backfill_requests: tokio::sync::Mutex::new(backfill_requests),
            source_health,
            gc_health,
            clock: Clock::new(),
            idempotency_window: config.server.idempotency_window.0,
            destinations,
            cancel: handles.cancel.clone(),
            source_tenure: handles.tenures.slot(resource, handles.cancel.clone()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn uuid(&self) -> Uuid {
        self.uuid
    }

    pub fn source_engine(&self) -> SourceEngine {
        self.source.engine
    }

    pub fn source_config(&self) -> &SourceConfig {
        &self.source
    }

    /// The stream's source, read from `cursor` (the store's).
    pub fn open_source(&self, cursor: Option<&str>) -> Result<Box<dyn Source>, SourceError> {
        (self.open_source)(&SourceSpec {
            stream: &self.name,
            config: &self.source,
            cursor,
        })
    }

    pub fn batch_config(&self) -> &BatchConfig {
        &self.batch
    }

    /// How long an ingest Idempotency-Key is remembered.
    pub fn idempotency_window(&self) -> Duration {
        self.idempotency_window
    }

    /// The state, for reading. A write goes through a task's tenure
    /// ([`TenureSlot::store`]) or an [`Unfenced`] handle, never through
    /// this one:
    ///
    /// ```compile_fail,E0599
    /// # async fn f(stream: &abrq_engine::stream::StreamShared) {
    /// stream.store().advance("orders", "archive", 7).await.unwrap();
    /// # }
    /// ```
    pub fn store(&self) -> &dyn StateRead {
        &*self.store
    }

    pub fn events(&self) -> &Events {
        &self.events
    }

    /// The engine's clock (breaker cooldowns).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Ends every task of the stream (shutdown).
    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    pub fn destinations(&self) -> &[Arc<DestShared>] {
        &self.destinations
    }

    pub fn destination(&self, name: &str) -> Option<&Arc<DestShared>> {
        self.destinations
            .iter()
            .find(|d| d.labels().destination == name)
    }

    pub fn source_tenure(&self) -> &TenureSlot {
        &self.source_tenure
    }

    pub fn source_health(&self) -> &LoopHealth {
        &self.source_health
    }

    pub fn gc_health(&self) -> &LoopHealth {
        &self.gc_health
    }

    pub fn last_seq(&self) -> u64 {
        *self.staged.borrow()
    }

    /// Changes of the highest staged seq.
    pub fn subscribe_staged(&self) -> watch::Receiver<u64> {
        self.staged.subscribe()
    }

    /// Another process staged up to `last_seq` (shared state): wakes the
    /// drain loops waiting here, never moving the signal backwards.
    pub(crate) fn saw_staged(&self, last_seq: u64) {
        self.staged.send_if_modified(|v| {
            let up = last_seq > *v;
            if up {
                *v = last_seq;
            }
            up
        });
    }

    /// True once a finite source has staged everything it had.
    pub fn source_done(&self) -> bool {
        *self.source_done.borrow()
    }

    pub(crate) fn set_source_done(&self) {
        self.source_done.send_replace(true);
    }

    /// Where a database source reads, as it last said.
    pub fn source_progress(&self) -> Option<Progress> {
        self.source_progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Keeps a database source's progress for status and sets its lag
    /// gauges.
    pub(crate) fn set_source_progress(&self, p: Progress) {
        let m = &self.events.metrics;
        if let Some(s) = p.lag_seconds {
            m.source_lag_seconds.with_label_values(&[&self.name]).set(s);
        }
        if let Some(b) = p.lag_bytes {
            m.source_lag_bytes.with_label_values(&[&self.name]).set(b);
        }
        *self
            .source_progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(p);
    }

    /// Asks the source to read a table (or every table) again.
    pub(crate) fn ask_backfill(&self, ask: BackfillRequest) {
        // the receiver lives as long as the stream: a send cannot fail
        let _ = self.backfill.send(ask);
    }

    /// The backfills asked for, for the source task while it runs.
    pub(crate) async fn backfill_requests(
        &self,
    ) -> tokio::sync::MutexGuard<'_, UnboundedReceiver<BackfillRequest>> {
        self.backfill_requests.lock().await
    }

    /// Backpressure holds the source while the spool is full.
    pub fn source_paused(&self) -> bool {
        self.source_paused.load(Ordering::Relaxed)
    }

    /// Bytes the spool takes before it is full.
    pub fn spool_room(&self) -> u64 {
        self.max_spool_bytes
            .saturating_sub(self.spool_bytes.load(Ordering::Relaxed))
    }

    fn spool_full(&self) -> bool {
        self.spool_room() == 0
    }

    /// The spool holds `bytes`, as counted in the store just now.
    pub(crate) fn spool_counted(&self, bytes: u64) {
        self.spool_bytes.store(bytes, Ordering::Relaxed);
    }

    /// The GC freed spool space: a source waiting for room looks again.
    pub(crate) fn spool_freed(&self) {
        self.spool_freed.notify_waiters();
    }

    /// Stages as the source, through its tenure: waits (backpressure)
    /// while the spool is full.
    pub(crate) async fn stage_waiting(
        &self,
        batches: Vec<NewBatch>,
        cursor: Option<String>,
    ) -> Result<StageOutcome, StageError> {
        if self.spool_full() {
            self.set_source_paused(true);
            while self.spool_full() {
                tokio::select! {
                    _ = self.source_tenure.cancel().cancelled_owned() => return Err(StageError::ShuttingDown),
                    _ = self.spool_freed.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
            self.set_source_paused(false);
        }
        let store = self.source_tenure.store();
        self.stage_now(&*store, batches, cursor, None).await
    }

    /// Stages for an ingest request, which holds no lease: refuses at once
    /// while the spool is full, so the client retries instead of holding a
    /// connection.
    pub(crate) async fn stage_request(
        &self,
        store: &Unfenced,
        batches: Vec<NewBatch>,
        request_key: Option<RequestKey<'_>>,
    ) -> Result<StageOutcome, StageError> {
        if self.spool_full() {
            return Err(StageError::SpoolFull {
                bytes: self.spool_bytes.load(Ordering::Relaxed),
                max: self.max_spool_bytes,
            });
        }
        self.stage_now(&**store, batches, None, request_key).await
    }

    async fn stage_now(
        &self,
        store: &dyn StateWrite,
        batches: Vec<NewBatch>,
        cursor: Option<String>,
        request_key: Option<RequestKey<'_>>,
    ) -> Result<StageOutcome, StageError> {
        let records: u64 = batches.iter().map(|b| b.records).sum();
        let bytes: u64 = batches.iter().map(|b| b.bytes).sum();
        let n = batches.len() as u64;
        let outcome = store
            .stage(&self.name, batches, cursor, request_key)
            .await?;
        if let StageOutcome::Staged(seqs) = &outcome {
            if let Some(last) = seqs.last() {
                self.spool_bytes.fetch_add(bytes, Ordering::Relaxed);
                self.events.staged(&self.name, n, records);
                self.staged.send_replace(*last);
            }
        }
        Ok(outcome)
    }

    fn set_source_paused(&self, paused: bool) {
        if self.source_paused.swap(paused, Ordering::Relaxed) != paused {
            self.events.source_paused(&self.name, paused);
        }
    }
}
