//! Leases with fencing, for several processes sharing one state database.
//!
//! Each source and each (stream, destination) drain is a *resource* held by
//! one process at a time through a lease row: a holder, an expiry and an
//! epoch. A claim of a free or expired lease raises the epoch; the holder
//! renews the expiry on a heartbeat. Every write a holder makes goes through
//! a store handle fenced with its epoch ([`LeaseStore::fenced`]): the write
//! first locks the lease row and is refused ([`StoreError::Fenced`]) unless
//! the row still names the same holder and epoch, in the same transaction.
//! A takeover has to update that row, so it waits for a holder's write in
//! flight and every later write of the former holder is refused.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::store::{StateWrite, StoreResult};

/// The resource name of a stream's source.
pub fn source_resource(stream: &str) -> String {
    format!("source/{stream}")
}

/// The resource name of a destination's drain.
pub fn drain_resource(stream: &str, destination: &str) -> String {
    format!("drain/{stream}/{destination}")
}

/// One running process: a label (`node_id`, not unique) and an instance
/// made at start (unique).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub node_id: String,
    pub instance: Uuid,
}

/// A held lease: the proof a holder's writes carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    pub resource: String,
    pub instance: Uuid,
    pub epoch: i64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LeaseRow {
    pub resource: String,
    /// The holder's `node_id`; None when the lease was handed back.
    pub node_id: Option<String>,
    pub instance: Option<Uuid>,
    pub epoch: i64,
    pub acquired_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Held and not expired, by the database's clock.
    pub live: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeRow {
    pub node_id: String,
    pub instance: Uuid,
    pub host: String,
    pub pid: u32,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Heartbeat within the lease timeout, by the database's clock.
    pub live: bool,
}

#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Announces (or renews) this process: live until `ttl` from now.
    async fn heartbeat(
        &self,
        node: &NodeIdentity,
        host: &str,
        pid: u32,
        ttl: Duration,
    ) -> StoreResult<()>;

    /// Renews the leases still held with these fences and returns them;
    /// a fence missing from the answer was taken over.
    async fn renew(&self, held: &[Fence], ttl: Duration) -> StoreResult<Vec<Fence>>;

    /// Takes `resource` when nobody holds it or its holder's lease
    /// expired, with the next epoch. None when another process holds it.
    async fn claim(
        &self,
        resource: &str,
        node: &NodeIdentity,
        ttl: Duration,
    ) -> StoreResult<Option<Fence>>;

    /// Hands a lease back at once (graceful stop): another process may
    /// claim it without waiting for the expiry.
    async fn release(&self, fence: &Fence) -> StoreResult<()>;

    /// Forgets this process (graceful exit).
    async fn leave(&self, node: &NodeIdentity) -> StoreResult<()>;

    async fn leases(&self) -> StoreResult<Vec<LeaseRow>>;

    /// Every process that announced itself, live or not (a dead one stays
    /// listed until its row is an hour stale).
    async fn nodes(&self) -> StoreResult<Vec<NodeRow>>;

    /// A handle on the same state whose every write is refused unless
    /// `fence` still holds its lease. It only writes: a holder reads
    /// through a plain handle, as reads need no lease.
    fn fenced(&self, fence: Fence) -> Arc<dyn StateWrite>;
}
