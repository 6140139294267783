//! The PostgreSQL backend, for state shared beyond one machine's disk.
//!
//! Every table lives in the `abrq` schema, so the database can hold other
//! things too. A call runs on a pooled connection: writes of more than one
//! statement in one transaction, single-statement writes and reads as they
//! are (a single statement is its own transaction). A commit that returned
//! is durable: each new connection turns `synchronous_commit = off` back on.
//!
//! Writes that depend on the spool's extent or the stream's seqs (stage,
//! gc, enabling, registering a destination) first lock the stream's row, so
//! they run one at a time per stream as they do on SQLite's single writer.

mod dead_letters;
mod destinations;
mod rows;
mod schema;
mod spool;
mod store_impl;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use abrq_core::config::StateLocation;
use anyhow::Context as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use crate::store::{StoreError, StoreResult};

/// Connections kept per store: enough for the drain loops of a few
/// destinations and a stage at once.
const MAX_CONNECTIONS: u32 = 8;
/// How long a call waits for a free (or new) connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// The advisory lock key of [`PostgresStore::hold_exclusive`]; not the
/// migration's (`schema::MIGRATION_LOCK`), which a second process must
/// still be able to take.
const EXCLUSIVE_LOCK: i64 = 0x6162_7201;
/// How long opening the store waits for the server's first answer.
const FIRST_CONNECT: Duration = Duration::from_secs(10);

/// The PostgreSQL state store. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The URL with its password hidden, for messages.
    shown: Arc<str>,
    /// The connection holding [`PostgresStore::hold_exclusive`]'s lock.
    exclusive: Arc<tokio::sync::Mutex<Option<PgConnection>>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database a `postgres://` (or `postgresql://`) URL
    /// names and brings the `abrq` schema up to date. Errors never show the
    /// URL's password.
    pub async fn connect(url: &str) -> StoreResult<PostgresStore> {
        let shown: Arc<str> = StateLocation::Postgres(url.to_owned()).to_string().into();
        let fail = |e: anyhow::Error| {
            StoreError::Backend(e.context(format!("opening postgres state {shown}")))
        };
        let mut options = PgConnectOptions::from_str(url)
            .map_err(|e| fail(anyhow::Error::new(e).context("reading the url")))?;
        if options.get_application_name().is_none() {
            options = options.application_name("abrq state");
        }
        // One connection of our own first: the server's answer (refused,
        // no such database, wrong password) at once, where the pool would
        // retry a refused connection for its whole acquire timeout.
        let mut first =
            tokio::time::timeout(FIRST_CONNECT, sqlx::ConnectOptions::connect(&options))
                .await
                .map_err(|_| {
                    fail(anyhow::anyhow!(
                        "no answer within {}s",
                        FIRST_CONNECT.as_secs()
                    ))
                })?
                .context("connecting")
                .map_err(fail)?;
        require_durable_commits(&mut first)
            .await
            .context("connecting")
            .map_err(fail)?;
        schema::migrate(&mut first).await.map_err(fail)?;
        let _ = sqlx::Connection::close(first).await;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .after_connect(|conn, _| Box::pin(require_durable_commits(conn)))
            .connect_lazy_with(options);
        Ok(PostgresStore {
            pool,
            shown,
            exclusive: Arc::default(),
        })
    }

    /// Takes the state for this process alone, for as long as it runs: a
    /// session advisory lock on a connection of its own. Until leases let
    /// several processes share the work, a second `abrq run` on the same
    /// state is refused, naming the one that holds it, instead of reading
    /// every source a second time.
    pub async fn hold_exclusive(&self, who: &str) -> StoreResult<()> {
        let shown = self.shown.clone();
        let fail =
            |e: anyhow::Error| StoreError::Backend(e.context(format!("postgres state {shown}")));
        let mut conn = self
            .pool
            .acquire()
            .await
            .context("connecting")
            .map_err(fail)?
            .detach();
        sqlx::query("SELECT set_config('application_name', $1, false)")
            .bind(who)
            .execute(&mut conn)
            .await
            .context("naming the session")
            .map_err(fail)?;
        let took: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(EXCLUSIVE_LOCK)
            .fetch_one(&mut conn)
            .await
            .context("taking the state's lock")
            .map_err(fail)?;
        if !took {
            let holder: Option<(String, Option<String>)> = sqlx::query_as(
                "SELECT a.application_name, a.client_addr::text
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'advisory' AND l.granted
                   AND l.objid = ($1 & 4294967295)::oid LIMIT 1",
            )
            .bind(EXCLUSIVE_LOCK)
            .fetch_optional(&mut conn)
            .await
            .unwrap_or(None);
            let by = match holder {
                Some((app, addr)) => {
                    format!("{app} from {}", addr.as_deref().unwrap_or("a local socket"))
                }
                None => "another session".to_string(),
            };
            return Err(fail(anyhow::anyhow!(
                "another abrq process holds this state ({by}); one process per state database \
                 until leases let several share the work"
            )));
        }
        *self.exclusive.lock().await = Some(conn);
        Ok(())
    }

    /// Runs `f` in one transaction and commits when it returns Ok; an error
    /// (or a dropped future) rolls everything back. `op` names the call in
    /// errors.
    async fn write<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&mut PgConnection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let run = async {
            let mut tx = self.pool.begin().await?;
            let out = f(&mut tx).await?;
            tx.commit().await?;
            Ok(out)
        };
        run.await.map_err(|e| context(op, e))
    }

    /// Runs `f` on a pooled connection outside a transaction: for reads and
    /// for writes of one statement.
    async fn run<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&mut PgConnection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let run = async {
            let mut conn = self.pool.acquire().await?;
            f(&mut conn).await
        };
        run.await.map_err(|e| context(op, e))
    }
}

/// A server, database or role set to `synchronous_commit = off` would
/// acknowledge commits a crash can still take back; the store promises the
/// opposite. `local` and the replica levels are durable here already.
async fn require_durable_commits(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT set_config('synchronous_commit', 'on', false)
         WHERE current_setting('synchronous_commit') = 'off'",
    )
    .execute(conn)
    .await
    .map(drop)
}

fn context(op: &'static str, e: StoreError) -> StoreError {
    match e {
        StoreError::Backend(e) => StoreError::Backend(e.context(format!("postgres state {op}"))),
        other => other,
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Backend(e.into())
    }
}
