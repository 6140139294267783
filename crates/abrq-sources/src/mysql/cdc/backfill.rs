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

use abrq_core::{Item, Record, TableRef};
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::catalog::{self, Shape};
use super::super::config::TableName;
use super::super::snapshot;
use super::MysqlCdcSource;
use crate::chunk::Chunk;
use crate::file::SourceError;

/// Rows per page: one snapshot transaction each.
const PAGE_ROWS: u64 = 2_000;

/// A backfill as the stream's cursor keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Staged {
    /// The table being read (`database.name`) and the key of its last
    /// staged row (none before the first page).
    pub table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<Value>>,
    /// The tables after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rest: Vec<String>,
    #[serde(default)]
    pub rows: u64,
}

impl Staged {
    /// A backfill of `tables`, the first one after its row `after`.
    pub fn of(tables: &[TableName], after: Option<Vec<Value>>) -> Option<Staged> {
        let (first, rest) = tables.split_first()?;
        Some(Staged {
            table: first.to_string(),
            after,
            rest: rest.iter().map(ToString::to_string).collect(),
            rows: 0,
        })
    }
}

/// A page read at binlog position `at`, waiting for the stream to get there.
pub(super) struct Page {
    at: (String, u64),
    table: TableName,
    shape: Shape,
    rows: Vec<Map<String, Value>>,
    more: bool,
}

/// Binlog files are `base.NNNNNN`: ordered by their number.
fn file_order(a: &str, b: &str) -> Ordering {
    let num = |f: &str| f.rsplit_once('.').and_then(|(_, n)| n.parse::<u64>().ok());
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

impl MysqlCdcSource {
    /// An operator asked for a backfill of `table` (None: every table).
    pub fn backfill(&mut self, table: Option<String>) {
        self.backfill_asked.push(table);
    }

    /// What status shows of backfills.
    pub(super) fn backfill_progress(&self) -> Value {
        let staged = self.position.as_ref().and_then(|p| p.backfill.as_ref());
        let mut v = match staged {
            Some(b) => serde_json::json!({
                "state": "running",
                "table": b.table,
                "rows": b.rows,
                "tables_left": b.rest.len(),
            }),
            None => serde_json::json!({"state": "idle"}),
        };
        v["asked"] = self.backfill_asked.len().into();
        if let Some(e) = &self.backfill_error {
            v["error"] = e.clone().into();
        }
        v
    }

    /// Takes up the next backfill asked for when none runs. One that
    /// cannot start says why in status; streaming goes on.
    fn start_backfill(&mut self) {
        let Some(p) = self.position.as_mut() else {
            return;
        };
        if p.backfill.is_some() || self.backfill_asked.is_empty() {
            return;
        }
        let asked = self.backfill_asked.remove(0);
        match backfill_tables(&self.settings.tables, &self.settings.database, asked) {
            Ok(tables) => {
                p.backfill = Staged::of(&tables, None);
                self.backfill_error = None;
                tracing::info!(tables = tables.len(), "backfill starts");
            }
            Err(e) => {
                tracing::warn!(error = %e, "backfill refused");
                self.backfill_error = Some(e);
            }
        }
    }

    /// Reads the backfill's next page in a snapshot of its own, unless one
    /// waits already.
    pub(super) async fn take_page(&mut self) -> Result<(), SourceError> {
        self.start_backfill();
        if self.page.is_some() {
            return Ok(());
        }
        let Some(staged) = self.position.as_ref().and_then(|p| p.backfill.clone()) else {
            return Ok(());
        };
        let table = match self
            .settings
            .tables
            .iter()
            .find(|t| t.to_string() == staged.table)
        {
            Some(t) => t.clone(),
            None => {
                // the config no longer captures it: go on with the rest
                self.finish_table();
                return Ok(());
            }
        };
        if self.backfill_conn.is_none() {
            let conn = Conn::new(self.settings.opts())
                .await
                .map_err(|e| self.fail("backfill cannot connect", e))?;
            self.backfill_conn = Some(conn);
        }
        let conn = self.backfill_conn.as_mut().expect("connected above");
        let page = read_page(conn, &table, staged.after.as_deref()).await;
        match page {
            Ok(p) => {
                self.page = Some(p);
                Ok(())
            }
            Err(e) => {
                self.backfill_conn = None;
                Err(self.fail("backfill", e))
            }
        }
    }

    /// Whether the stream has read the binlog up to `at`.
    fn reached(&self, at: &(String, u64)) -> bool {
        match file_order(&self.file, &at.0) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => self.read_pos >= at.1,
        }
    }

    /// Between source transactions: when the stream has reached the
    /// waiting page's position, the page joins `chunk` there. True when
    /// it did.
    pub(super) fn place_page(&mut self, chunk: &mut Chunk) -> bool {
        if self.txn.open || !self.page.as_ref().is_some_and(|p| self.reached(&p.at)) {
            return false;
        }
        let page = self.page.take().expect("checked above");
        let last = page.rows.last().map(|r| snapshot::key_of(&page.shape, r));
        if !page.rows.is_empty() {
            chunk.items.push(Item::Table(TableRef::new(
                Some(&page.table.database),
                &page.table.name,
            )));
            chunk.items.push(Item::Schema {
                columns: page.shape.declared.clone(),
            });
        }
        let n = page.rows.len() as u64;
        for fields in page.rows {
            chunk.records += 1;
            chunk.bytes += serde_json::to_vec(&fields).map_or(0, |v| v.len() as u64);
            chunk.items.push(Item::Record(Record::insert(fields)));
        }
        // the stream's next change of any table says its scope and its
        // (possibly newer) columns again
        self.scope_in_chunk = None;
        self.declared_in_chunk.retain(|t| *t != page.table);
        let p = self.position.as_mut().expect("a backfill has a position");
        let b = p.backfill.as_mut().expect("a page has its backfill");
        b.rows += n;
        if last.is_some() {
            b.after = last;
        }
        if !page.more {
            tracing::info!(table = %page.table, rows = b.rows, "backfill of a table done");
            self.finish_table();
        }
        chunk.cursor = self.cursor_text(0);
        true
    }

    /// The backfill's current table is done: the next one, or the end.
    fn finish_table(&mut self) {
        let Some(p) = self.position.as_mut() else {
            return;
        };
        let Some(b) = p.backfill.as_mut() else {
            return;
        };
        if b.rest.is_empty() {
            tracing::info!(rows = b.rows, "backfill done");
            p.backfill = None;
        } else {
            b.table = b.rest.remove(0);
            b.after = None;
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
) -> Result<Page, String> {
    let at = snapshot::open(conn).await?;
    let read = async {
        // the columns as of the snapshot: a later ALTER fails the read
        // (the table's definition changed), which is tried again
        let shape = catalog::shape(conn, table)
            .await?
            .ok_or_else(|| format!("table {table} does not exist"))?;
        let (rows, more) = snapshot::page(conn, table, &shape, after, PAGE_ROWS).await?;
        Ok::<_, String>((shape, rows, more))
    };
    let read = read.await;
    conn.query_drop("COMMIT")
        .await
        .map_err(|e| format!("cannot end the page's snapshot: {e}"))?;
    let (shape, rows, more) = read?;
    Ok(Page {
        at,
        table: table.clone(),
        shape,
        rows,
        more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binlog_files_order_by_number() {
        assert_eq!(file_order("b.000009", "b.000010"), Ordering::Less);
        assert_eq!(file_order("b.999999", "b.1000000"), Ordering::Less);
        assert_eq!(file_order("b.000010", "b.000010"), Ordering::Equal);
    }

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
