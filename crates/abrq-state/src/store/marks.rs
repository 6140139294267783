//! Destinations: high-water marks, the operator's switches, skipped
//! ranges and breakers.

use abrq_core::BreakerState;
use async_trait::async_trait;

use super::StoreResult;
use crate::types::*;

/// The destinations as the store holds them.
#[async_trait]
pub trait MarksRead: Send + Sync + 'static {
    async fn destination(&self, stream: &str, destination: &str) -> StoreResult<DestinationRow>;

    async fn destinations(&self, stream: &str) -> StoreResult<Vec<DestinationRow>>;

    async fn skipped_ranges(
        &self,
        stream: &str,
        destination: &str,
    ) -> StoreResult<Vec<SkippedRange>>;
}

/// A drain's marks, error and breaker; an operator's switches.
#[async_trait]
pub trait MarksWrite: Send + Sync + 'static {
    /// Registers a destination on first sight with `enabled` as its initial
    /// state; afterwards the stored operator state wins. Updates the kind.
    /// A new destination's mark starts just before the oldest spooled batch
    /// (`last_seq` when the spool is empty), so it receives everything still
    /// spooled and its backlog is right from the start.
    async fn register_destination(
        &self,
        stream: &str,
        destination: &str,
        kind: &str,
        enabled: bool,
    ) -> StoreResult<DestinationRow>;

    /// Moves the high-water mark to `seq` (never backwards) and clears the
    /// last error. A `seq` past the stream's last staged seq is an error
    /// (it would silently skip batches staged later).
    async fn advance(&self, stream: &str, destination: &str, seq: u64) -> StoreResult<()>;

    async fn set_last_error(
        &self,
        stream: &str,
        destination: &str,
        error: Option<&str>,
    ) -> StoreResult<()>;

    async fn set_paused(&self, stream: &str, destination: &str, paused: bool) -> StoreResult<()>;

    /// Enables or disables. Enabling a destination whose mark is behind the
    /// oldest spooled batch records the skipped range and moves its mark to
    /// just before the oldest spooled batch, in the same transaction.
    async fn set_enabled(
        &self,
        stream: &str,
        destination: &str,
        enabled: bool,
    ) -> StoreResult<Option<SkippedRange>>;

    async fn save_breaker(
        &self,
        stream: &str,
        destination: &str,
        state: &BreakerState,
    ) -> StoreResult<()>;
}
