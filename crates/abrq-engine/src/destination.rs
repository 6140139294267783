//! What a drain loop shares with operator actions and status: the breaker,
//! the pause/enable switches and a wake-up signal.

use std::sync::{Arc, Mutex};

use abrq_core::config::DestinationConfig;
use abrq_core::{Breaker, Destination, RetryPolicy};
use abrq_state::DestinationRow;
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};

use crate::events::{DestLabels, Events};
use crate::mark::Mark;
use crate::supervise::{Failure, LoopHealth, LoopKind};
use crate::tenure::TenureSlot;

/// The operator's switches, mirrored from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    pub enabled: bool,
    pub paused: bool,
}

impl Switches {
    pub fn draining(&self) -> bool {
        self.enabled && !self.paused
    }
}

impl From<&DestinationRow> for Switches {
    fn from(row: &DestinationRow) -> Switches {
        Switches {
            enabled: row.enabled,
            paused: row.paused,
        }
    }
}

pub struct DestShared {
    labels: DestLabels,
    destination: Arc<dyn Destination>,
    retry: RetryPolicy,
    breaker: Mutex<Breaker>,
    switches: watch::Sender<Switches>,
    /// Operator actions (reset, replay) poke this to end a wait early.
    wake: Notify,
    mark: Mark,
    drain_health: LoopHealth,
    marks_health: LoopHealth,
    /// The drain loop's and mark writer's write handle and token.
    tenure: TenureSlot,
}

impl DestShared {
    /// The destination as the store registered it (`row`).
    pub(crate) fn new(
        labels: DestLabels,
        destination: Arc<dyn Destination>,
        dc: &DestinationConfig,
        row: &DestinationRow,
        tenure: TenureSlot,
        events: &Events,
    ) -> DestShared {
        let (stream, name) = (labels.stream.as_str(), labels.destination.as_str());
        let drain_health = LoopHealth::new(stream, name, LoopKind::Drain);
        let marks_health = LoopHealth::new(stream, name, LoopKind::Marks);
        events.register_task(&drain_health);
        events.register_task(&marks_health);
        DestShared {
            destination,
            retry: dc.retry.into(),
            breaker: Mutex::new(Breaker {
                config: dc.breaker.into(),
                state: row.breaker,
            }),
            switches: watch::Sender::new(Switches::from(row)),
            wake: Notify::new(),
            mark: Mark::new(row.high_water_mark),
            drain_health,
            marks_health,
            tenure,
            labels,
        }
    }

    pub fn labels(&self) -> &DestLabels {
        &self.labels
    }

    /// What delivers to the destination.
    pub fn destination(&self) -> &Arc<dyn Destination> {
        &self.destination
    }

    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    pub fn mark(&self) -> &Mark {
        &self.mark
    }

    pub fn tenure(&self) -> &TenureSlot {
        &self.tenure
    }

    pub fn drain_health(&self) -> &LoopHealth {
        &self.drain_health
    }

    pub fn marks_health(&self) -> &LoopHealth {
        &self.marks_health
    }

    /// The failure of this destination's drain loop or mark writer, if any.
    pub fn task_failure(&self) -> Option<(LoopKind, Failure)> {
        [&self.drain_health, &self.marks_health]
            .into_iter()
            .find_map(|h| h.failure().map(|f| (h.kind, f)))
    }

    pub fn switches(&self) -> Switches {
        *self.switches.borrow()
    }

    /// Changes of the switches, for the drain loop.
    pub(crate) fn subscribe_switches(&self) -> watch::Receiver<Switches> {
        self.switches.subscribe()
    }

    /// Sets the switches as stored; the drain loop looks again.
    pub(crate) fn set_switches(&self, switches: Switches) {
        self.switches.send_replace(switches);
    }

    /// The switches as another process stored them: the drain loop looks
    /// again only when they changed.
    pub(crate) fn observe_switches(&self, switches: Switches) {
        self.switches.send_if_modified(|v| {
            let changed = *v != switches;
            *v = switches;
            changed
        });
    }

    /// Ends the drain loop's wait early (an operator acted).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves when [`DestShared::wake`] is called.
    pub(crate) fn woken(&self) -> Notified<'_> {
        self.wake.notified()
    }

    pub fn breaker_state(&self) -> abrq_core::BreakerState {
        self.breaker
            .lock()
            .map(|b| b.state)
            .unwrap_or_else(|p| p.into_inner().state)
    }

    /// Runs `f` on the breaker; a poisoned lock still holds valid state.
    pub fn with_breaker<T>(&self, f: impl FnOnce(&mut Breaker) -> T) -> T {
        let mut guard = self.breaker.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}
