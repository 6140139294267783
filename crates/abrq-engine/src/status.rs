//! The status an operator sees: per stream, the spool; per destination,
//! its switches, marks, backlog, breaker, dead letters, errors and skips.

use abrq_core::BreakerState;
use abrq_state::{DeadLetterState, SkippedRange, SpoolStats, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::engine::Engine;
use crate::stream::StreamShared;
use crate::supervise::{Failure, LoopKind};

fn destination_state(row: &abrq_state::DestinationRow, task_failing: bool) -> &'static str {
    if !row.enabled {
        "disabled"
    } else if row.paused {
        "paused"
    } else if task_failing {
        "failing"
    } else {
        match row.breaker {
            BreakerState::Open { .. } => "breaker_open",
            BreakerState::HalfOpen => "retrying",
            BreakerState::Closed { failures } if failures > 0 => "retrying",
            BreakerState::Closed { .. } => "draining",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamStatus {
    pub name: String,
    pub uuid: String,
    pub source: SourceStatus,
    pub spool: SpoolStats,
    pub destinations: Vec<DestinationStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    pub engine: String,
    /// `running`, `paused` (backpressure), `done`, `failing` (retried),
    /// `stopped` (a definite failure: it waits for an operator, see
    /// `recovery`), or with shared state `standby` (another process reads
    /// it).
    pub state: &'static str,
    /// Backpressure holds the source while the spool is full.
    pub paused: bool,
    /// A finite source has staged everything it had.
    pub done: bool,
    /// Why the source is failing, if it is; while `failing` it is retried
    /// with backoff, so fixing the input (or the file's permissions, ...)
    /// is enough.
    pub error: Option<String>,
    /// While `stopped`: what the operator does (then `abrq source
    /// restart`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    pub failing_since: Option<DateTime<Utc>>,
    /// Source task restarts over the process's life.
    pub restarts: u64,
    /// Records and batches staged by this process (a rate is their
    /// change over time).
    pub staged_records: u64,
    pub staged_batches: u64,
    /// The spool GC's failure, if it is failing.
    pub gc_failure: Option<Failure>,
    /// Database sources: where they read (postgres cdc: slot,
    /// publication, read and confirmed LSN; cursor: the last row).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<i64>,
    /// Shared state: the process reading this source now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
}

/// Who holds a lease, as of this process's last heartbeat; `None` inside
/// means nobody holds it now (handed back or expired, free to claim).
#[derive(Debug, Clone, Serialize)]
pub struct Holder {
    pub node_id: Option<String>,
    /// This process holds it.
    pub here: bool,
    pub epoch: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A destination task's failure, with which task it is.
#[derive(Debug, Clone, Serialize)]
pub struct TaskFailure {
    pub task: LoopKind,
    #[serde(flatten)]
    pub failure: Failure,
}

#[derive(Debug, Clone, Serialize)]
pub struct DestinationStatus {
    pub name: String,
    pub kind: String,
    /// `disabled`, `paused`, `failing` (its drain loop or mark writer is
    /// failing and restarting), `breaker_open`, `retrying` (the last
    /// attempts failed) or `draining`.
    pub state: &'static str,
    /// Why its drain loop or mark writer is failing, since when.
    pub task_failure: Option<TaskFailure>,
    /// Drain loop and mark writer restarts over the process's life.
    pub restarts: u64,
    pub enabled: bool,
    pub paused: bool,
    pub high_water_mark: u64,
    /// Batches staged after the high-water mark (the spool's last seq
    /// minus the mark).
    pub backlog: u64,
    /// Records and bytes of the spooled batches after the mark.
    pub backlog_records: u64,
    pub backlog_bytes: u64,
    /// How long the oldest batch it has not passed has been staged: how
    /// far behind it is, in time (0 with no backlog).
    pub lag_seconds: f64,
    pub breaker: BreakerState,
    pub pending_dead_letters: u64,
    pub last_error: Option<String>,
    pub skipped_ranges: Vec<SkippedRange>,
    pub skipped_batches: u64,
    pub delivered_batches: u64,
    pub delivered_records: u64,
    pub delivered_bytes: u64,
    pub dead_lettered_batches: u64,
    /// Shared state: the process draining this destination now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
}

impl Engine {
    /// Shared state only: who holds `resource`.
    fn holder(&self, resource: &str) -> Option<Holder> {
        let cluster = self.cluster.as_ref()?;
        let me = cluster.membership.node.instance;
        let view = cluster.view();
        let lease = view.leases.iter().find(|l| l.resource == resource);
        Some(match lease {
            Some(l) if l.live => Holder {
                node_id: l.node_id.clone(),
                here: l.instance == Some(me),
                epoch: l.epoch,
                expires_at: l.expires_at,
            },
            other => Holder {
                node_id: None,
                here: false,
                epoch: other.map_or(0, |l| l.epoch),
                expires_at: None,
            },
        })
    }

    pub async fn status(&self) -> Result<Vec<StreamStatus>, StoreError> {
        let mut out = Vec::new();
        for s in self.streams() {
            out.push(self.stream_status(s).await?);
        }
        Ok(out)
    }

    pub async fn stream_status(&self, s: &StreamShared) -> Result<StreamStatus, StoreError> {
        // Read before the spool: a source said done has staged its last
        // batch, so `done` with this `last_seq` is a consistent pair.
        let done = s.source_done();
        let spool = s.store().spool_stats(s.name()).await?;
        let m = &self.metrics;
        let mut destinations = Vec::new();
        for row in s.store().destinations(s.name()).await? {
            let pending = s
                .store()
                .dead_letters(s.name(), &row.name, Some(DeadLetterState::Pending))
                .await?
                .len() as u64;
            let skipped_ranges = s.store().skipped_ranges(s.name(), &row.name).await?;
            let labels = [s.name(), row.name.as_str(), row.kind.as_str()];
            let dead_lettered = abrq_core::ReasonClass::ALL
                .iter()
                .map(|c| {
                    m.dead_lettered
                        .with_label_values(&[labels[0], labels[1], labels[2], c.as_str()])
                        .get()
                })
                .sum();
            let live = s.destination(&row.name);
            let task_failure = live
                .and_then(|d| d.task_failure())
                .map(|(task, failure)| TaskFailure { task, failure });
            let restarts = live
                .map(|d| d.drain_health().restarts() + d.marks_health().restarts())
                .unwrap_or(0);
            let state = destination_state(&row, task_failure.is_some());
            // The durable mark, the one the gauges and `drained()` read too.
            // Shared state: another process may have moved it since.
            let hwm = live.map_or(row.high_water_mark, |d| {
                d.mark().durable().max(row.high_water_mark)
            });
            let holder = self.holder(&abrq_state::drain_resource(s.name(), &row.name));
            let behind = s.store().backlog(s.name(), hwm).await?;
            let lag_seconds = behind.oldest_staged_at.map_or(0.0, |t| {
                (chrono::Utc::now() - t).num_milliseconds().max(0) as f64 / 1000.0
            });
            destinations.push(DestinationStatus {
                state,
                task_failure,
                restarts,
                backlog: spool.last_seq.saturating_sub(hwm),
                backlog_records: behind.records,
                backlog_bytes: behind.bytes,
                lag_seconds,
                skipped_batches: skipped_ranges.iter().map(SkippedRange::batches).sum(),
                skipped_ranges,
                pending_dead_letters: pending,
                delivered_batches: m.delivered_batches.with_label_values(&labels).get(),
                delivered_records: m.delivered_records.with_label_values(&labels).get(),
                delivered_bytes: m.delivered_bytes.with_label_values(&labels).get(),
                dead_lettered_batches: dead_lettered,
                holder,
                name: row.name,
                kind: row.kind,
                enabled: row.enabled,
                paused: row.paused,
                high_water_mark: hwm,
                breaker: row.breaker,
                last_error: row.last_error,
            });
        }
        let failure = s.source_health().failure();
        let progress = s.source_progress();
        let paused = s.source_paused();
        let holder = self.holder(&abrq_state::source_resource(s.name()));
        let elsewhere = self.cluster.is_some() && !s.source_tenure().held();
        let state = match (&failure, done, paused) {
            _ if elsewhere => "standby",
            (Some(f), _, _) if f.stopped() => "stopped",
            (Some(_), _, _) => "failing",
            (None, true, _) => "done",
            (None, false, true) => "paused",
            (None, false, false) => "running",
        };
        Ok(StreamStatus {
            name: s.name().to_string(),
            uuid: s.uuid().to_string(),
            source: SourceStatus {
                engine: format!("{:?}", s.source_engine()).to_lowercase(),
                state,
                paused,
                done,
                error: failure.as_ref().map(|f| f.error.clone()),
                recovery: failure.as_ref().and_then(|f| f.recovery.clone()),
                failing_since: failure.as_ref().map(|f| f.since),
                restarts: s.source_health().restarts(),
                staged_records: m.records_staged.with_label_values(&[s.name()]).get(),
                staged_batches: m.batches_staged.with_label_values(&[s.name()]).get(),
                gc_failure: s.gc_health().failure(),
                position: progress.as_ref().map(|p| p.position.clone()),
                lag_seconds: progress.as_ref().and_then(|p| p.lag_seconds),
                lag_bytes: progress.as_ref().and_then(|p| p.lag_bytes),
                holder,
            },
            spool,
            destinations,
        })
    }
}
