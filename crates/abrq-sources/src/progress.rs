//! What a database source reports about where it reads, for status and
//! metrics: its position (engine-specific) and how far behind the
//! database it is.

use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// Shown in status as the source's `position`.
    pub position: Value,
    /// Commit time of the last change read vs now; 0 when nothing waits.
    pub lag_seconds: Option<f64>,
    /// WAL the server keeps for the source (a replication slot).
    pub lag_bytes: Option<i64>,
}
