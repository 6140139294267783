//! Full-jitter exponential backoff: the sleep is drawn uniformly between
//! zero and the exponential ceiling, so a fleet of retrying workers spreads
//! out instead of retrying in one synchronised surge.

use std::time::Duration;

use rand::Rng;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The sleep after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        full_jitter(
            backoff_ceiling(attempt, self.initial_backoff, self.max_backoff),
            rng,
        )
    }
}

/// min(max, initial * 2^(attempt-1)), saturating instead of overflowing.
pub fn backoff_ceiling(attempt: u32, initial: Duration, max: Duration) -> Duration {
    let exp = attempt.saturating_sub(1).min(63);
    let factor = 1u128 << exp;
    let nanos = initial.as_nanos().saturating_mul(factor);
    let capped = nanos.min(max.as_nanos());
    Duration::from_nanos(capped.min(u64::MAX as u128) as u64)
}

/// A draw uniform on [0, ceiling].
pub fn full_jitter(ceiling: Duration, rng: &mut impl Rng) -> Duration {
    let n = ceiling.as_nanos() as u64;
    if n == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.random_range(0..=n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn ceiling_doubles_then_caps() {
        let i = Duration::from_millis(500);
        let m = Duration::from_secs(60);
        assert_eq!(backoff_ceiling(1, i, m), Duration::from_millis(500));
        assert_eq!(backoff_ceiling(2, i, m), Duration::from_secs(1));
        assert_eq!(backoff_ceiling(4, i, m), Duration::from_secs(4));
        assert_eq!(backoff_ceiling(8, i, m), Duration::from_secs(60));
        assert_eq!(backoff_ceiling(10_000, i, m), Duration::from_secs(60));
    }

    /// Kolmogorov-Smirnov test of the draws against uniform [0, ceiling]:
    /// with 20,000 draws the 0.001 critical value is 1.95/sqrt(n) ~ 0.0138.
    /// Also checks that the draws use the whole range (min near 0, max near
    /// the ceiling), which a "half jitter" or a fixed delay would fail.
    #[test]
    fn full_jitter_is_uniform_on_zero_to_ceiling() {
        let mut rng = StdRng::seed_from_u64(7);
        let ceiling = Duration::from_secs(8);
        let n = 20_000;
        let mut xs: Vec<f64> = (0..n)
            .map(|_| full_jitter(ceiling, &mut rng).as_secs_f64() / 8.0)
            .collect();
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        assert!(xs.iter().all(|x| (0.0..=1.0).contains(x)));
        let d = xs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let lo = (x - i as f64 / n as f64).abs();
                let hi = ((i + 1) as f64 / n as f64 - x).abs();
                lo.max(hi)
            })
            .fold(0.0f64, f64::max);
        assert!(d < 1.95 / (n as f64).sqrt(), "ks statistic {d}");
        assert!(xs[0] < 0.001 && xs[n - 1] > 0.999);
        let mean = xs.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn zero_ceiling_gives_zero() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(full_jitter(Duration::ZERO, &mut rng), Duration::ZERO);
    }
}
