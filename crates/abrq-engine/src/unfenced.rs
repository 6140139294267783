//! Writes that no lease guards, each safe from any process sharing the
//! state:
//!
//! - an operator's actions (`control.rs`, so the admin API): an operator
//!   may reach any process, and the holder of the drain follows what the
//!   store says (`cluster/follow.rs`); a fence would refuse the action on
//!   every process but the holder;
//! - HTTP ingest: not a lease's work, any process stages what it is sent;
//!   staging locks the stream's row, so seqs stay gapless whichever
//!   process stages, and a request key dedupes across processes;
//! - the spool GC, on every process: it deletes only what every enabled
//!   destination's committed mark passed, as read in its own transaction,
//!   and request keys past the window, whoever runs it;
//! - registering streams and destinations at start (idempotent).
//!
//! A task that holds a lease (a source, a drain loop, a mark writer)
//! writes through its tenure instead (`tenure.rs`).

use std::ops::Deref;
use std::sync::Arc;

use abrq_state::{StateStore, StateWrite};

/// The plain store's write half, fenced by no lease. The engine makes the
/// one it uses at start ([`Unfenced::new`] is for it alone).
#[derive(Clone)]
pub struct Unfenced(Arc<dyn StateWrite>);

impl Unfenced {
    pub(crate) fn new(store: Arc<dyn StateStore>) -> Unfenced {
        Unfenced(store.write_half())
    }
}

impl Deref for Unfenced {
    type Target = dyn StateWrite;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}
