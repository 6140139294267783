//! Backfill while streaming goes on, and the rest of a snapshot copy cut
//! short. Each page of a table is read, in key order, in a consistent
//! snapshot of its own whose binlog position `S` the server states
//! (MariaDB's `binlog_snapshot_position`; MySQL: under a brief global read
//! lock, see `snapshot::open`). The page is the table's state at `S`, so it
//! joins the stream exactly where the stream reaches `S`: every change
//! before `S` arrives before it and every change after after it. No change
//! is overtaken by an older copy of its row, no row of the page is dropped,
//! and the source needs no watermark table (nothing is written to it).
//! The page's last key goes into the stream's cursor: a backfill goes on
//! after a restart.

use std::cmp::Ordering;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use serde_json::{Map, Value};

use super::super::catalog;
use super::super::config::TableName;
use super::super::snapshot;
use super::binlog::Session;
use super::position::file_order;
use super::{rows_chunk, BinlogAt, MysqlCdc, Shaped};
use crate::cdc::deadline::{self, within};
use crate::cdc::{Ctx, Staged};
use crate::chunk::Chunk;
use crate::error::{Context as _, Failure, SourceError};
use crate::filter::Expr;

/// Rows per page: one snapshot transaction each.
const PAGE_ROWS: u64 = 2_000;

/// A page read at binlog position `at`, waiting for the stream to get there.
pub struct Page {
    at: (String, u64),
    table: TableName,
    shaped: Shaped,
    rows: Vec<Map<String, Value>>,
    more: bool,
}

impl MysqlCdc {
    /// Takes up the next backfill asked for when none runs, and reads its
    /// next page in a snapshot of its own unless one waits already.
    pub(super) async fn take_page(
        &mut self,
        session: &mut Session,
        ctx: &mut Ctx<'_, BinlogAt>,
    ) -> Result<(), SourceError> {
        if ctx.cursor.backfill.is_none() {
            if let Some(asked) = ctx.backfills.next_asked(&mut ctx.cursor.taken) {
                match backfill_tables(
                    &self.settings.tables,
                    &self.settings.endpoint.database,
                    asked.table,
                ) {
                    Ok(tables) => {
                        let names: Vec<String> = tables.iter().map(ToString::to_string).collect();
                        ctx.cursor.backfill = Staged::of(&names, None).map(|s| Staged {
                            filter: asked.filter,
                            ..s
                        });
                        ctx.backfills.started();
                        tracing::info!(tables = tables.len(), "backfill starts");
                    }
                    Err(e) => ctx.backfills.refused(e),
                }
            }
        }
        if session.page.is_some() {
            return Ok(());
        }
        let Some(staged) = ctx.cursor.backfill.clone() else {
            return Ok(());
        };
        let Some(table) = self
            .settings
            .tables
            .iter()
            .find(|t| t.to_string() == staged.table)
            .cloned()
        else {
            // the config no longer captures it: go on with the rest
            finish_table(ctx);
            return Ok(());
        };
        let conn = match session.backfill_conn.take() {
            Some(c) => c,
            None => self.connect().await.context("backfill")?,
        };
        let conn = session.backfill_conn.insert(conn);
        let after = match &staged.after {
            Some(Value::Array(key)) => Some(key.as_slice()),
            _ => None,
        };
        let read = within(
            deadline::PAGE,
            "reading a backfill page",
            read_page(conn, &table, after, staged.filter()?),
        );
        match read.await {
            Ok(p) => {
                session.page = Some(p);
                Ok(())
            }
            Err(e) => {
                session.backfill_conn = None;
                Err(e.context("backfill"))
            }
        }
    }

    /// Between source transactions: when the stream has reached the
    /// waiting page's position, the page joins the stream here.
    pub(super) fn place_page(
        &mut self,
        session: &mut Session,
        ctx: &mut Ctx<'_, BinlogAt>,
    ) -> Option<Chunk> {
        let reached =
            session
                .page
                .as_ref()
                .is_some_and(|p| match file_order(&session.file, &p.at.0) {
                    Ordering::Greater => true,
                    Ordering::Less => false,
                    Ordering::Equal => session.read_pos >= p.at.1,
                });
        if !reached {
            return None;
        }
        let page = session.page.take()?;
        let last = page
            .rows
            .last()
            .map(|r| snapshot::key_of(&page.shaped.shape, r));
        let n = page.rows.len() as u64;
        let chunk = rows_chunk(&page.shaped, page.rows);
        if let Some(b) = ctx.cursor.backfill.as_mut() {
            b.rows += n;
            if let Some(key) = last {
                b.after = Some(Value::Array(key));
            }
            if !page.more {
                tracing::info!(table = %page.table, rows = b.rows, "backfill of a table done");
                finish_table(ctx);
            }
        }
        Some(chunk)
    }
}

/// The backfill's current table is done: the next one, or the end.
fn finish_table(ctx: &mut Ctx<'_, BinlogAt>) {
    if let Some(b) = ctx.cursor.backfill.as_mut() {
        if !b.next_table() {
            tracing::info!(rows = b.rows, "backfill done");
            ctx.cursor.backfill = None;
        }
    }
}

/// The captured tables a backfill of `asked` reads, in order.
fn backfill_tables(
    captured: &[TableName],
    database: &Option<String>,
    asked: Option<String>,
) -> Result<Vec<TableName>, String> {
    let Some(name) = asked else {
        return Ok(captured.to_vec());
    };
    let unquote = |s: &str| s.trim_matches('`').to_string();
    let wanted = match name.split_once('.') {
        Some((db, t)) => TableName {
            database: unquote(db),
            name: unquote(t),
        },
        None => match database {
            Some(db) => TableName {
                database: db.clone(),
                name: unquote(&name),
            },
            None => return Err(format!("{name:?} names no database: write database.{name}")),
        },
    };
    match captured.contains(&wanted) {
        true => Ok(vec![wanted]),
        false => Err(format!("table {wanted} is not one this stream captures")),
    }
}

/// One page of `table` after `after`, with the columns and the binlog
/// position of the snapshot it was read in.
async fn read_page(
    conn: &mut Conn,
    table: &TableName,
    after: Option<&[Value]>,
    filter: Option<Expr>,
) -> Result<Page, SourceError> {
    let at = snapshot::open(conn).await?;
    let read = async {
        // the columns as of the snapshot: a later ALTER fails the read
        // (the table's definition changed), which is tried again
        let shape = catalog::shape(conn, table).await?.ok_or_else(|| {
            SourceError::new(
                Failure::NotConfigured,
                format!("table {table} does not exist"),
            )
        })?;
        let (rows, more) =
            snapshot::page(conn, table, &shape, after, filter.as_ref(), PAGE_ROWS).await?;
        Ok::<_, SourceError>((shape, rows, more))
    };
    let read = read.await;
    conn.query_drop("COMMIT")
        .await
        .context("cannot end the page's snapshot")?;
    let (shape, rows, more) = read?;
    Ok(Page {
        at,
        shaped: Shaped::of(table, shape),
        table: table.clone(),
        rows,
        more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backfill_names_a_captured_table() {
        let t = |d: &str, n: &str| TableName {
            database: d.into(),
            name: n.into(),
        };
        let captured = vec![t("shop", "orders"), t("shop", "items")];
        let db = Some("shop".to_string());
        assert_eq!(
            backfill_tables(&captured, &db, None).unwrap(),
            captured.clone()
        );
        assert_eq!(
            backfill_tables(&captured, &db, Some("items".into())).unwrap(),
            vec![t("shop", "items")]
        );
        assert_eq!(
            backfill_tables(&captured, &None, Some("`shop`.`orders`".into())).unwrap(),
            vec![t("shop", "orders")]
        );
        let e = backfill_tables(&captured, &db, Some("other.x".into())).unwrap_err();
        assert_eq!(e, "table other.x is not one this stream captures");
    }
}
