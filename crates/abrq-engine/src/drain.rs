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
use chrono::Utc;
use rand::SeedableRng;
use tokio::sync::watch;

use crate::destination::DestShared;
use crate::stream::StreamShared;

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

pub async fn run(stream: Arc<StreamShared>, dest: Arc<DestShared>) {
    let l = dest.labels.clone();
    let (delivered, rx) = watch::channel(dest.hwm());
    let marks = tokio::spawn(write_marks(stream.clone(), dest.clone(), rx));
    if let Err(e) = drain(&stream, &dest, &delivered).await {
        tracing::error!(stream = %l.stream, destination = %l.destination, error = %e, "drain loop stopped on a state store error");
    }
    // Closing the channel lets the mark writer commit the last mark and end.
    drop(delivered);
    if let Err(e) = marks.await {
        tracing::error!(stream = %l.stream, destination = %l.destination, error = %e, "mark writer failed");
    }
}

/// Commits the high-water mark durably, off the delivery path: the next
/// batch is delivered while the previous mark's commit is in flight, and
/// marks that arrive during a commit are coalesced into the next one. A
/// crash can only lose a mark, never move it early: the batches after the
/// last committed mark are delivered again (same names, same keys).
async fn write_marks(
    stream: Arc<StreamShared>,
    dest: Arc<DestShared>,
    mut rx: watch::Receiver<u64>,
) {
    let (s, d) = (stream.name.as_str(), dest.labels.destination.as_str());
    let mut durable = *rx.borrow_and_update();
    loop {
        let closed = rx.changed().await.is_err();
        let want = *rx.borrow_and_update();
        if want > durable {
            match stream.store.advance(s, d, want).await {
                Ok(()) => durable = want,
                Err(e) => {
                    tracing::error!(stream = s, destination = d, seq = want, error = %e, "cannot commit the high-water mark");
                }
            }
        }
        if closed {
            return;
        }
    }
}

async fn drain(
    stream: &StreamShared,
    dest: &DestShared,
    delivered: &watch::Sender<u64>,
) -> Result<(), abrq_state::StoreError> {
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
            current = match store.next_replay(s, d).await? {
                Some((row, batch)) => Some(Work::Replay { id: row.id, batch }),
                None => store.next_batch(s, dest.hwm()).await?.map(Work::Spool),
            };
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
                        delivered.send_replace(meta.seq);
                    }
                    Work::Replay { id, .. } => {
                        store.finish_replay(*id, Ok(())).await?;
                        stream.events.replayed(&dest.labels, *id, meta.seq);
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
) -> Result<(), abrq_state::StoreError> {
    let store = &stream.store;
    match work {
        Work::Spool(batch) => {
            store
                .dead_letter(&dest.labels.destination, &batch, class, error, attempts)
                .await?;
            dest.hwm.fetch_max(batch.meta.seq, Ordering::AcqRel);
            stream
                .events
                .dead_lettered(&dest.labels, batch.meta.seq, class, error);
            stream
                .events
                .marks(&dest.labels, dest.hwm(), stream.last_seq());
        }
        Work::Replay { id, batch } => {
            // It stays one pending dead letter, with the newer reason.
            store
                .finish_replay(id, Err((class, error.to_string())))
                .await?;
            tracing::error!(stream = %stream.name, destination = %dest.labels.destination, id, seq = batch.meta.seq, reason_class = %class, "replay failed; dead letter stays pending");
        }
    }
    Ok(())
}

async fn save_breaker(
    stream: &StreamShared,
    dest: &DestShared,
) -> Result<(), abrq_state::StoreError> {
    let state = dest.breaker_state();
    stream.events.breaker_changed(&dest.labels, &state);
    stream
        .store
        .save_breaker(&stream.name, &dest.labels.destination, &state)
        .await
}
