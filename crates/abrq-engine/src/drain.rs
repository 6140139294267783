//! One drain loop per (stream, destination). The high-water mark moves only
//! after the destination durably accepted a batch (or it was dead-lettered);
//! a batch is never skipped (head-of-line), transient failures back off with
//! full jitter, the breaker stops attempts while open, and a permanent
//! failure dead-letters at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::breaker::Permit;
use abrq_core::{Batch, DeliveryError, Disposition, ReasonClass};
use abrq_state::StoreError;
use chrono::Utc;
use rand::SeedableRng;

use crate::destination::DestShared;
use crate::stream::StreamShared;
use crate::supervise::{describe, supervise};

/// What the loop is working on: a spooled batch or an operator's replay.
enum Work {
    Spool(Batch),
    Replay { id: i64, batch: Batch },
}

impl Work {
    fn batch(&self) -> &Batch {
        match self {
            Work::Spool(b) | Work::Replay { batch: b, .. } => b,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("attempt timed out after {0:?}")]
struct AttemptTimeout(Duration);

/// The drain loop of one destination, under its supervisor.
pub async fn run(stream: Arc<StreamShared>, dest: Arc<DestShared>) {
    supervise(
        &dest.drain_health,
        &stream.events,
        &stream.cancel,
        || async { drain(&stream, &dest).await.map_err(|e| describe(&e)) },
    )
    .await
}

/// The mark writer of one destination, under its supervisor.
pub async fn run_marks(stream: Arc<StreamShared>, dest: Arc<DestShared>) {
    supervise(&dest.marks_health, &stream.events, &stream.cancel, || {
        write_marks(&stream, &dest)
    })
    .await
}

/// Commits the high-water mark durably, off the delivery path: the next
/// batch is delivered while the previous mark's commit is in flight, and
/// marks that arrive during a commit are coalesced into the next one. A
/// crash can only lose a mark, never move it early: the batches after the
/// last committed mark are delivered again (same names, same keys). A
/// commit that fails is a task failure: the supervisor retries it.
async fn write_marks(stream: &StreamShared, dest: &DestShared) -> Result<(), String> {
    let mut rx = dest.marks.subscribe();
    loop {
        let want = *rx.borrow_and_update();
        commit_mark(stream, dest, want).await?;
        tokio::select! {
            // The engine commits the last marks itself once every drain
            // loop has stopped (see `flush_mark`).
            _ = stream.cancel.cancelled() => return Ok(()),
            changed = rx.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

async fn commit_mark(stream: &StreamShared, dest: &DestShared, want: u64) -> Result<(), String> {
    if want <= dest.durable_hwm() {
        return Ok(());
    }
    let (s, d) = (stream.name.as_str(), dest.labels.destination.as_str());
    stream
        .store
        .advance(s, d, want)
        .await
        .map_err(|e| format!("cannot commit high-water mark {want}: {}", describe(&e)))?;
    dest.durable_hwm.fetch_max(want, Ordering::AcqRel);
    dest.marks_health.progressed();
    Ok(())
}

/// Commits the last delivered mark at shutdown, after the drain loop ended.
pub async fn flush_mark(stream: &StreamShared, dest: &DestShared) {
    let want = *dest.marks.borrow();
    if let Err(e) = commit_mark(stream, dest, want).await {
        tracing::error!(stream = %stream.name, destination = %dest.labels.destination, error = %e, "last high-water mark not committed; its batches are delivered again after a restart");
    }
}

async fn drain(stream: &StreamShared, dest: &DestShared) -> Result<(), StoreError> {
    let store = &stream.store;
    let (s, d) = (stream.name.as_str(), dest.labels.destination.as_str());
    let mut staged = stream.staged.subscribe();
    let mut switches = dest.switches.subscribe();
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut current: Option<Work> = None;
    let mut attempts: u32 = 0;
    loop {
        if stream.cancel.is_cancelled() {
            return Ok(());
        }
        if !dest.switches().draining() {
            // Paused or disabled: drop the in-hand batch; it is re-read later.
            current = None;
            attempts = 0;
            tokio::select! {
                _ = stream.cancel.cancelled() => return Ok(()),
                _ = switches.changed() => {}
            }
            continue;
        }
        if current.is_none() {
            attempts = 0;
            current = next_work(stream, dest).await?;
            dest.drain_health.progressed();
            if current.is_none() {
                staged.borrow_and_update();
                if stream.last_seq() > dest.hwm() {
                    continue; // staged between the read and the subscribe
                }
                tokio::select! {
                    _ = stream.cancel.cancelled() => return Ok(()),
                    _ = staged.changed() => {}
                    _ = switches.changed() => {}
                    _ = dest.wake.notified() => {}
                }
                continue;
            }
        }
        let permit = dest.with_breaker(|b| {
            let before = b.state;
            let p = b.permit(Utc::now());
            (p, before != b.state)
        });
        match permit {
            (Permit::WaitUntil(until), _) => {
                // Open circuit: no attempt, no retry budget spent.
                let wait = (until - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                tokio::select! {
                    _ = stream.cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(wait) => {}
                    _ = dest.wake.notified() => {}
                    _ = switches.changed() => {}
                }
                continue;
            }
            (Permit::Go, changed) => {
                if changed {
                    save_breaker(stream, dest).await?;
                }
            }
        }
        if !dest.switches().draining() {
            // Paused or disabled while the batch was being read: an operator
            // who saw the pause acknowledged must not see one more delivery.
            continue;
        }
        let work = current.as_ref().expect("work was loaded above");
        attempts += 1;
        let started = Instant::now();
        let result = match tokio::time::timeout(
            dest.retry.attempt_timeout,
            dest.destination.deliver(work.batch()),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(DeliveryError::transient(AttemptTimeout(
                dest.retry.attempt_timeout,
            ))),
        };
        let took = started.elapsed();
        match result {
            Ok(report) => {
                let meta = &work.batch().meta;
                match work {
                    Work::Spool(_) => {
                        dest.hwm.fetch_max(meta.seq, Ordering::AcqRel);
                        dest.marks.send_replace(meta.seq);
                    }
                    Work::Replay { id, .. } => {
                        if finish_replay(stream, dest, *id, Ok(())).await? {
                            stream.events.replayed(&dest.labels, *id, meta.seq);
                        }
                    }
                }
                stream.events.delivered(&dest.labels, meta, &report, took);
                stream
                    .events
                    .marks(&dest.labels, dest.hwm(), stream.last_seq());
                let was_closed = dest.with_breaker(|b| {
                    let closed = matches!(b.state, abrq_core::BreakerState::Closed { failures: 0 });
                    b.on_success();
                    closed
                });
                if !was_closed {
                    stream
                        .events
                        .circuit_closed(&dest.labels, "successful attempt");
                    save_breaker(stream, dest).await?;
                }
                current = None;
            }
            Err(err) => {
                let seq = work.batch().meta.seq;
                stream
                    .events
                    .attempt_failed(&dest.labels, seq, attempts, &err, took);
                let describe = err.describe();
                store.set_last_error(s, d, Some(&describe)).await?;
                let class = match err.disposition {
                    Disposition::DeadLetter(class) => Some(class),
                    Disposition::Retry => {
                        let tripped = dest.with_breaker(|b| b.on_failure(Utc::now()));
                        save_breaker(stream, dest).await?;
                        if tripped {
                            let until = match dest.breaker_state() {
                                abrq_core::BreakerState::Open { until } => Some(until),
                                _ => None,
                            };
                            stream.events.circuit_opened(&dest.labels, until);
                        }
                        (attempts >= dest.retry.max_attempts)
                            .then_some(ReasonClass::RetriesExhausted)
                    }
                };
                if let Some(class) = class {
                    let work = current.take().expect("work in hand");
                    dead_letter(stream, dest, work, class, &describe, attempts).await?;
                    continue;
                }
                let sleep = err
                    .retry_after
                    .unwrap_or_else(|| dest.retry.backoff(attempts, &mut rng));
                tokio::select! {
                    _ = stream.cancel.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(sleep) => {}
                    _ = dest.wake.notified() => {}
                }
            }
        }
    }
}

async fn dead_letter(
    stream: &StreamShared,
    dest: &DestShared,
    work: Work,
    class: ReasonClass,
    error: &str,
    attempts: u32,
) -> Result<(), StoreError> {
    let store = &stream.store;
    match work {
        Work::Spool(batch) => {
            store
                .dead_letter(&dest.labels.destination, &batch, class, error, attempts)
                .await?;
            dest.hwm.fetch_max(batch.meta.seq, Ordering::AcqRel);
            dest.durable_hwm.fetch_max(batch.meta.seq, Ordering::AcqRel);
            stream
                .events
                .dead_lettered(&dest.labels, batch.meta.seq, class, error);
            stream
                .events
                .marks(&dest.labels, dest.hwm(), stream.last_seq());
        }
        Work::Replay { id, batch } => {
            // It stays one pending dead letter, with the newer reason.
            if finish_replay(stream, dest, id, Err((class, error.to_string()))).await? {
                tracing::error!(stream = %stream.name, destination = %dest.labels.destination, id, seq = batch.meta.seq, reason_class = %class, "replay failed; dead letter stays pending");
            }
        }
    }
    Ok(())
}

/// The next thing to deliver: a requested replay first, else the next
/// spooled batch. A batch (or a dead letter's copy) that cannot be decoded
/// is dead-lettered with reason `encoding` for this destination and the
/// loop goes on: one bad payload never stops a destination.
async fn next_work(stream: &StreamShared, dest: &DestShared) -> Result<Option<Work>, StoreError> {
    let store = &stream.store;
    let (s, d) = (stream.name.as_str(), dest.labels.destination.as_str());
    loop {
        match store.next_replay(s, d).await {
            Ok(Some((row, batch))) => return Ok(Some(Work::Replay { id: row.id, batch })),
            Ok(None) => {}
            Err(e @ StoreError::ReplayPayload { id, seq, .. }) => {
                let error = e.to_string();
                if finish_replay(
                    stream,
                    dest,
                    id,
                    Err((ReasonClass::Encoding, error.clone())),
                )
                .await?
                {
                    tracing::error!(
                        stream = s,
                        destination = d,
                        id,
                        seq,
                        error,
                        "replay cannot decode the dead letter; it stays pending"
                    );
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        match store.next_batch(s, dest.hwm()).await {
            Ok(batch) => return Ok(batch.map(Work::Spool)),
            Err(e @ StoreError::Payload { seq, .. }) => {
                let error = e.to_string();
                store.dead_letter_undecodable(s, d, seq, &error).await?;
                dest.hwm.fetch_max(seq, Ordering::AcqRel);
                dest.durable_hwm.fetch_max(seq, Ordering::AcqRel);
                let class = ReasonClass::Encoding;
                stream
                    .events
                    .dead_lettered(&dest.labels, seq, class, &error);
                stream
                    .events
                    .marks(&dest.labels, dest.hwm(), stream.last_seq());
            }
            Err(e) => return Err(e),
        }
    }
}

/// Ends a replay. False when an operator discarded the dead letter while
/// its replay ran: the discard stands (and was audited), the loop goes on.
async fn finish_replay(
    stream: &StreamShared,
    dest: &DestShared,
    id: i64,
    outcome: Result<(), (ReasonClass, String)>,
) -> Result<bool, StoreError> {
    let delivered = outcome.is_ok();
    match stream.store.finish_replay(id, outcome).await {
        Ok(()) => Ok(true),
        Err(StoreError::NotPending { state, .. }) => {
            tracing::warn!(stream = %stream.name, destination = %dest.labels.destination, id, state, delivered, "dead letter was no longer pending when its replay ended");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

async fn save_breaker(stream: &StreamShared, dest: &DestShared) -> Result<(), StoreError> {
    let state = dest.breaker_state();
    stream.events.breaker_changed(&dest.labels, &state);
    stream
        .store
        .save_breaker(&stream.name, &dest.labels.destination, &state)
        .await
}
