//! What other processes write to the shared state, brought into this
//! process every [`EVERY`]: batches another process staged wake the drain
//! loops held here; marks of drains held elsewhere keep status right; an
//! operator's pause or breaker reset through any process reaches the
//! holder within a second, and so does a backfill or a source restart
//! (an audit entry the source's holder takes up).

use std::sync::Arc;
use std::time::Duration;

use abrq_core::BreakerState;
use abrq_state::StoreResult;
use tokio_util::sync::CancellationToken;

use crate::destination::Switches;
use crate::stream::StreamShared;
use crate::supervise::describe;

const EVERY: Duration = Duration::from_millis(250);

pub(crate) async fn run(stream: Arc<StreamShared>, cancel: CancellationToken) {
    let mut failing = false;
    let mut last_audit = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
        match follow(&stream, &mut last_audit).await {
            Ok(()) => failing = false,
            // The heartbeat's health reports a store that cannot be
            // reached; this says it once per outage.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(stream = %stream.name(), error = %describe(&e), "cannot read the shared state; retrying");
            }
            Err(_) => {}
        }
    }
}

/// `last_audit`: the newest audit entry of the stream at the last poll
/// (None before the first).
async fn follow(s: &StreamShared, last_audit: &mut Option<Option<i64>>) -> StoreResult<()> {
    let newest = s
        .store()
        .audit_log(Some(s.name()), 1)
        .await?
        .first()
        .map(|e| e.id);
    let operator_acted = last_audit.is_some_and(|seen| seen != newest);
    if operator_acted {
        take_up_source_requests(s, last_audit.flatten()).await?;
    }
    *last_audit = Some(newest);
    let stats = s.store().spool_stats(s.name()).await?;
    s.saw_staged(stats.last_seq);
    if !s.source_tenure().held() {
        s.spool_counted(stats.bytes);
    }
    for row in s.store().destinations(s.name()).await? {
        let Some(d) = s.destination(&row.name) else {
            continue;
        };
        d.observe_switches(Switches::from(&row));
        if !d.tenure().held() {
            d.mark().observed(row.high_water_mark);
            d.with_breaker(|b| b.state = row.breaker);
            continue;
        }
        // An operator reset the breaker through another process: the
        // stored state is closed while the holder's is not.
        let reset = row.breaker == (BreakerState::Closed { failures: 0 })
            && !matches!(d.breaker_state(), BreakerState::Closed { .. });
        if reset && d.with_breaker(|b| b.reset()).is_some() {
            s.events().breaker_changed(d.labels(), &row.breaker);
            tracing::info!(stream = %s.name(), destination = %row.name, "circuit reset by an operator through another process");
            d.wake();
        }
        // A replay asked for through another process: the drain loop's
        // next read finds it. Woken only when the stream's audit log has
        // a new entry (every operator action writes one): a wake also
        // ends a retry backoff early.
        if operator_acted {
            d.wake();
        }
    }
    Ok(())
}

/// How many operator actions of one stream a poll reads at most.
const RECENT: u32 = 100;

/// Backfills and source restarts asked for after audit entry `after`
/// (through any process) go to the source when this process holds it.
async fn take_up_source_requests(s: &StreamShared, after: Option<i64>) -> StoreResult<()> {
    if !s.source_tenure().held() {
        return Ok(());
    }
    let mut recent = s.store().audit_log(Some(s.name()), RECENT).await?;
    recent.retain(|e| after.is_none_or(|seen| e.id > seen));
    recent.reverse();
    for entry in recent {
        match entry.action.as_str() {
            "backfill" => s.ask_backfill(crate::source_task::backfill_ask(&entry)),
            "source_restart" => {
                s.source_health().request_restart();
            }
            _ => {}
        }
    }
    Ok(())
}
