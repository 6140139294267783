//! The one failure table of every destination engine. Each engine's
//! `errors.rs` reduces its client's errors to a [`Failure`] in one
//! exhaustive match; [`Failure::disposition`] alone decides what the drain
//! loop does with it, so no two engines can disagree about, say, a missing
//! bucket and a missing table.
//!
//! The rule: only what is wrong with the batch itself is dead-lettered.
//! Everything about reaching the destination or how it is set up is
//! retried: a dead letter would move on and fail every later batch the
//! same way, while retrying the same batch lets the breaker open until an
//! operator fixes the destination.

use std::error::Error as StdError;
use std::time::Duration;

use abrq_core::{DeliveryError, Disposition, ReasonClass};

/// A server's hint longer than this is taken as this: a wrong clock or a
/// typo must not park a destination for a day.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(15 * 60);

/// Why an attempt failed, by what the drain loop must do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    // The way to the destination, for now.
    /// Refused, reset, unreachable, DNS, TLS handshake, or the connection
    /// lost mid-request.
    Network,
    /// No answer in time.
    Timeout,
    /// The destination asked to slow down (429, SlowDown, a quota), maybe
    /// saying for how long.
    Throttled { retry_after: Option<Duration> },
    /// Reached but not serving now: a 5xx, shutting down, read-only, too
    /// many connections, a leader election; maybe saying for how long.
    Unavailable { retry_after: Option<Duration> },
    /// Another writer got there first: a deadlock, a serialization failure,
    /// a lock wait, a concurrent DDL.
    Conflict,
    /// An answer that could not be read, or a session out of step.
    Protocol,

    // The destination's setup or state, which an operator fixes.
    /// Missing, wrong or expired credentials, or no permission.
    Unauthorized,
    /// The bucket, container, directory, table or topic is not there.
    Missing,
    /// The destination's storage is full or failing: a disk, a quota, a
    /// read-only filesystem, server resources.
    Storage,
    /// Something in the destination's config or setup that no batch can
    /// work around: an endpoint, a CA file, an unsupported mode.
    Misconfigured,

    // The batch itself: no retry can help.
    /// Larger than the destination takes (the object, a row, a message).
    TooLarge { record: Option<usize> },
    /// Data the destination can never accept as it is: a constraint, a
    /// value out of range, a name it cannot take, an invalid record.
    Rejected { record: Option<usize> },
    /// The schema drift policy blocks the batch.
    Drift { record: Option<usize> },
    /// The batch cannot be encoded for the destination.
    Encoding { record: Option<usize> },

    /// Nothing names the cause (a client error of a kind not listed).
    Unknown,
}

impl Failure {
    /// The one decision.
    pub fn disposition(self) -> Disposition {
        match self {
            Failure::Network
            | Failure::Timeout
            | Failure::Throttled { .. }
            | Failure::Unavailable { .. }
            | Failure::Conflict
            | Failure::Protocol => Disposition::Retry,
            Failure::Unauthorized
            | Failure::Missing
            | Failure::Storage
            | Failure::Misconfigured => Disposition::Retry,
            Failure::TooLarge { .. } | Failure::Rejected { .. } => {
                Disposition::DeadLetter(ReasonClass::Rejected)
            }
            Failure::Drift { .. } => Disposition::DeadLetter(ReasonClass::SchemaDrift),
            Failure::Encoding { .. } => Disposition::DeadLetter(ReasonClass::Encoding),
            // The retry budget bounds it; a dead letter for what may be a
            // hiccup would need a replay.
            Failure::Unknown => Disposition::Retry,
        }
    }

    /// The server's own hint, capped at [`MAX_RETRY_AFTER`].
    pub fn retry_after(self) -> Option<Duration> {
        match self {
            Failure::Throttled { retry_after } | Failure::Unavailable { retry_after } => {
                retry_after.map(|d| d.min(MAX_RETRY_AFTER))
            }
            Failure::Network
            | Failure::Timeout
            | Failure::Conflict
            | Failure::Protocol
            | Failure::Unauthorized
            | Failure::Missing
            | Failure::Storage
            | Failure::Misconfigured
            | Failure::TooLarge { .. }
            | Failure::Rejected { .. }
            | Failure::Drift { .. }
            | Failure::Encoding { .. }
            | Failure::Unknown => None,
        }
    }

    /// The batch item to blame, when one is.
    pub fn record(self) -> Option<usize> {
        match self {
            Failure::TooLarge { record }
            | Failure::Rejected { record }
            | Failure::Drift { record }
            | Failure::Encoding { record } => record,
            Failure::Network
            | Failure::Timeout
            | Failure::Throttled { .. }
            | Failure::Unavailable { .. }
            | Failure::Conflict
            | Failure::Protocol
            | Failure::Unauthorized
            | Failure::Missing
            | Failure::Storage
            | Failure::Misconfigured
            | Failure::Unknown => None,
        }
    }

    /// The failure as the drain loop takes it, keeping `source` as the
    /// cause chain.
    pub fn error(self, source: impl Into<Box<dyn StdError + Send + Sync>>) -> DeliveryError {
        let mut e = DeliveryError::new(self.disposition(), source);
        if let Some(after) = self.retry_after() {
            e = e.with_retry_after(after);
        }
        if let Some(i) = self.record() {
            e = e.at_record(i);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_batch_itself_is_dead_lettered() {
        let rejected = Disposition::DeadLetter(ReasonClass::Rejected);
        for (f, want) in [
            (Failure::TooLarge { record: None }, rejected),
            (Failure::Rejected { record: Some(3) }, rejected),
            (
                Failure::Drift { record: None },
                Disposition::DeadLetter(ReasonClass::SchemaDrift),
            ),
            (
                Failure::Encoding { record: None },
                Disposition::DeadLetter(ReasonClass::Encoding),
            ),
        ] {
            assert_eq!(f.disposition(), want, "{f:?}");
        }
        for f in [
            Failure::Network,
            Failure::Timeout,
            Failure::Throttled { retry_after: None },
            Failure::Unavailable { retry_after: None },
            Failure::Conflict,
            Failure::Protocol,
            Failure::Unauthorized,
            Failure::Missing,
            Failure::Storage,
            Failure::Misconfigured,
            Failure::Unknown,
        ] {
            assert_eq!(f.disposition(), Disposition::Retry, "{f:?}");
        }
    }

    #[test]
    fn the_error_carries_the_hint_capped_and_the_record() {
        let e = Failure::Throttled {
            retry_after: Some(Duration::from_secs(86_400)),
        }
        .error("slow down");
        assert_eq!(e.retry_after, Some(MAX_RETRY_AFTER));
        assert!(e.is_transient());
        let e = Failure::Rejected { record: Some(7) }.error("bad row");
        assert_eq!(e.record_index, Some(7));
        assert_eq!(e.describe(), "record 7: bad row");
        assert_eq!(Failure::Network.error("x").retry_after, None);
    }
}
