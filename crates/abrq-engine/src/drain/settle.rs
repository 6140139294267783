//! The outcome of an attempt: a success moves the mark (or ends a replay)
//! and closes the breaker; a failure is counted by the breaker, then
//! dead-letters the batch (the batch's own fault, or its retries are spent)
//! or backs off with full jitter before the next attempt.

use std::time::Duration;

use abrq_core::{DeliveryError, DeliveryReport, Disposition, ReasonClass};
use abrq_state::StoreError;

use super::work::Work;
use super::{Drainer, Flow};
use crate::destination::DestShared;
use crate::stream::StreamShared;

impl Drainer<'_> {
    pub(super) async fn settle(
        &mut self,
        result: Result<Vec<DeliveryReport>, DeliveryError>,
        took: Duration,
    ) -> Result<Flow, StoreError> {
        let grouped = matches!(self.current, Some(Work::Group(_)));
        match result {
            Ok(reports) => {
                self.succeeded(reports, took).await?;
                Ok(Flow::Next)
            }
            Err(err) if grouped => self.group_failed(err, took).await,
            Err(err) => self.failed(err, took).await,
        }
    }

    async fn succeeded(
        &mut self,
        reports: Vec<DeliveryReport>,
        took: Duration,
    ) -> Result<(), StoreError> {
        let (stream, dest) = (self.stream, self.dest);
        let work = self.current.take().expect("work in hand");
        for (batch, report) in work.batches().iter().zip(&reports) {
            let meta = &batch.meta;
            match &work {
                Work::Spool(_) | Work::Group(_) => dest.mark().delivered(meta.seq),
                Work::Replay { id, .. } => {
                    if finish_replay(stream, dest, *id, Ok(())).await? {
                        stream.events().replayed(dest.labels(), *id, meta.seq);
                    }
                }
            }
            stream.events().delivered(dest.labels(), meta, report, took);
        }
        if let Some(t) = dest.with_breaker(|b| b.on_success()) {
            self.breaker_changed(t).await?;
        }
        Ok(())
    }

    /// A grouped attempt failed: its batches go again one at a time (a
    /// batch at fault is then dead-lettered alone). The attempt counts as
    /// one of its first batch's (`max_attempts` holds for it as for any
    /// attempt); an outage still counts with the breaker and backs off.
    async fn group_failed(
        &mut self,
        err: DeliveryError,
        took: Duration,
    ) -> Result<Flow, StoreError> {
        let (stream, dest) = (self.stream, self.dest);
        let work = self.current.take().expect("work in hand");
        let (first, last) = (
            work.first().meta.seq,
            work.batches().last().map_or(0, |b| b.meta.seq),
        );
        self.singles_until = last;
        let attempts = self.attempts;
        self.attempts = 0;
        stream
            .events()
            .attempt_failed(dest.labels(), first, attempts, &err, took);
        let describe = err.describe();
        tracing::warn!(stream = %stream.name(), destination = %dest.labels().destination, first, last, error = %describe, "grouped attempt failed; its batches go one at a time");
        dest.tenure()
            .store()
            .set_last_error(stream.name(), &dest.labels().destination, Some(&describe))
            .await?;
        if let Disposition::DeadLetter(_) = err.disposition {
            // a batch at fault: the singles find it; the first one's next
            // attempt still follows this one in number
            self.carried = Some((first, attempts));
            return Ok(Flow::Next);
        }
        let now = stream.clock().now();
        if let Some(t) = dest.with_breaker(|b| b.on_failure(now)) {
            self.breaker_changed(t).await?;
        }
        if attempts >= dest.retry().max_attempts {
            // the first batch's budget is spent: dead-letter it alone
            let batch = work.first().clone();
            let class = ReasonClass::RetriesExhausted;
            dead_letter(stream, dest, Work::Spool(batch), class, &describe, attempts).await?;
            return Ok(Flow::Next);
        }
        self.carried = Some((first, attempts));
        let pause = err
            .retry_after
            .unwrap_or_else(|| dest.retry().backoff(attempts, &mut self.rng));
        Ok(tokio::select! {
            _ = dest.tenure().cancel().cancelled_owned() => Flow::Stop,
            _ = tokio::time::sleep(pause) => Flow::Next,
            _ = dest.woken() => Flow::Next,
        })
    }

    async fn failed(&mut self, err: DeliveryError, took: Duration) -> Result<Flow, StoreError> {
        let (stream, dest) = (self.stream, self.dest);
        let seq = self
            .current
            .as_ref()
            .expect("work in hand")
            .first()
            .meta
            .seq;
        let attempts = self.attempts;
        stream
            .events()
            .attempt_failed(dest.labels(), seq, attempts, &err, took);
        let describe = err.describe();
        dest.tenure()
            .store()
            .set_last_error(stream.name(), &dest.labels().destination, Some(&describe))
            .await?;
        let class = match err.disposition {
            Disposition::DeadLetter(class) => Some(class),
            Disposition::Retry => {
                let now = stream.clock().now();
                if let Some(t) = dest.with_breaker(|b| b.on_failure(now)) {
                    self.breaker_changed(t).await?;
                }
                (attempts >= dest.retry().max_attempts).then_some(ReasonClass::RetriesExhausted)
            }
        };
        if let Some(class) = class {
            let work = self.current.take().expect("work in hand");
            dead_letter(stream, dest, work, class, &describe, attempts).await?;
            return Ok(Flow::Next);
        }
        let pause = err
            .retry_after
            .unwrap_or_else(|| dest.retry().backoff(attempts, &mut self.rng));
        Ok(tokio::select! {
            _ = dest.tenure().cancel().cancelled_owned() => Flow::Stop,
            _ = tokio::time::sleep(pause) => Flow::Next,
            _ = dest.woken() => Flow::Next,
        })
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
    match work {
        Work::Spool(batch) => {
            let seq = batch.meta.seq;
            dest.tenure()
                .store()
                .dead_letter(&dest.labels().destination, &batch, class, error, attempts)
                .await?;
            dest.mark().dead_lettered(seq);
            let events = stream.events();
            events.dead_lettered(dest.labels(), seq, class, error);
            events.marks(dest.labels(), dest.mark().durable(), stream.last_seq());
        }
        Work::Group(_) => unreachable!("a group is never dead-lettered whole"),
        Work::Replay { id, batch } => {
            // It stays one pending dead letter, with the newer reason.
            if finish_replay(stream, dest, id, Err((class, error.to_string()))).await? {
                tracing::error!(stream = %stream.name(), destination = %dest.labels().destination, id, seq = batch.meta.seq, reason_class = %class, "replay failed; dead letter stays pending");
            }
        }
    }
    Ok(())
}

/// Ends a replay. False when an operator discarded the dead letter while
/// its replay ran: the discard stands (and was audited), the loop goes on.
pub(super) async fn finish_replay(
    stream: &StreamShared,
    dest: &DestShared,
    id: i64,
    outcome: Result<(), (ReasonClass, String)>,
) -> Result<bool, StoreError> {
    let delivered = outcome.is_ok();
    match dest.tenure().store().finish_replay(id, outcome).await {
        Ok(()) => Ok(true),
        Err(StoreError::NotPending { state, .. }) => {
            tracing::warn!(stream = %stream.name(), destination = %dest.labels().destination, id, state, delivered, "dead letter was no longer pending when its replay ended");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
