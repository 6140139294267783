//! One place per event that writes both the log line and the metric, so
//! the two never disagree.

use std::sync::Arc;
use std::time::Duration;

use abrq_core::{BatchMeta, DeliveryError, DeliveryReport, ReasonClass};
use abrq_state::{DeadLetterRow, SkippedRange};
use chrono::{DateTime, Utc};

use crate::metrics::Metrics;

/// The label values of one (stream, destination).
#[derive(Debug, Clone)]
pub struct DestLabels {
    pub stream: String,
    pub destination: String,
    pub kind: String,
}

impl DestLabels {
    pub fn d(&self) -> [&str; 3] {
        [&self.stream, &self.destination, &self.kind]
    }

    fn d_plus<'a>(&'a self, extra: &'a str) -> [&'a str; 4] {
        [&self.stream, &self.destination, &self.kind, extra]
    }
}

#[derive(Clone)]
pub struct Events {
    pub metrics: Arc<Metrics>,
}

impl Events {
    pub fn new(metrics: Arc<Metrics>) -> Events {
        Events { metrics }
    }

    /// Creates every series of a destination at zero, so dashboards and
    /// "absent" alerts see them before the first event.
    pub fn register(&self, l: &DestLabels) {
        let m = &self.metrics;
        m.circuit_opened.with_label_values(&[&l.kind]);
        m.records_staged.with_label_values(&[&l.stream]);
        m.batches_staged.with_label_values(&[&l.stream]);
        for c in [
            &m.delivered_batches,
            &m.delivered_records,
            &m.delivered_bytes,
        ] {
            c.with_label_values(&l.d());
        }
        m.discarded_records.with_label_values(&l.d());
        m.skipped_batches.with_label_values(&l.d());
        for outcome in ["success", "failure"] {
            m.attempts.with_label_values(&l.d_plus(outcome));
        }
        for class in abrq_core::ReasonClass::ALL {
            m.dead_lettered.with_label_values(&l.d_plus(class.as_str()));
        }
        for what in ["truncate", "schema"] {
            m.ignored_instructions.with_label_values(&l.d_plus(what));
        }
        for what in ["values", "rows"] {
            m.dropped.with_label_values(&l.d_plus(what));
        }
    }

    pub fn staged(&self, stream: &str, batches: u64, records: u64) {
        tracing::debug!(stream, batches, records, "staged");
        self.metrics
            .batches_staged
            .with_label_values(&[stream])
            .inc_by(batches);
        self.metrics
            .records_staged
            .with_label_values(&[stream])
            .inc_by(records);
    }

    pub fn source_paused(&self, stream: &str, paused: bool) {
        if paused {
            tracing::warn!(
                stream,
                "spool is full; source paused until destinations catch up"
            );
        } else {
            tracing::info!(stream, "spool has room again; source resumed");
        }
        self.metrics
            .source_paused
            .with_label_values(&[stream])
            .set(i64::from(paused));
    }

    pub fn delivered(
        &self,
        l: &DestLabels,
        meta: &BatchMeta,
        report: &DeliveryReport,
        took: Duration,
    ) {
        tracing::debug!(stream = %l.stream, destination = %l.destination, seq = meta.seq, records = meta.records, bytes = report.bytes, "delivered");
        let m = &self.metrics;
        m.attempts.with_label_values(&l.d_plus("success")).inc();
        m.attempt_duration
            .with_label_values(&l.d())
            .observe(took.as_secs_f64());
        m.delivered_batches.with_label_values(&l.d()).inc();
        m.delivered_records
            .with_label_values(&l.d())
            .inc_by(meta.records);
        m.delivered_bytes
            .with_label_values(&l.d())
            .inc_by(report.bytes);
        let latency = (Utc::now() - meta.staged_at).num_milliseconds().max(0) as f64 / 1000.0;
        m.delivery_latency
            .with_label_values(&l.d())
            .observe(latency);
        let ignored = [
            ("truncate", report.ignored_truncates),
            ("schema", report.ignored_schemas),
        ];
        for (what, n) in ignored {
            if n > 0 {
                m.ignored_instructions
                    .with_label_values(&l.d_plus(what))
                    .inc_by(n);
            }
        }
        for (what, n) in [
            ("values", report.dropped_values),
            ("rows", report.dropped_rows),
        ] {
            if n > 0 {
                tracing::warn!(stream = %l.stream, destination = %l.destination, seq = meta.seq, what, count = n, "schema drift policy dropped data");
                m.dropped.with_label_values(&l.d_plus(what)).inc_by(n);
            }
        }
    }

    pub fn attempt_failed(
        &self,
        l: &DestLabels,
        seq: u64,
        attempt: u32,
        err: &DeliveryError,
        took: Duration,
    ) {
        tracing::warn!(stream = %l.stream, destination = %l.destination, seq, attempt, transient = err.is_transient(), error = %err.describe(), "delivery attempt failed");
        let m = &self.metrics;
        m.attempts.with_label_values(&l.d_plus("failure")).inc();
        m.attempt_duration
            .with_label_values(&l.d())
            .observe(took.as_secs_f64());
    }

    pub fn breaker_changed(&self, l: &DestLabels, state: &abrq_core::BreakerState) {
        self.metrics
            .circuit_state
            .with_label_values(&l.d())
            .set(state.gauge());
    }

    pub fn circuit_opened(&self, l: &DestLabels, until: Option<DateTime<Utc>>) {
        tracing::error!(stream = %l.stream, destination = %l.destination, until = ?until, "circuit breaker opened");
        self.metrics
            .circuit_opened
            .with_label_values(&[&l.kind])
            .inc();
    }

    pub fn circuit_closed(&self, l: &DestLabels, by: &str) {
        tracing::info!(stream = %l.stream, destination = %l.destination, by, "circuit breaker closed");
    }

    pub fn dead_lettered(&self, l: &DestLabels, seq: u64, class: ReasonClass, error: &str) {
        tracing::error!(stream = %l.stream, destination = %l.destination, seq, reason_class = %class, error, "batch dead-lettered");
        self.metrics
            .dead_lettered
            .with_label_values(&l.d_plus(class.as_str()))
            .inc();
        self.metrics
            .dead_letters_pending
            .with_label_values(&l.d())
            .inc();
    }

    pub fn replayed(&self, l: &DestLabels, id: i64, seq: u64) {
        tracing::info!(stream = %l.stream, destination = %l.destination, id, seq, "dead letter replayed");
        self.metrics
            .dead_letters_pending
            .with_label_values(&l.d())
            .dec();
    }

    pub fn discarded(&self, l: &DestLabels, row: &DeadLetterRow, actor: &str) {
        tracing::warn!(stream = %l.stream, destination = %l.destination, id = row.id, seq = row.seq, records = row.records, actor, "dead letter discarded: data loss");
        let m = &self.metrics;
        m.discarded_records
            .with_label_values(&l.d())
            .inc_by(row.records);
        m.dead_letters_pending.with_label_values(&l.d()).dec();
    }

    pub fn skipped(&self, l: &DestLabels, range: &SkippedRange) {
        tracing::warn!(stream = %l.stream, destination = %l.destination, from_seq = range.from_seq, to_seq = range.to_seq, "re-enabled destination skips batches the spool GC already removed");
        self.metrics
            .skipped_batches
            .with_label_values(&l.d())
            .inc_by(range.batches());
    }

    pub fn task_failed(&self, h: &crate::supervise::LoopHealth, error: &str, restart_in: Duration) {
        tracing::error!(stream = %h.stream, destination = %h.destination, task = h.kind.as_str(), error, restart_in = ?restart_in, "task failed; restarting");
        self.metrics
            .loop_restarts
            .with_label_values(&[&h.stream, &h.destination, h.kind.as_str()])
            .inc();
    }

    /// A task stopped on a definite failure: it waits for an operator.
    pub fn task_stopped(&self, h: &crate::supervise::LoopHealth, error: &str, recovery: &str) {
        tracing::error!(stream = %h.stream, destination = %h.destination, task = h.kind.as_str(), error, recovery, "task stopped: restarting cannot help until an operator acts");
    }

    /// Creates a task's restart series at zero.
    pub fn register_task(&self, h: &crate::supervise::LoopHealth) {
        self.metrics
            .loop_restarts
            .with_label_values(&[&h.stream, &h.destination, h.kind.as_str()]);
    }

    pub fn marks(&self, l: &DestLabels, hwm: u64, last_seq: u64) {
        let m = &self.metrics;
        m.high_water_mark.with_label_values(&l.d()).set(hwm as i64);
        m.backlog_batches
            .with_label_values(&l.d())
            .set(last_seq.saturating_sub(hwm) as i64);
    }
}
