//! The snapshot copy: each table's rows by its primary key, read in the
//! transaction of the snapshot the slot exported when it was made, so the
//! copy and the stream after it meet exactly; with `snapshot_connections`
//! above 1, that many transactions import the snapshot and a large table
//! is read in parts on all of them at once.

use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::Connection;

use super::super::catalog;
use super::super::config::{Mode, TableName};
use super::super::cursor::{PgCursorSource, Position};
use super::copy_out::{split, CopyOut};
use super::{PgCdc, Replication};
use crate::cdc::cursor::Part;
use crate::cdc::deadline::{self, within};
use crate::cdc::{CopyAt, CopyPage};
use crate::chunk::Limits;
use crate::error::{Context as _, Failure, SourceError};
use crate::filter::Expr;

/// The copy while it runs.
pub struct PgCopy {
    /// The session that made the slot: it holds the exported snapshot
    /// until the copy is done, and streaming starts on it.
    gate: Replication,
    /// The snapshot's transactions, between tables (the first one holds
    /// the tables' locks). Empty once a copy failed: the snapshot is lost.
    spare: Vec<PgConnection>,
    /// The table being copied and its copy (which holds the transaction).
    reading: Option<(String, CopyOut)>,
}

impl PgCopy {
    /// Opens a transaction that reads what the slot's start saw, and
    /// takes `ACCESS SHARE` on every table at once (as pg_dump does): a
    /// table rewritten after the snapshot (`ALTER COLUMN ... TYPE`,
    /// `VACUUM FULL`, `CLUSTER`) would read as empty under it, so the
    /// rewrite waits for the copy, and one that came before the lock is a
    /// failure that starts the copy again, never an empty table.
    pub(super) async fn open(
        settings: &super::super::config::PostgresSettings,
        gate: Replication,
        snapshot: &str,
        tables: &[TableName],
    ) -> Result<PgCopy, SourceError> {
        let mut spare = Vec::with_capacity(settings.snapshot_connections);
        for _ in 0..settings.snapshot_connections {
            spare.push(in_snapshot(settings, snapshot).await?);
        }
        hold(&mut spare[0], tables).await?;
        Ok(PgCopy {
            gate,
            spare,
            reading: None,
        })
    }

    pub(super) fn into_gate(self) -> Replication {
        self.gate
    }
}

/// A connection whose transaction reads the exported `snapshot`.
async fn in_snapshot(
    settings: &super::super::config::PostgresSettings,
    snapshot: &str,
) -> Result<PgConnection, SourceError> {
    let options = settings.connect_options();
    let mut conn = within(deadline::CONNECT, "connecting", async {
        PgConnection::connect_with(&options)
            .await
            .context("cannot connect")
    })
    .await?;
    let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_string();
    let set = format!("SET TRANSACTION SNAPSHOT '{snapshot}'");
    for sql in [begin, set] {
        let done = sqlx::query(&sql).execute(&mut conn).await;
        done.context("cannot open the snapshot")?;
    }
    Ok(conn)
}

/// Locks `tables` for the transaction and fails when one was rewritten
/// between the snapshot and the lock: its file under the snapshot's
/// catalog then differs from the one the server reads now. A partitioned
/// table has no file: each of its partitions is checked (the lock takes
/// them too).
async fn hold(conn: &mut PgConnection, tables: &[TableName]) -> Result<(), SourceError> {
    if tables.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = tables.iter().map(TableName::quoted).collect();
    let lock = format!("LOCK TABLE {} IN ACCESS SHARE MODE", list.join(", "));
    within(deadline::OPEN, "locking the tables to copy", async {
        sqlx::query(&lock)
            .execute(&mut *conn)
            .await
            .context("cannot lock the tables to copy")
    })
    .await?;
    for table in tables {
        let moved: bool = sqlx::query_scalar(&format!(
            "SELECT coalesce(bool_or(c.relfilenode <> pg_relation_filenode(c.oid)), false) \
             FROM {} h JOIN pg_class c ON c.oid = h.relid",
            catalog::HOLDERS
        ))
        .bind(table.quoted())
        .fetch_optional(&mut *conn)
        .await
        .context("cannot read the tables to copy")?
        .unwrap_or(false);
        if moved {
            return Err(SourceError::new(
                Failure::Server,
                format!(
                    "snapshot: {table} was rewritten after the copy's snapshot was taken (it would \
                     read as empty); the copy starts again"
                ),
            ));
        }
    }
    Ok(())
}

impl PgCdc {
    /// The next page of the copy at `at`, which it moves past the page; a
    /// table after the last one's end is copied on the same snapshot.
    pub(super) async fn copy_page_of(
        &mut self,
        copy: &mut PgCopy,
        at: &mut CopyAt,
        limits: Limits,
    ) -> Result<CopyPage, SourceError> {
        let mut out = match copy.reading.take() {
            Some((table, out)) if table == at.table => out,
            other => {
                if let Some((_, done)) = other {
                    copy.spare.extend(done.into_connections().await?);
                }
                self.start_table(copy, at, limits).await?
            }
        };
        let Some(page) = out.next().await? else {
            copy.spare.extend(out.into_connections().await?);
            return Ok(CopyPage {
                chunk: Default::default(),
                done: true,
            });
        };
        // the page's cursor is its last row's key (none: it is empty)
        let mut chunk = page.chunk;
        let after = chunk.cursor.take().map(Value::String);
        match at.parts.get_mut(page.part) {
            Some(part) => {
                part.after = after.or(part.after.take());
                part.done = page.part_done;
            }
            None => at.after = after.or(at.after.take()),
        }
        match page.done {
            true => copy.spare.extend(out.into_connections().await?),
            false => copy.reading = Some((at.table.clone(), out)),
        }
        Ok(CopyPage {
            chunk,
            done: page.done,
        })
    }

    /// Starts the copy of `at`'s table: in parts on every spare connection
    /// when it is large and has a key (the parts go into `at`), else whole
    /// on one.
    async fn start_table(
        &mut self,
        copy: &mut PgCopy,
        at: &mut CopyAt,
        limits: Limits,
    ) -> Result<CopyOut, SourceError> {
        // a copy that failed lost its snapshot with its session
        if copy.spare.is_empty() {
            return Err(SourceError::new(
                Failure::Server,
                "snapshot: the copy's session was lost; the copy goes on as a backfill",
            ));
        }
        let table = self.table_named(&at.table)?;
        let catalog = self.catalog().await?;
        let key = catalog::primary_key(catalog, &table)
            .await
            .context("snapshot")?;
        let after = Position::stored(at.after.as_ref())?;
        let fresh = after.is_none() && at.parts.is_empty();
        if let (true, true, Some(first)) = (fresh, copy.spare.len() > 1, key.first()) {
            let connections = copy.spare.len();
            let ranges = split::ranges(&mut copy.spare[0], &table, first, connections).await?;
            if ranges.len() > 1 {
                at.parts = ranges
                    .into_iter()
                    .map(|range| Part {
                        range,
                        after: None,
                        done: false,
                    })
                    .collect();
            }
        }
        if let Some(p) = at
            .parts
            .iter()
            .find(|p| Some(&p.range.column) != key.first())
        {
            return Err(SourceError::new(
                Failure::Invalid,
                format!(
                    "snapshot: {table} was split by {:?}, which is no longer its first key column",
                    p.range.column
                ),
            ));
        }
        let readers = match at.parts.is_empty() {
            true => 1,
            false => at.parts.iter().filter(|p| !p.done).count(),
        };
        if readers > copy.spare.len() {
            return Err(SourceError::new(
                Failure::Invalid,
                format!(
                    "snapshot: {table} is copied in {readers} parts, more than the {} connections \
                     on the snapshot",
                    copy.spare.len()
                ),
            ));
        }
        // the rest wait for the next table (every one stays in its
        // transaction until the copy ends, the one with the locks too)
        let conns: Vec<PgConnection> = copy.spare.drain(..readers).collect();
        CopyOut::start(conns, &table, &key, after.as_ref(), &at.parts, limits).await
    }

    /// The reader of a table's rows for a backfill: keyset pages by the
    /// primary key at the current state, parsed, to hold them against
    /// the stream's changes.
    pub(super) async fn copier(
        &mut self,
        table: &TableName,
        after: Option<&str>,
        filter: Option<Expr>,
    ) -> Result<PgCursorSource, SourceError> {
        let catalog = self.catalog().await?;
        let key = catalog::primary_key(catalog, table)
            .await
            .context("backfill")?;
        let Some(first) = key.first().cloned() else {
            return Err(SourceError::new(
                Failure::NoKey,
                format!(
                    "backfill: {table} has no primary key, so rows read now cannot be merged \
                     with the changes streamed meanwhile; add a primary key, or re-snapshot \
                     the table into a new stream"
                ),
            ));
        };
        let mut settings = self.settings.clone();
        settings.mode = Mode::Cursor;
        settings.table = table.clone();
        settings.tables = vec![table.clone()];
        settings.cursor = first;
        settings.primary_key = key.clone();
        settings.filter = filter;
        tracing::info!(%table, key = ?key, resume = after.is_some(), "backfill reader starts");
        PgCursorSource::new(settings, after).map(PgCursorSource::parsed)
    }
}

#[cfg(all(test, feature = "services"))]
mod tests {
    use super::*;

    fn url() -> String {
        std::env::var("ABRQ_TEST_PGCDC_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5442/test".into())
    }

    async fn run(conn: &mut PgConnection, sql: &str) {
        sqlx::query(sql)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A rewrite after the snapshot and before the copy's lock would read
    /// as an empty table under the snapshot: the lock says so instead, for
    /// a table and for a partitioned table's partition.
    #[tokio::test]
    async fn a_table_rewritten_before_the_lock_fails_the_copy() {
        let mut other = PgConnection::connect(&url())
            .await
            .expect("the pgcdc service");
        let n: u32 = std::process::id()
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos());
        let (plain, parted) = (format!("abrq_rw_{n:x}"), format!("abrq_rwp_{n:x}"));
        run(
            &mut other,
            &format!("CREATE TABLE {plain} (id int PRIMARY KEY, n int)"),
        )
        .await;
        run(&mut other, &format!("INSERT INTO {plain} VALUES (1, 1)")).await;
        run(
            &mut other,
            &format!("CREATE TABLE {parted} (id int PRIMARY KEY, n int) PARTITION BY RANGE (id)"),
        )
        .await;
        run(
            &mut other,
            &format!("CREATE TABLE {parted}_1 PARTITION OF {parted} FOR VALUES FROM (0) TO (10)"),
        )
        .await;
        let names = |t: &[&str]| -> Vec<TableName> {
            t.iter().map(|t| TableName::parse(t).unwrap()).collect()
        };
        for (table, rewrite) in [
            (
                plain.clone(),
                format!("ALTER TABLE {plain} ALTER COLUMN n TYPE bigint"),
            ),
            (parted.clone(), format!("VACUUM FULL {parted}_1")),
        ] {
            let mut copy = PgConnection::connect(&url()).await.unwrap();
            // the snapshot is taken, no table locked yet
            run(&mut copy, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await;
            run(&mut copy, "SELECT 1").await;
            hold(&mut copy, &names(&[&table]))
                .await
                .expect("nothing rewritten yet");
            run(&mut copy, "ROLLBACK").await;

            run(&mut copy, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await;
            run(&mut copy, "SELECT 1").await;
            run(&mut other, &rewrite).await;
            let e = hold(&mut copy, &names(&[&table])).await.unwrap_err();
            assert!(
                e.to_string().contains("was rewritten after"),
                "{table}: {e}"
            );
        }
        run(&mut other, &format!("DROP TABLE {plain}, {parted}")).await;
    }
}
