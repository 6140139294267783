//! The state database both processes share: its leases and marks as the
//! test reads them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::{self, postgres::PgPool};

use super::STREAM;

pub(super) struct Database {
    admin: PgPool,
    name: String,
}

impl Database {
    pub(super) async fn fresh() -> (Database, String) {
        let pg = abrq_testkit::Postgres::from_env();
        let admin = PgPool::connect(&pg.url)
            .await
            .unwrap_or_else(|e| panic!("connect to postgres ({pg:?}): {e}"));
        let name = format!("abrq_fencing_e2e_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            sqlx::query(&sql).execute(&admin).await.expect(&sql);
        }
        let url = pg.url_for(&name).expect("a url");
        (Database { admin, name }, url)
    }

    pub(super) async fn drop(self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = sqlx::query(&sql).execute(&self.admin).await;
    }
}

/// One row of `abrq.leases`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lease {
    pub(super) resource: String,
    pub(super) node_id: Option<String>,
    pub(super) instance: Option<String>,
    pub(super) epoch: i64,
    /// Held and not expired, by the database's clock.
    pub(super) live: bool,
}

/// (resource, node_id, instance, epoch, live)
pub(super) type LeaseTuple = (String, Option<String>, Option<String>, i64, bool);

pub(super) async fn try_leases(pool: &PgPool) -> Result<Vec<Lease>, sqlx::Error> {
    let rows: Vec<LeaseTuple> = sqlx::query_as(
        "SELECT resource, node_id, instance, epoch,
                instance IS NOT NULL AND expires_at >= abrq.clock_ms()
         FROM abrq.leases ORDER BY resource",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(resource, node_id, instance, epoch, live)| Lease {
            resource,
            node_id,
            instance,
            epoch,
            live,
        })
        .collect())
}

pub(super) async fn leases(pool: &PgPool) -> Vec<Lease> {
    try_leases(pool).await.expect("read abrq.leases")
}

/// Every destination's mark and the stream's last seq, read in one
/// statement (one snapshot).
pub(super) async fn try_marks(pool: &PgPool) -> Result<(BTreeMap<String, i64>, i64), sqlx::Error> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT d.name, d.hwm, s.last_seq
         FROM abrq.destinations d JOIN abrq.streams s ON s.id = d.stream_id
         WHERE s.name = $1",
    )
    .bind(STREAM)
    .fetch_all(pool)
    .await?;
    let last_seq = rows.first().map_or(0, |r| r.2);
    Ok((
        rows.into_iter().map(|(d, hwm, _)| (d, hwm)).collect(),
        last_seq,
    ))
}

pub(super) async fn marks(pool: &PgPool) -> (BTreeMap<String, i64>, i64) {
    try_marks(pool).await.expect("read abrq.destinations")
}

/// The sessions on the state database: what each runs or waits for, and
/// which sessions block it (an `idle in transaction` session of a frozen
/// process holds its locks until it runs again).
pub(super) async fn sessions(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        r"SELECT format('pid %s port %s %s (xact %s) wait %s/%s blocked by %s: %s',
                        pid, client_port, state, clock_timestamp() - xact_start,
                        wait_event_type, wait_event, pg_blocking_pids(pid),
                        left(regexp_replace(query, '\s+', ' ', 'g'), 240))
          FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()
          ORDER BY pid",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| vec![format!("(cannot read pg_stat_activity: {e})")])
}

/// Polls `f` until it holds; at the deadline panics with the leases and
/// the sessions on the state database.
pub(super) async fn wait_state(
    pool: &PgPool,
    timeout: Duration,
    what: &str,
    mut f: impl AsyncFnMut() -> bool,
) {
    let start = Instant::now();
    loop {
        if f().await {
            return;
        }
        if start.elapsed() > timeout {
            let ls = leases(pool).await;
            let (hwm, last_seq) = marks(pool).await;
            panic!(
                "timed out after {timeout:?} waiting for: {what}\nleases: {ls:#?}\nmarks {hwm:?}, last_seq {last_seq}\nsessions on the state database:\n{}",
                sessions(pool).await.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) fn held_by<'a>(ls: &'a [Lease], instance: &str) -> Vec<&'a Lease> {
    ls.iter()
        .filter(|l| l.live && l.instance.as_deref() == Some(instance))
        .collect()
}

pub(super) fn instance_of(ls: &[Lease], node: &str) -> Option<String> {
    ls.iter()
        .find(|l| l.node_id.as_deref() == Some(node))
        .and_then(|l| l.instance.clone())
}
