//! The status an operator sees: per stream, the spool; per destination,
//! its switches, marks, backlog, breaker, dead letters, errors and skips.

use abrq_core::BreakerState;
use abrq_state::{DeadLetterState, SkippedRange, SpoolStats, StoreError};
use serde::Serialize;

use crate::engine::Engine;
use crate::stream::StreamShared;

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
    /// Backpressure holds the source while the spool is full.
    pub paused: bool,
    /// A finite source has staged everything it had.
    pub done: bool,
    /// Why the source stopped, if it failed; fix the input and restart.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DestinationStatus {
    pub name: String,
    pub kind: String,
    pub enabled: bool,
    pub paused: bool,
    pub high_water_mark: u64,
    pub backlog: u64,
    pub breaker: BreakerState,
    pub pending_dead_letters: u64,
    pub last_error: Option<String>,
    pub skipped_ranges: Vec<SkippedRange>,
    pub skipped_batches: u64,
    pub delivered_batches: u64,
    pub delivered_records: u64,
    pub delivered_bytes: u64,
    pub dead_lettered_batches: u64,
}

impl Engine {
    pub async fn status(&self) -> Result<Vec<StreamStatus>, StoreError> {
        let mut out = Vec::new();
        for s in self.streams() {
            out.push(self.stream_status(s).await?);
        }
        Ok(out)
    }

    pub async fn stream_status(&self, s: &StreamShared) -> Result<StreamStatus, StoreError> {
        let spool = s.store.spool_stats(&s.name).await?;
        let m = &self.metrics;
        let mut destinations = Vec::new();
        for row in s.store.destinations(&s.name).await? {
            let pending = s
                .store
                .dead_letters(&s.name, &row.name, Some(DeadLetterState::Pending))
                .await?
                .len() as u64;
            let skipped_ranges = s.store.skipped_ranges(&s.name, &row.name).await?;
            let labels = [s.name.as_str(), row.name.as_str(), row.kind.as_str()];
            let dead_lettered = abrq_core::ReasonClass::ALL
                .iter()
                .map(|c| {
                    m.dead_lettered
                        .with_label_values(&[labels[0], labels[1], labels[2], c.as_str()])
                        .get()
                })
                .sum();
            destinations.push(DestinationStatus {
                backlog: spool.last_seq.saturating_sub(row.high_water_mark),
                skipped_batches: skipped_ranges.iter().map(SkippedRange::batches).sum(),
                skipped_ranges,
                pending_dead_letters: pending,
                delivered_batches: m.delivered_batches.with_label_values(&labels).get(),
                delivered_records: m.delivered_records.with_label_values(&labels).get(),
                delivered_bytes: m.delivered_bytes.with_label_values(&labels).get(),
                dead_lettered_batches: dead_lettered,
                name: row.name,
                kind: row.kind,
                enabled: row.enabled,
                paused: row.paused,
                high_water_mark: row.high_water_mark,
                breaker: row.breaker,
                last_error: row.last_error,
            });
        }
        Ok(StreamStatus {
            name: s.name.clone(),
            uuid: s.uuid.to_string(),
            source: SourceStatus {
                engine: format!("{:?}", s.source_engine).to_lowercase(),
                paused: s.source_paused.load(std::sync::atomic::Ordering::Relaxed),
                done: *s.source_done.borrow(),
                error: s
                    .source_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            },
            spool,
            destinations,
        })
    }
}
