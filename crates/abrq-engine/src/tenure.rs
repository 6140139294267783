//! A tenure: the time one process runs a source or a drain. It carries the
//! only write handle the task has (fenced with the lease's epoch when
//! processes share the state) and the token that ends the task (a child of
//! the stream's, so shutdown ends every tenure). A task reads through the
//! stream's read half (`StreamShared::store`): reads need no lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use abrq_state::{Fence, LeaseStore, StateWrite};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub struct Tenure {
    pub store: Arc<dyn StateWrite>,
    pub cancel: CancellationToken,
}

/// Where the tenures of one engine's tasks start.
pub(crate) enum Tenures {
    /// A state of its own: every task runs from the start and writes
    /// through the plain store.
    Own(Arc<dyn StateWrite>),
    /// A shared state: a task runs only in a tenure of its lease, started
    /// by `cluster::tenures`. Until then the slot's handle is fenced with
    /// epoch 0, which no lease ever has, so a write through it is refused.
    Shared {
        leases: Arc<dyn LeaseStore>,
        instance: Uuid,
    },
}

impl Tenures {
    /// The slot of the task that works `resource` (its lease's name).
    pub(crate) fn slot(&self, resource: String, cancel: CancellationToken) -> TenureSlot {
        match self {
            Tenures::Own(store) => TenureSlot::new(store.clone(), cancel, true),
            Tenures::Shared { leases, instance } => {
                let standby = Fence {
                    resource,
                    instance: *instance,
                    epoch: 0,
                };
                TenureSlot::new(leases.fenced(standby), cancel, false)
            }
        }
    }
}

/// The current tenure of one task, replaced when a lease is claimed again.
pub struct TenureSlot {
    current: Mutex<Arc<Tenure>>,
    /// Whether this process runs the task now: always with a state of its
    /// own, while it holds the lease with a shared one.
    held: AtomicBool,
}

impl TenureSlot {
    fn new(store: Arc<dyn StateWrite>, cancel: CancellationToken, held: bool) -> TenureSlot {
        TenureSlot {
            current: Mutex::new(Arc::new(Tenure { store, cancel })),
            held: AtomicBool::new(held),
        }
    }

    pub fn get(&self) -> Arc<Tenure> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set(&self, tenure: Tenure) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(tenure);
    }

    pub fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    pub(crate) fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Release);
    }

    /// The task's write handle.
    pub fn store(&self) -> Arc<dyn StateWrite> {
        self.get().store.clone()
    }

    pub fn cancel(&self) -> CancellationToken {
        self.get().cancel.clone()
    }
}
