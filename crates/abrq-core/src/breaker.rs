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

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: BreakerState::Closed { failures: 0 },
        }
    }

    pub fn permit(&mut self, now: DateTime<Utc>) -> Permit {
        match self.state {
            BreakerState::Closed { .. } | BreakerState::HalfOpen => Permit::Go,
            BreakerState::Open { until } if now >= until => {
                self.state = BreakerState::HalfOpen;
                Permit::Go
            }
            BreakerState::Open { until } => Permit::WaitUntil(until),
        }
    }

    pub fn on_success(&mut self) {
        self.state = BreakerState::Closed { failures: 0 };
    }

    /// Records a failed attempt; returns true when this failure trips the
    /// circuit open (a failed trial re-opens it, which is a trip too).
    pub fn on_failure(&mut self, now: DateTime<Utc>) -> bool {
        let open = BreakerState::Open {
            until: now + self.config.cooldown,
        };
        match self.state {
            BreakerState::Closed { failures } => {
                let failures = failures + 1;
                if failures >= self.config.failure_threshold.max(1) {
                    self.state = open;
                    true
                } else {
                    self.state = BreakerState::Closed { failures };
                    false
                }
            }
            BreakerState::HalfOpen => {
                self.state = open;
                true
            }
            // A failure reported while open cannot come from an attempt we
            // permitted; keep the cooldown as it is.
            BreakerState::Open { .. } => false,
        }
    }

    /// The operator's reset: close at once.
    pub fn reset(&mut self) {
        self.state = BreakerState::Closed { failures: 0 };
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
        assert!(!b.on_failure(t(0)));
        assert!(!b.on_failure(t(0)));
        b.on_success();
        assert!(!b.on_failure(t(0)));
        assert!(!b.on_failure(t(0)));
        assert!(b.on_failure(t(1)));
        assert_eq!(b.permit(t(5)), Permit::WaitUntil(t(11)));
    }

    #[test]
    fn one_trial_after_cooldown_then_close_or_reopen() {
        let mut b = breaker();
        for _ in 0..3 {
            b.on_failure(t(0));
        }
        assert_eq!(b.permit(t(10)), Permit::Go);
        assert_eq!(b.state, BreakerState::HalfOpen);
        assert!(b.on_failure(t(10)));
        assert_eq!(b.permit(t(15)), Permit::WaitUntil(t(20)));
        assert_eq!(b.permit(t(20)), Permit::Go);
        b.on_success();
        assert_eq!(b.state, BreakerState::Closed { failures: 0 });
    }

    #[test]
    fn reset_closes_at_once() {
        let mut b = breaker();
        for _ in 0..3 {
            b.on_failure(t(0));
        }
        b.reset();
        assert_eq!(b.permit(t(1)), Permit::Go);
        assert_eq!(b.state.gauge(), 0);
    }
}
