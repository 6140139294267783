//! A tenure: the time one process runs a source or a drain. It carries the
//! store handle the task writes through (fenced with the lease's epoch when
//! processes share the state) and the token that ends the task (a child of
//! the stream's, so shutdown ends every tenure).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use abrq_state::StateStore;
use tokio_util::sync::CancellationToken;

pub struct Tenure {
    pub store: Arc<dyn StateStore>,
    pub cancel: CancellationToken,
}

/// The current tenure of one task, replaced when a lease is claimed again.
pub struct TenureSlot {
    current: Mutex<Arc<Tenure>>,
    /// Whether this process runs the task now: always with a state of its
    /// own, while it holds the lease with a shared one.
    held: AtomicBool,
}

impl TenureSlot {
    pub fn new(store: Arc<dyn StateStore>, cancel: CancellationToken, held: bool) -> TenureSlot {
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

    pub fn set(&self, tenure: Tenure) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(tenure);
    }

    pub fn held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    pub fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Release);
    }

    pub fn store(&self) -> Arc<dyn StateStore> {
        self.get().store.clone()
    }

    pub fn cancel(&self) -> CancellationToken {
        self.get().cancel.clone()
    }
}
