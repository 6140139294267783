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

/// How long the direct attempt of [`why_unreachable`] may take.
const DIRECT_ATTEMPT: std::time::Duration = std::time::Duration::from_secs(5);

/// sqlx's pool retries a connection the server refuses until its acquire
/// timeout, then says only "pool timed out". One direct attempt says why
/// (connection refused, no such host, ...): that error replaces the
/// timeout. Any other error is returned as it is.
pub async fn why_unreachable<DB: Database>(pool: &Pool<DB>, e: sqlx::Error) -> sqlx::Error {
    if !matches!(e, sqlx::Error::PoolTimedOut) {
        return e;
    }
    direct_attempt(pool).await.err().unwrap_or(e)
}

/// Opens one connection outside the pool and closes it: the server's own
/// answer (refused, no such database, wrong password) at once, where the
/// pool would retry until its timeout.
pub async fn direct_attempt<DB: Database>(pool: &Pool<DB>) -> Result<(), sqlx::Error> {
    use sqlx::{ConnectOptions, Connection};
    let options = pool.connect_options();
    match tokio::time::timeout(DIRECT_ATTEMPT, options.connect()).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {}s", DIRECT_ATTEMPT.as_secs()),
        ))),
    }
}
