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
mod leases;
mod rows;
mod schema;
mod spool;
mod store_impl;
pub mod transport;

use std::sync::Arc;
use std::time::Duration;

use abrq_core::config::StateLocation;
use anyhow::Context as _;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};

use crate::store::{StoreError, StoreResult};

/// Connections kept per store: enough for the drain loops of a few
/// destinations and a stage at once.
const MAX_CONNECTIONS: u32 = 8;
/// How long a call waits for a free (or new) connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long opening the store waits for the server's first answer.
const FIRST_CONNECT: Duration = Duration::from_secs(10);

/// The PostgreSQL state store. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The URL with its password hidden, for messages.
    shown: Arc<str>,
    /// Set on a holder's handle ([`crate::LeaseStore::fenced`]): every
    /// write checks it first.
    fence: Option<Arc<crate::Fence>>,
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
        Self::connect_with(url, false).await
    }

    /// [`PostgresStore::connect`] under the rule of [`transport`]:
    /// `allow_plaintext` is `state.allow_plaintext`.
    pub async fn connect_with(url: &str, allow_plaintext: bool) -> StoreResult<PostgresStore> {
        let shown: Arc<str> = StateLocation::Postgres(url.to_owned()).to_string().into();
        let fail = |e: anyhow::Error| {
            StoreError::Backend(e.context(format!("opening postgres state {shown}")))
        };
        let options = Self::transport(url, allow_plaintext)
            .map_err(|e| fail(anyhow::anyhow!(e)))?
            .options;
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
            .after_connect(|conn, _| {
                Box::pin(async move {
                    require_durable_commits(conn).await?;
                    end_stalled_transactions(conn).await
                })
            })
            .connect_lazy_with(options);
        Ok(PostgresStore {
            pool,
            shown,
            fence: None,
        })
    }

    /// The options `url` connects with and how they protect the state
    /// connection; an error says what to change.
    pub fn transport(url: &str, allow_plaintext: bool) -> Result<transport::Transport, String> {
        let options = abrq_endpoint::postgres_url(url, "abrq state")
            .map_err(|e| format!("reading the url: {e}"))?;
        transport::transport(url, options, allow_plaintext)
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
            if let Some(fence) = &self.fence {
                leases::check_fence(&mut tx, fence).await?;
            }
            let out = f(&mut tx).await?;
            tx.commit().await?;
            Ok(out)
        };
        run.await.map_err(|e| context(op, e))
    }

    /// A holder's write of one statement: in a transaction with the fence
    /// check when this handle is fenced, as it is otherwise.
    async fn holder_write<T>(
        &self,
        op: &'static str,
        f: impl AsyncFnOnce(&mut PgConnection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        match self.fence {
            Some(_) => self.write(op, f).await,
            None => self.run(op, f).await,
        }
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

/// A transaction left open by a client that stopped (a frozen or cut-off
/// process) would keep its locks, a fenced write's lock on a lease row
/// among them, and so hold up the takeover of that lease for as long as it
/// stays stopped. The server ends such a transaction after this long; it
/// rolls back, so a stalled holder's write simply did not happen. Our
/// transactions never wait on the client between statements this long.
const STALLED_TRANSACTION: &str = "1s";

async fn end_stalled_transactions(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('idle_in_transaction_session_timeout', $1, false)")
        .bind(STALLED_TRANSACTION)
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
