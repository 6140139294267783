//! The snapshot copy: each table's rows in keyset pages by its primary
//! key, read in the transaction of the snapshot the slot exported when it
//! was made, so the copy and the stream after it meet exactly.

use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::Connection;

use super::super::catalog;
use super::super::config::{Mode, TableName};
use super::super::cursor::{PgCursorSource, Position};
use super::copy_out::CopyOut;
use super::{PgCdc, Replication};
use crate::cdc::deadline::{self, within};
use crate::cdc::{CopyAt, CopyPage};
use crate::chunk::Limits;
use crate::error::{Context as _, Failure, SourceError};
use crate::filter::Expr;
use crate::source::parse_cursor;

/// The copy while it runs.
pub struct PgCopy {
    /// The session that made the slot: it holds the exported snapshot
    /// until the copy is done, and streaming starts on it.
    gate: Replication,
    /// The snapshot's transaction, between tables.
    spare: Option<PgConnection>,
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
        hold(&mut conn, tables).await?;
        Ok(PgCopy {
            gate,
            spare: Some(conn),
            reading: None,
        })
    }

    pub(super) fn into_gate(self) -> Replication {
        self.gate
    }
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
        let moved: bool = sqlx::query_scalar(
            "SELECT coalesce(bool_or(c.relfilenode <> pg_relation_filenode(c.oid)), false) \
             FROM pg_partition_tree(to_regclass($1)) p JOIN pg_class c ON c.oid = p.relid \
             WHERE p.isleaf",
        )
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
    /// The next page of the copy at `at`; a table after the last one's
    /// end is copied on the same snapshot.
    pub(super) async fn copy_page_of(
        &mut self,
        copy: &mut PgCopy,
        at: &CopyAt,
        limits: Limits,
    ) -> Result<CopyPage, SourceError> {
        let mut out = match copy.reading.take() {
            Some((table, out)) if table == at.table => out,
            other => {
                let conn = match other {
                    Some((_, done)) => Some(done.into_connection().await?),
                    None => copy.spare.take(),
                };
                // a copy that failed lost its snapshot with its session
                let conn = conn.ok_or_else(|| {
                    SourceError::new(
                        Failure::Server,
                        "snapshot: the copy's session was lost; the copy goes on as a backfill",
                    )
                })?;
                let table = self.table_named(&at.table)?;
                let catalog = self.catalog().await?;
                let key = catalog::primary_key(catalog, &table)
                    .await
                    .context("snapshot")?;
                let after = match at.after.as_ref().and_then(Value::as_str) {
                    Some(text) => Some(parse_cursor::<Position>(text)?),
                    None => None,
                };
                CopyOut::start(conn, &table, &key, after.as_ref(), limits).await?
            }
        };
        let Some(page) = out.next().await? else {
            copy.spare = Some(out.into_connection().await?);
            return Ok(CopyPage {
                chunk: Default::default(),
                after: None,
                done: true,
            });
        };
        let mut chunk = page.chunk;
        let after = chunk.cursor.clone().map(Value::String);
        match page.done {
            true => copy.spare = Some(out.into_connection().await?),
            false => copy.reading = Some((at.table.clone(), out)),
        }
        Ok(CopyPage {
            chunk: std::mem::take(&mut chunk),
            after,
            done: page.done,
        })
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
