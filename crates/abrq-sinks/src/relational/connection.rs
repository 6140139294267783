//! What every dialect's backend holds: its settings, a pool made on first
//! use (so building a destination does no I/O and needs no runtime), and
//! whether the ledger table is known to exist.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use sqlx::pool::PoolOptions;
use sqlx::{Database, Pool};

use super::config::RelationalSettings;
use super::errors::{DbError, Kind};

pub struct Connection<DB: Database> {
    pub settings: Arc<RelationalSettings>,
    pool: OnceLock<Pool<DB>>,
    ledger_ready: AtomicBool,
}

impl<DB: Database> Connection<DB> {
    pub fn new(settings: Arc<RelationalSettings>) -> Self {
        Connection {
            settings,
            pool: OnceLock::new(),
            ledger_ready: AtomicBool::new(false),
        }
    }

    /// The pool; the first call makes it with `lazy` (which adds the
    /// dialect's session setup and connect options, and connects lazily).
    pub fn pool(&self, lazy: impl FnOnce(PoolOptions<DB>) -> Pool<DB>) -> &Pool<DB> {
        self.pool.get_or_init(|| {
            lazy(
                PoolOptions::new()
                    // one drain loop delivers one batch at a time; the
                    // second connection serves `check` and the row-finding
                    // pass
                    .max_connections(2)
                    .min_connections(0)
                    .acquire_timeout(self.settings.connect_timeout),
            )
        })
    }

    /// Makes sure the ledger exists: runs `create` until it succeeds once.
    pub async fn ledger<F>(&self, create: impl FnOnce() -> F) -> Result<(), DbError>
    where
        F: Future<Output = Result<(), DbError>>,
    {
        if self.ledger_ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        create().await.map_err(|mut err| {
            // whatever collides in the catalog, the batch is not to blame
            if err.kind.blames_a_row() {
                err.kind = Kind::ObjectExists;
            }
            err
        })?;
        self.ledger_ready.store(true, Ordering::Relaxed);
        Ok(())
    }
}
