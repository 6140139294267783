//! What the tasks of one stream share: the store, the staged-seq signal that
//! wakes drain loops, and the spool accounting behind backpressure.

use abrq_sources::{Progress, SourceFactory};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abrq_core::config::{BatchConfig, SourceConfig, SourceEngine};
use abrq_state::{NewBatch, RequestKey, StageOutcome, StateStore, StoreError};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::destination::DestShared;
use crate::events::Events;
use crate::supervise::LoopHealth;
use crate::tenure::TenureSlot;

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("spool is full ({bytes} of {max} bytes); retry later")]
    SpoolFull { bytes: u64, max: u64 },
    #[error("shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct StreamShared {
    pub name: String,
    pub uuid: Uuid,
    pub source_engine: SourceEngine,
    pub source: SourceConfig,
    /// Makes the source task's source from the stored cursor.
    pub open_source: Arc<SourceFactory>,
    pub batch: BatchConfig,
    pub store: Arc<dyn StateStore>,
    pub events: Events,
    /// Highest staged seq; drain loops wait on changes.
    pub staged: watch::Sender<u64>,
    /// Bytes in the spool as last counted (staging adds, GC recounts).
    pub spool_bytes: AtomicU64,
    pub max_spool_bytes: u64,
    /// Notified when the GC frees spool space.
    pub spool_freed: Notify,
    pub source_paused: AtomicBool,
    /// True once a finite source has staged everything it had.
    pub source_done: watch::Sender<bool>,
    /// Where a database source reads, as it last said.
    pub source_progress: std::sync::Mutex<Option<Progress>>,
    /// Backfills asked for and not yet handed to the source (a table, or
    /// None for all of them).
    pub backfill_requests: std::sync::Mutex<Vec<Option<String>>>,
    /// The source task's health: failing while it cannot read or stage.
    pub source_health: LoopHealth,
    pub gc_health: LoopHealth,
    /// The engine's clock (breaker cooldowns).
    pub clock: Clock,
    /// How long an ingest Idempotency-Key is remembered.
    pub idempotency_window: Duration,
    pub destinations: Vec<Arc<DestShared>>,
    /// Ends every task of the stream (shutdown).
    pub cancel: CancellationToken,
    /// The source task's store handle and token.
    pub source_tenure: TenureSlot,
}

impl StreamShared {
    pub fn last_seq(&self) -> u64 {
        *self.staged.borrow()
    }

    /// Another process staged up to `last_seq` (shared state): wakes the
    /// drain loops waiting here, never moving the signal backwards.
    pub fn saw_staged(&self, last_seq: u64) {
        self.staged.send_if_modified(|v| {
            let up = last_seq > *v;
            if up {
                *v = last_seq;
            }
            up
        });
    }

    /// Keeps a database source's progress for status and sets its lag
    /// gauges.
    pub fn set_source_progress(&self, p: Progress) {
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

    pub fn destination(&self, name: &str) -> Option<&Arc<DestShared>> {
        self.destinations
            .iter()
            .find(|d| d.labels.destination == name)
    }

    /// Bytes the spool takes before it is full.
    pub fn spool_room(&self) -> u64 {
        self.max_spool_bytes
            .saturating_sub(self.spool_bytes.load(Ordering::Relaxed))
    }

    fn spool_full(&self) -> bool {
        self.spool_room() == 0
    }

    /// Stages as the source: waits (backpressure) while the spool is full.
    pub async fn stage_waiting(
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

    /// Stages for an ingest request: refuses at once while the spool is
    /// full, so the client retries instead of holding a connection.
    pub async fn stage_request(
        &self,
        batches: Vec<NewBatch>,
        request_key: Option<RequestKey<'_>>,
    ) -> Result<StageOutcome, StageError> {
        if self.spool_full() {
            return Err(StageError::SpoolFull {
                bytes: self.spool_bytes.load(Ordering::Relaxed),
                max: self.max_spool_bytes,
            });
        }
        self.stage_now(&*self.store, batches, None, request_key)
            .await
    }

    async fn stage_now(
        &self,
        store: &dyn StateStore,
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
