//! How long a change source waits on its server before it calls the
//! server gone (a transient `Timeout`: the source restarts from its
//! cursor). Without them a half-open connection would hang a source
//! forever while status says `running`.

use std::future::Future;
use std::time::Duration;

use crate::error::{Failure, SourceError};

/// A connection, with its TLS and authentication.
pub const CONNECT: Duration = Duration::from_secs(30);
/// Opening the source: prerequisites, publication, slot, snapshot. A slot
/// is made only once the transactions running then have ended, so this
/// is generous.
pub const OPEN: Duration = Duration::from_secs(600);
/// One page of a copy or a backfill.
pub const PAGE: Duration = Duration::from_secs(600);
/// A MySQL replica asks for a heartbeat this often when the binlog is
/// quiet.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Silence after which a session whose server sends no heartbeat is
/// probed another way (PostgreSQL: is the slot still streamed?).
pub const PROBE: Duration = Duration::from_secs(15);
/// How often a streaming session asks whether what it captures changed.
pub const AUDIT: Duration = Duration::from_secs(10);
/// Silence on a session whose server promised heartbeats, in heartbeats.
pub const MISSED_HEARTBEATS: u32 = 6;

/// `fut`, or a `Timeout` that says what did not answer within `limit`.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, SourceError>>,
) -> Result<T, SourceError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(SourceError::new(
            Failure::Timeout,
            format!("{what}: no answer within {}s", limit.as_secs()),
        )),
    }
}
