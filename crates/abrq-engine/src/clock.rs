//! The engine's clock: wall time that advances with tokio's clock. In
//! production that is real time; in a test with tokio's time paused it
//! jumps with `tokio::time::advance`, so a breaker's cooldown can be
//! crossed without sleeping.

use chrono::{DateTime, Utc};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall: DateTime<Utc>,
    mono: Instant,
}

impl Clock {
    /// Anchored at the wall time of now.
    pub fn new() -> Clock {
        Clock {
            wall: Utc::now(),
            mono: Instant::now(),
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        let since = Instant::now().saturating_duration_since(self.mono);
        self.wall + chrono::Duration::from_std(since).unwrap_or(chrono::Duration::MAX)
    }

    /// How long until `t` by this clock (zero if it has passed).
    pub fn until(&self, t: DateTime<Utc>) -> std::time::Duration {
        (t - self.now()).to_std().unwrap_or_default()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_tokio_time() {
        let c = Clock::new();
        let t0 = c.now();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(c.now() - t0, chrono::Duration::seconds(3600));
        assert_eq!(
            c.until(t0 + chrono::Duration::seconds(3601)),
            Duration::from_secs(1)
        );
        assert_eq!(c.until(t0), Duration::ZERO);
    }
}
