//! Spool GC: deletes batches at or below the lowest high-water mark of the
//! enabled destinations, recounts the spool for backpressure and gauges.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::stream::StreamShared;

pub async fn run(stream: Arc<StreamShared>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stream.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = collect(&stream).await {
            tracing::error!(stream = %stream.name, error = %e, "spool gc failed");
        }
    }
}

pub async fn collect(stream: &StreamShared) -> Result<u64, abrq_state::StoreError> {
    let deleted = stream.store.gc(&stream.name).await?;
    let stats = stream.store.spool_stats(&stream.name).await?;
    stream.spool_bytes.store(stats.bytes, Ordering::Relaxed);
    let m = &stream.events.metrics;
    m.spool_batches
        .with_label_values(&[&stream.name])
        .set(stats.batches as i64);
    m.spool_bytes
        .with_label_values(&[&stream.name])
        .set(stats.bytes as i64);
    for d in &stream.destinations {
        stream.events.marks(&d.labels, d.hwm(), stats.last_seq);
    }
    if deleted > 0 {
        tracing::debug!(stream = %stream.name, deleted, "spool gc");
        stream.spool_freed.notify_waiters();
    }
    Ok(deleted)
}
