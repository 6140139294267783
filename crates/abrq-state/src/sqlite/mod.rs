//! The embedded SQLite backend: one file in WAL mode with `synchronous=FULL`,
//! so a commit that returned survives power loss.
//!
//! rusqlite is synchronous, so every call runs on tokio's blocking pool. All
//! writes go through one connection behind a mutex (SQLite has one writer
//! anyway, and this keeps `BEGIN IMMEDIATE` from ever waiting on ourselves);
//! reads use a small pool of read-only connections, which WAL lets run beside
//! the writer, so a drain loop's `next_batch` never waits for a stage commit.

mod dead_letters;
mod destinations;
mod rows;
mod schema;
mod spool;
mod store_impl;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use abrq_core::config::StateLocation;
use anyhow::{anyhow, Context as _};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::store::{StoreError, StoreResult};

/// How long a statement waits for a lock held by another process (another
/// `abrq` pointed at the same file, or a backup tool) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Read-only connections kept open between calls; more are opened under a
/// burst and closed again afterwards.
const IDLE_READERS: usize = 4;
/// Enough for every distinct statement this backend prepares.
const STATEMENT_CACHE: usize = 64;
/// Truncate the WAL back to this size after a checkpoint, so one burst of
/// staging does not leave a huge file behind.
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The SQLite state store. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct SqliteStore {
    db: Arc<Db>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.db.path)
            .finish_non_exhaustive()
    }
}

/// The connections; the blocking closures of the trait methods get `&Db`.
pub(crate) struct Db {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

impl SqliteStore {
    /// Opens (creating it and its parent directories if needed) the state
    /// file at `path` and brings its schema up to date.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        let fail = |e: anyhow::Error| {
            StoreError::Backend(e.context(format!("opening sqlite state {}", path.display())))
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating directory {}", dir.display()))
                .map_err(fail)?;
        }
        let mut writer = open_writer(path).map_err(fail)?;
        schema::migrate(&mut writer).map_err(fail)?;
        Ok(SqliteStore {
            db: Arc::new(Db {
                path: path.to_path_buf(),
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Opens a `sqlite:` URL as written in `state.url` (see
    /// [`StateLocation::parse`]).
    pub fn open_url(url: &str) -> StoreResult<SqliteStore> {
        match StateLocation::parse(url).map_err(|e| StoreError::Backend(anyhow!(e)))? {
            StateLocation::Sqlite(path) => SqliteStore::open(&path),
            other @ StateLocation::Postgres(_) => Err(StoreError::Backend(anyhow!(
                "{other} is not a sqlite state url (see PostgresStore)"
            ))),
        }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.db.path
    }

    /// Runs `f` on the blocking pool; `op` names the call in errors.
    async fn run<T, F>(&self, op: &'static str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db) -> StoreResult<T> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let joined = tokio::task::spawn_blocking(move || f(&db)).await;
        match joined {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(StoreError::Backend(e))) => {
                Err(StoreError::Backend(e.context(format!("sqlite {op}"))))
            }
            Ok(Err(e)) => Err(e),
            Err(e) => Err(StoreError::Backend(
                anyhow::Error::new(e).context(format!("sqlite {op}: blocking task failed")),
            )),
        }
    }
}

impl Db {
    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer and
    /// commits (durably) when it returns Ok; an error rolls everything back.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>) -> StoreResult<T> {
        let mut conn = lock(&self.writer);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs `f` in one read transaction (one consistent snapshot) on a pooled
    /// read-only connection.
    fn read<T>(&self, f: impl FnOnce(&Transaction<'_>) -> StoreResult<T>) -> StoreResult<T> {
        let pooled = lock(&self.readers).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => open_reader(&self.path)?,
        };
        let out = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(StoreError::from)
            .and_then(|tx| {
                let v = f(&tx)?;
                // Ending a read transaction only releases the snapshot.
                tx.finish()?;
                Ok(v)
            });
        let mut idle = lock(&self.readers);
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
        out
    }
}

/// A panic while holding the lock leaves the connection usable: rusqlite
/// rolls an open transaction back when it is dropped during the unwind.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn open_writer(path: &Path) -> anyhow::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(anyhow!(
            "could not switch to WAL mode (journal_mode is {mode})"
        ));
    }
    // FULL syncs the WAL on every commit: NORMAL would be durable against a
    // crash of abrq but could lose the last commits on power loss.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

fn open_reader(path: &Path) -> StoreResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .with_context(|| format!("opening read connection to {}", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(e.into())
    }
}
