//! Spool GC: deletes batches at or below the lowest high-water mark of the
//! enabled destinations, recounts the spool for backpressure and gauges.
//! It holds no lease: every process sharing the state runs it, through the
//! engine's [`Unfenced`] handle (see `unfenced.rs` for why that is safe).

use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_state::StateWrite;

use crate::stream::StreamShared;
use crate::supervise::{describe, supervise, Fault};
use crate::unfenced::Unfenced;

/// How often expired ingest request keys are deleted.
const EXPIRE_EVERY: Duration = Duration::from_secs(60);

pub async fn run(stream: Arc<StreamShared>, store: Unfenced, every: Duration) {
    let s = &stream;
    supervise(s.gc_health(), s.events(), s.cancel(), || async {
        collect_every(s, &*store, every)
            .await
            .map_err(Fault::Transient)
    })
    .await
}

async fn collect_every(
    stream: &StreamShared,
    store: &dyn StateWrite,
    every: Duration,
) -> Result<(), String> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expired_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = stream.cancel().cancelled() => return Ok(()),
            _ = tick.tick() => {}
        }
        collect(stream, store)
            .await
            .map_err(|e| format!("spool gc: {}", describe(&e)))?;
        // A short window (a test's) is honoured within half of it.
        let every = EXPIRE_EVERY.min(stream.idempotency_window() / 2);
        if expired_at.is_none_or(|t| t.elapsed() >= every) {
            expire_request_keys(stream, store)
                .await
                .map_err(|e| format!("expiring ingest request keys: {}", describe(&e)))?;
            expired_at = Some(Instant::now());
        }
        stream.gc_health().progressed();
    }
}

async fn expire_request_keys(
    stream: &StreamShared,
    store: &dyn StateWrite,
) -> Result<(), abrq_state::StoreError> {
    let window =
        chrono::Duration::from_std(stream.idempotency_window()).unwrap_or(chrono::Duration::MAX);
    let before = chrono::Utc::now()
        .checked_sub_signed(window)
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    let n = store.expire_request_keys(before).await?;
    if n > 0 {
        tracing::debug!(stream = %stream.name(), expired = n, "ingest request keys expired");
    }
    Ok(())
}

/// One collection, writing through `store` (the engine's unfenced
/// handle; a test's whole store).
pub async fn collect(
    stream: &StreamShared,
    store: &dyn StateWrite,
) -> Result<u64, abrq_state::StoreError> {
    let name = stream.name();
    let deleted = store.gc(name).await?;
    let stats = stream.store().spool_stats(name).await?;
    stream.spool_counted(stats.bytes);
    let m = &stream.events().metrics;
    m.spool_batches
        .with_label_values(&[name])
        .set(stats.batches as i64);
    m.spool_bytes
        .with_label_values(&[name])
        .set(stats.bytes as i64);
    for d in stream.destinations() {
        stream
            .events()
            .marks(d.labels(), d.mark().durable(), stats.last_seq);
    }
    if deleted > 0 {
        tracing::debug!(stream = %name, deleted, "spool gc");
        stream.spool_freed();
    }
    Ok(deleted)
}
