//! Several processes sharing one PostgreSQL state. Each source and each
//! (stream, destination) drain is a resource held through a lease
//! (`abrq_state::lease`); this module decides what this process holds.
//!
//! - [`coordinator`]: on every heartbeat, renews the leases held, stops
//!   the work of a lease lost, hands leases back above a fair share and
//!   claims free ones below it.
//! - [`tenures`]: starting the work of a lease claimed (from the store's
//!   marks and cursor) and stopping it (graceful: last mark committed, then
//!   the lease handed back).
//! - [`follow`]: what other processes change in the store (staged batches,
//!   marks, operator switches, breaker resets) reaches this process's view
//!   and its drain loops.

mod coordinator;
mod follow;
mod tenures;

pub(crate) use coordinator::run as run_coordinator;
pub(crate) use follow::run as run_follower;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use abrq_state::{LeaseRow, LeaseStore, NodeIdentity, NodeRow};
use serde::Serialize;

use crate::supervise::{LoopHealth, LoopKind};

/// How this process takes part.
pub struct Membership {
    pub leases: Arc<dyn LeaseStore>,
    pub node: NodeIdentity,
    pub host: String,
    pub pid: u32,
    pub lease_timeout: Duration,
    pub heartbeat: Duration,
}

/// What status shows of the shared state, as of the last heartbeat.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterView {
    pub node_id: String,
    pub instance: String,
    pub lease_timeout_ms: u64,
    pub heartbeat_ms: u64,
    pub nodes: Vec<NodeRow>,
    pub leases: Vec<LeaseRow>,
}

pub struct Cluster {
    pub membership: Membership,
    pub health: LoopHealth,
    view: Mutex<ClusterView>,
}

impl Cluster {
    pub fn new(membership: Membership) -> Cluster {
        let view = ClusterView {
            node_id: membership.node.node_id.clone(),
            instance: membership.node.instance.to_string(),
            lease_timeout_ms: membership.lease_timeout.as_millis() as u64,
            heartbeat_ms: membership.heartbeat.as_millis() as u64,
            ..ClusterView::default()
        };
        Cluster {
            membership,
            health: LoopHealth::new("", "", LoopKind::Leases),
            view: Mutex::new(view),
        }
    }

    pub fn view(&self) -> ClusterView {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_view(&self, nodes: Vec<NodeRow>, leases: Vec<LeaseRow>) {
        let mut v = self.view.lock().unwrap_or_else(|p| p.into_inner());
        v.nodes = nodes;
        v.leases = leases;
    }
}
