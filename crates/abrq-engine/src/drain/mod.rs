//! One drain loop per (stream, destination). The high-water mark moves only
//! after the destination durably accepted a batch (or it was dead-lettered);
//! a batch is never skipped (head-of-line), transient failures back off with
//! full jitter, the breaker stops attempts while open, and a permanent
//! failure dead-letters at once.
//!
//! The loop is a sequence of steps, each with one job: wait while switched
//! off, load the next work ([`work`]), wait for the breaker's permit, make
//! one attempt, settle its outcome ([`settle`]). The mark is committed by
//! its own task ([`marks`]).

mod marks;
mod settle;
mod work;

pub use marks::{flush_mark, run_marks};

use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::{DeliveryError, DeliveryReport, Permit};
use abrq_state::StoreError;
use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::watch;

use crate::destination::{DestShared, Switches};
use crate::stream::StreamShared;
use crate::supervise::{supervise, Fault};
use work::Work;

/// The drain loop of one destination, under its supervisor.
pub async fn run(stream: Arc<StreamShared>, dest: Arc<DestShared>) {
    supervise(
        dest.drain_health(),
        stream.events(),
        &dest.tenure().cancel(),
        || async {
            Drainer::new(&stream, &dest)
                .run()
                .await
                .map_err(|e| Fault::transient(&e))
        },
    )
    .await
}

/// What a step leaves the loop to do.
enum Flow {
    Next,
    Stop,
}

#[derive(Debug, thiserror::Error)]
#[error("attempt timed out after {0:?}")]
struct AttemptTimeout(Duration);

struct Drainer<'a> {
    stream: &'a StreamShared,
    dest: &'a DestShared,
    staged: watch::Receiver<u64>,
    switches: watch::Receiver<Switches>,
    rng: StdRng,
    /// The batch in hand, kept across failed attempts.
    current: Option<Work>,
    /// Attempts at `current`.
    attempts: u32,
    /// After a grouped attempt failed, batches up to this seq go one at a
    /// time, so only a batch at fault is dead-lettered.
    singles_until: u64,
    /// (seq, attempts): a failed grouped attempt counts as an attempt of
    /// its first batch, so the batch's retry budget and attempt numbers
    /// go on from it.
    carried: Option<(u64, u32)>,
    /// The spooled work after `current`, read while it was attempted.
    prefetched: Option<Work>,
}

impl<'a> Drainer<'a> {
    fn new(stream: &'a StreamShared, dest: &'a DestShared) -> Drainer<'a> {
        Drainer {
            stream,
            dest,
            staged: stream.subscribe_staged(),
            switches: dest.subscribe_switches(),
            rng: StdRng::from_os_rng(),
            current: None,
            attempts: 0,
            singles_until: 0,
            carried: None,
            prefetched: None,
        }
    }

    async fn run(mut self) -> Result<(), StoreError> {
        while let Flow::Next = self.step().await? {}
        Ok(())
    }

    async fn step(&mut self) -> Result<Flow, StoreError> {
        if self.dest.tenure().cancel().is_cancelled() {
            return Ok(Flow::Stop);
        }
        if !self.dest.switches().draining() {
            return Ok(self.wait_switched_on().await);
        }
        if self.current.is_none() {
            let group = self.group_size();
            let prefetched = self.prefetched.take();
            self.current = work::next(self.stream, self.dest, group, prefetched).await?;
            self.attempts = self.carried_attempts();
            self.dest.drain_health().progressed();
            if self.current.is_none() {
                return Ok(self.wait_for_work().await);
            }
        }
        if let Some(until) = self.await_permit().await? {
            return Ok(self.wait_for_breaker(until).await);
        }
        if !self.dest.switches().draining() {
            // Paused or disabled while the batch was being read: an operator
            // who saw the pause acknowledged must not see one more delivery.
            return Ok(Flow::Next);
        }
        // the next spooled work is read and decoded meanwhile
        let after = match self.current.as_ref() {
            Some(w @ (Work::Spool(_) | Work::Group(_))) => w.batches().last().map(|b| b.meta.seq),
            _ => None,
        };
        let (stream, dest, group) = (self.stream, self.dest, self.group_size());
        let next = async move {
            match after {
                Some(after) => work::prefetch(stream, dest, after, group).await,
                None => None,
            }
        };
        let ((result, took), next) = tokio::join!(self.attempt(), next);
        if result.is_ok() {
            self.prefetched = next;
        }
        self.settle(result, took).await
    }

    /// Attempts already spent on the work just loaded: those of a failed
    /// grouped attempt it began, else none.
    fn carried_attempts(&mut self) -> u32 {
        let Some((seq, n)) = self.carried else {
            return 0;
        };
        match self.current.as_ref() {
            Some(w @ (Work::Spool(_) | Work::Group(_))) if w.first().meta.seq == seq => {
                self.carried = None;
                n
            }
            _ => {
                if self.dest.mark().accepted() >= seq {
                    self.carried = None;
                }
                0
            }
        }
    }

    /// Batches the next attempt may carry.
    fn group_size(&self) -> usize {
        match self.dest.mark().accepted() < self.singles_until {
            true => 1,
            false => self.dest.destination().group_limit(),
        }
    }

    /// Paused or disabled: the batch in hand is dropped (it is read again
    /// later) until a switch changes.
    async fn wait_switched_on(&mut self) -> Flow {
        self.current = None;
        self.prefetched = None;
        self.attempts = 0;
        tokio::select! {
            _ = self.dest.tenure().cancel().cancelled_owned() => Flow::Stop,
            _ = self.switches.changed() => Flow::Next,
        }
    }

    /// Nothing to deliver: wait for a stage, a switch or an operator.
    async fn wait_for_work(&mut self) -> Flow {
        self.staged.borrow_and_update();
        if self.stream.last_seq() > self.dest.mark().accepted() {
            return Flow::Next; // staged between the read and the subscribe
        }
        tokio::select! {
            _ = self.dest.tenure().cancel().cancelled_owned() => Flow::Stop,
            _ = self.staged.changed() => Flow::Next,
            _ = self.switches.changed() => Flow::Next,
            _ = self.dest.woken() => Flow::Next,
        }
    }

    /// The breaker's permit: None to go, or the time it opens again.
    async fn await_permit(&mut self) -> Result<Option<DateTime<Utc>>, StoreError> {
        let now = self.stream.clock().now();
        let (permit, change) = self.dest.with_breaker(|b| b.permit(now));
        if let Some(t) = change {
            self.breaker_changed(t).await?;
        }
        Ok(match permit {
            Permit::Go => None,
            Permit::WaitUntil(until) => Some(until),
        })
    }

    /// Open circuit: no attempt and no retry budget spent until the
    /// cooldown ends, an operator resets it, or a switch changes.
    async fn wait_for_breaker(&mut self, until: DateTime<Utc>) -> Flow {
        let wait = self.stream.clock().until(until);
        tokio::select! {
            _ = self.dest.tenure().cancel().cancelled_owned() => Flow::Stop,
            _ = tokio::time::sleep(wait) => Flow::Next,
            _ = self.dest.woken() => Flow::Next,
            _ = self.switches.changed() => Flow::Next,
        }
    }

    /// One delivery attempt of the batch in hand, bounded by the attempt
    /// timeout.
    /// One report per batch of the work.
    async fn attempt(&mut self) -> (Result<Vec<DeliveryReport>, DeliveryError>, Duration) {
        let work = self.current.as_ref().expect("work was loaded");
        self.attempts += 1;
        let timeout = self.dest.retry().attempt_timeout;
        let started = Instant::now();
        let destination = &self.dest.destination();
        let delivery = async {
            match work {
                Work::Group(batches) => destination.deliver_group(batches).await,
                _ => destination.deliver(work.first()).await.map(|r| vec![r]),
            }
        };
        let result = tokio::time::timeout(timeout, delivery)
            .await
            .unwrap_or_else(|_| Err(DeliveryError::transient(AttemptTimeout(timeout))));
        (result, started.elapsed())
    }

    /// Persists a breaker change and reports it.
    async fn breaker_changed(&self, t: abrq_core::Transition) -> Result<(), StoreError> {
        let (stream, dest) = (self.stream, self.dest);
        let state = dest.breaker_state();
        match t {
            abrq_core::Transition::Opened { until } => {
                stream.events().circuit_opened(dest.labels(), Some(until))
            }
            abrq_core::Transition::Closed => stream
                .events()
                .circuit_closed(dest.labels(), "successful attempt"),
            abrq_core::Transition::Counted { .. } | abrq_core::Transition::HalfOpened => {}
        }
        stream.events().breaker_changed(dest.labels(), &state);
        dest.tenure()
            .store()
            .save_breaker(stream.name(), &dest.labels().destination, &state)
            .await
    }
}
