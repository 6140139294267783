//! The circuit breaker as a pure state machine over wall-clock time, so its
//! state can be persisted and its rules tested without sleeping.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Consecutive failed attempts that open the circuit.
    pub failure_threshold: u32,
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 5,
            cooldown: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum BreakerState {
    Closed {
        failures: u32,
    },
    Open {
        until: DateTime<Utc>,
    },
    /// The cooldown has passed and one trial attempt is allowed through.
    HalfOpen,
}

impl BreakerState {
    /// The gauge value: 0 closed, 1 open, 2 half-open.
    pub fn gauge(&self) -> i64 {
        match self {
            BreakerState::Closed { .. } => 0,
            BreakerState::Open { .. } => 1,
            BreakerState::HalfOpen => 2,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            BreakerState::Closed { .. } => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    pub config: BreakerConfig,
    pub state: BreakerState,
}

/// Whether an attempt may be made now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    Go,
    WaitUntil(DateTime<Utc>),
}

/// A change of the breaker's state, as each method reports it: the caller
/// persists the state and emits the event without comparing before and
/// after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// A failure counted toward the threshold; the circuit stays closed.
    Counted { failures: u32 },
    /// The circuit opened: the threshold was reached, or a trial failed.
    /// Every `Opened` is a trip.
    Opened { until: DateTime<Utc> },
    /// The cooldown passed: one trial attempt may go.
    HalfOpened,
    /// Closed again, or a count of failures cleared, by a success or an
    /// operator's reset.
    Closed,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: BreakerState::Closed { failures: 0 },
        }
    }

    pub fn permit(&mut self, now: DateTime<Utc>) -> (Permit, Option<Transition>) {
        match self.state {
            BreakerState::Closed { .. } | BreakerState::HalfOpen => (Permit::Go, None),
            BreakerState::Open { until } if now >= until => {
                self.state = BreakerState::HalfOpen;
                (Permit::Go, Some(Transition::HalfOpened))
            }
            BreakerState::Open { until } => (Permit::WaitUntil(until), None),
        }
    }

    pub fn on_success(&mut self) -> Option<Transition> {
        self.close()
    }

    /// Records a failed attempt.
    pub fn on_failure(&mut self, now: DateTime<Utc>) -> Option<Transition> {
        let until = now + self.config.cooldown;
        match self.state {
            BreakerState::Closed { failures } => {
                let failures = failures + 1;
                if failures >= self.config.failure_threshold.max(1) {
                    self.state = BreakerState::Open { until };
                    Some(Transition::Opened { until })
                } else {
                    self.state = BreakerState::Closed { failures };
                    Some(Transition::Counted { failures })
                }
            }
            BreakerState::HalfOpen => {
                self.state = BreakerState::Open { until };
                Some(Transition::Opened { until })
            }
            // A failure reported while open cannot come from an attempt we
            // permitted; keep the cooldown as it is.
            BreakerState::Open { .. } => None,
        }
    }

    /// The operator's reset: close at once.
    pub fn reset(&mut self) -> Option<Transition> {
        self.close()
    }

    fn close(&mut self) -> Option<Transition> {
        let was = std::mem::replace(&mut self.state, BreakerState::Closed { failures: 0 });
        (was != self.state).then_some(Transition::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            failure_threshold: 3,
            cooldown: Duration::from_secs(10),
        })
    }

    #[test]
    fn opens_after_threshold_consecutive_failures() {
        let mut b = breaker();
        assert_eq!(
            b.on_failure(t(0)),
            Some(Transition::Counted { failures: 1 })
        );
        assert_eq!(
            b.on_failure(t(0)),
            Some(Transition::Counted { failures: 2 })
        );
        assert_eq!(b.on_success(), Some(Transition::Closed));
        assert_eq!(b.on_success(), None, "already closed with no count");
        b.on_failure(t(0));
        b.on_failure(t(0));
        assert_eq!(
            b.on_failure(t(1)),
            Some(Transition::Opened { until: t(11) })
        );
        assert_eq!(b.on_failure(t(2)), None, "no attempt runs while open");
        assert_eq!(b.permit(t(5)), (Permit::WaitUntil(t(11)), None));
    }

    #[test]
    fn one_trial_after_cooldown_then_close_or_reopen() {
        let mut b = breaker();
        for _ in 0..3 {
            b.on_failure(t(0));
        }
        assert_eq!(b.permit(t(10)), (Permit::Go, Some(Transition::HalfOpened)));
        assert_eq!(b.state, BreakerState::HalfOpen);
        assert_eq!(b.permit(t(10)), (Permit::Go, None));
        assert_eq!(
            b.on_failure(t(10)),
            Some(Transition::Opened { until: t(20) })
        );
        assert_eq!(b.permit(t(15)), (Permit::WaitUntil(t(20)), None));
        assert_eq!(b.permit(t(20)).0, Permit::Go);
        assert_eq!(b.on_success(), Some(Transition::Closed));
        assert_eq!(b.state, BreakerState::Closed { failures: 0 });
    }

    #[test]
    fn reset_closes_at_once() {
        let mut b = breaker();
        for _ in 0..3 {
            b.on_failure(t(0));
        }
        assert_eq!(b.reset(), Some(Transition::Closed));
        assert_eq!(b.permit(t(1)), (Permit::Go, None));
        assert_eq!(b.state.gauge(), 0);
        assert_eq!(b.reset(), None);
    }
}
