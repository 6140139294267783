//! A few idle logged-in sessions kept for reuse, so a delivery costs its
//! commands and not a TCP + TLS + login handshake each time. The pool only
//! stores sessions; the transport decides when one is fit to return (see
//! `transport.rs`), and a session an operation holds is simply dropped if
//! that operation is cancelled or times out.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::session::Session;

/// Idle sessions, most recently used last.
pub struct Pool {
    idle: Mutex<Vec<(Session, Instant)>>,
    max_idle: usize,
}

impl Pool {
    /// A grouped attempt uploads half this many objects at once, each
    /// with its manifest on a second session.
    pub const DEFAULT_MAX_IDLE: usize = 8;

    pub fn new(max_idle: usize) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(Session, Instant)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used session (the least likely to have been
    /// dropped by the server), and how long it has been idle.
    pub fn take(&self) -> Option<(Session, Duration)> {
        self.idle().pop().map(|(s, since)| (s, since.elapsed()))
    }

    /// Keeps a session that is logged in and in step; beyond the cap it is
    /// closed instead.
    pub fn give_back(&self, session: Session) {
        let mut idle = self.idle();
        if idle.len() < self.max_idle {
            idle.push((session, Instant::now()));
        }
    }

    /// Drops every idle session: after one turned out dead, the others
    /// (same server, same network path) most likely are too.
    pub fn clear(&self) {
        self.idle().clear();
    }

    pub fn idle_count(&self) -> usize {
        self.idle().len()
    }
}
