//! What a drain loop shares with operator actions and status: the breaker,
//! the pause/enable switches and a wake-up signal.

use std::sync::{Arc, Mutex};

use abrq_core::{Breaker, Destination, RetryPolicy};
use tokio::sync::{watch, Notify};

use crate::events::DestLabels;
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

pub struct DestShared {
    pub labels: DestLabels,
    pub destination: Arc<dyn Destination>,
    pub retry: RetryPolicy,
    pub breaker: Mutex<Breaker>,
    pub switches: watch::Sender<Switches>,
    /// Operator actions (reset, replay) poke this to end a wait early.
    pub wake: Notify,
    pub mark: Mark,
    pub drain_health: LoopHealth,
    pub marks_health: LoopHealth,
    /// The drain loop's and mark writer's store handle and token.
    pub tenure: TenureSlot,
}

impl DestShared {
    /// The failure of this destination's drain loop or mark writer, if any.
    pub fn task_failure(&self) -> Option<(LoopKind, Failure)> {
        [&self.drain_health, &self.marks_health]
            .into_iter()
            .find_map(|h| h.failure().map(|f| (h.kind, f)))
    }

    pub fn switches(&self) -> Switches {
        *self.switches.borrow()
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
