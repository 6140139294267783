//! Backfill on demand while streaming goes on: watermark windows, as in
//! DBLog (arXiv:2010.12597). For each page of a table, in key order:
//!
//! 1. a low watermark goes into the WAL (`pg_logical_emit_message`, in
//!    its own transaction, so the slot sees it in commit order);
//! 2. the page is read (keyset by primary key, at the current state);
//! 3. a high watermark goes into the WAL.
//!
//! The stream goes on meanwhile. Every change to the table the stream
//! reads between the two watermarks drops its row from the page (the
//! change is newer than, or as new as, what the page read), and a
//! truncate drops the whole page; at the high
//! watermark the rest of the page joins the batch. So each row arrives
//! either as the page read it or through a later change, and no change is
//! overtaken by an older copy of its row. The page's last key goes into
//! the stream's cursor: a backfill goes on after a restart.

use std::collections::HashSet;

use abrq_core::{Item, TableRef};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::config::TableName;
use super::super::cursor::PgCursorSource;
use super::{setup, PgCdcSource};
use crate::chunk::{Chunk, Limits};
use crate::file::SourceError;

/// Rows per window: two watermark commits per page.
const PAGE: Limits = Limits {
    max_records: 2_000,
    max_bytes: 4 << 20,
};

/// The logical message prefix of abrq's watermarks.
pub const PREFIX: &str = "abrq.backfill";

/// A backfill as the stream's cursor keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staged {
    /// The table being read (`schema.name`) and its last staged page's
    /// cursor (none before the first page).
    table: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<String>,
    /// The tables after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rest: Vec<String>,
    #[serde(default)]
    rows: u64,
}

impl Staged {
    /// A backfill of `tables` (the first one after its row `after`): how
    /// a snapshot copy cut short goes on. None when there is no table.
    pub fn resume(tables: &[TableName], after: Option<String>) -> Option<Staged> {
        let (first, rest) = tables.split_first()?;
        Some(Staged {
            table: first.to_string(),
            after,
            rest: rest.iter().map(ToString::to_string).collect(),
            rows: 0,
        })
    }
}

pub struct Backfill {
    table: TableName,
    reader: PgCursorSource,
    key: Vec<String>,
    staged: Staged,
    window: Option<Window>,
}

/// One page between its watermarks.
struct Window {
    id: String,
    low_seen: bool,
    page: Chunk,
    /// Keys of rows the stream changed inside the window.
    touched: HashSet<String>,
    /// The table was emptied inside the window: the page is all stale.
    cleared: bool,
}

impl Backfill {
    /// A change the stream read: inside an open window, its row leaves
    /// the page.
    pub fn touched(&mut self, table: &TableRef, fields: &Map<String, Value>) {
        let Some(w) = self.window.as_mut().filter(|w| w.low_seen) else {
            return;
        };
        if table.schema.as_deref() == self.table.schema.as_deref() && table.name == self.table.name
        {
            w.touched.insert(key_of(fields, &self.key));
        }
    }
}

impl Backfill {
    /// A truncate the stream read: inside an open window, the whole page
    /// is older than it.
    pub fn truncated(&mut self, table: &TableRef) {
        let Some(w) = self.window.as_mut().filter(|w| w.low_seen) else {
            return;
        };
        if table.schema.as_deref() == self.table.schema.as_deref() && table.name == self.table.name
        {
            w.cleared = true;
        }
    }
}

fn key_of(fields: &Map<String, Value>, key: &[String]) -> String {
    let values: Vec<Option<&Value>> = key.iter().map(|k| fields.get(k)).collect();
    serde_json::to_string(&values).unwrap_or_default()
}

impl PgCdcSource {
    /// An operator asked for a backfill of `table` (None: every table).
    pub fn backfill(&mut self, table: Option<String>) {
        self.backfill_asked.push(table);
    }

    /// What status shows of backfills.
    pub(super) fn backfill_progress(&self) -> Value {
        let mut v = match &self.backfill {
            Some(b) => serde_json::json!({
                "state": "running",
                "table": b.staged.table,
                "rows": b.staged.rows,
                "tables_left": b.staged.rest.len(),
            }),
            None => serde_json::json!({"state": "idle"}),
        };
        v["asked"] = self.backfill_asked.len().into();
        if let Some(e) = &self.backfill_error {
            v["error"] = e.clone().into();
        }
        v
    }

    /// Takes up the backfill the cursor holds, or the next one asked for.
    /// A backfill that cannot start says why in status; streaming goes on.
    pub(super) async fn start_backfill(&mut self) {
        if self.backfill.is_some() || self.client.is_none() {
            return;
        }
        let staged = match self.position.backfill.clone() {
            Some(s) => s,
            None => {
                if self.backfill_asked.is_empty() {
                    return;
                }
                let asked = self.backfill_asked.remove(0);
                match self.backfill_tables(asked.as_deref()).await {
                    Ok(mut tables) => {
                        let first = tables.remove(0);
                        Staged {
                            table: first.to_string(),
                            after: None,
                            rest: tables.iter().map(ToString::to_string).collect(),
                            rows: 0,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "backfill refused");
                        self.backfill_error = Some(e);
                        return;
                    }
                }
            }
        };
        match self.backfill_reader(staged).await {
            Ok(b) => {
                tracing::info!(table = %b.table, rows = b.staged.rows, "backfill reads");
                self.position.backfill = Some(b.staged.clone());
                self.backfill_error = None;
                self.backfill = Some(b);
            }
            Err(e) => {
                tracing::warn!(error = %e, "backfill cannot read");
                self.backfill_error = Some(e.to_string());
                self.position.backfill = None;
            }
        }
    }

    /// The captured tables a backfill of `asked` reads, in order.
    async fn backfill_tables(&mut self, asked: Option<&str>) -> Result<Vec<TableName>, String> {
        let Some(name) = asked else {
            return match self.tables.is_empty() {
                true => Err("the stream captures no table yet".into()),
                false => Ok(self.tables.clone()),
            };
        };
        let parsed = TableName::parse(name)?;
        let conn = self.catalog().await.map_err(|e| e.to_string())?;
        let found = setup::resolve_table(conn, &parsed).await?;
        match self.tables.contains(&found) {
            true => Ok(vec![found]),
            false => Err(format!("table {found} is not one this stream captures")),
        }
    }

    async fn backfill_reader(&mut self, staged: Staged) -> Result<Backfill, SourceError> {
        let table = TableName::parse(&staged.table).map_err(|e| self.fail("backfill", e))?;
        let reader = self.copier(&table, staged.after.as_deref(), None).await?;
        let key = reader.key_columns();
        Ok(Backfill {
            table,
            reader,
            key,
            staged,
            window: None,
        })
    }

    async fn emit(&mut self, text: String) -> Result<(), SourceError> {
        let conn = self.catalog().await?;
        let done = sqlx::query("SELECT pg_logical_emit_message(true, $1, $2)::text")
            .bind(PREFIX)
            .bind(&text)
            .execute(&mut *conn)
            .await;
        done.map(drop)
            .map_err(|e| self.fail("cannot write a backfill watermark", e))
    }

    /// Between source transactions: reads the next page between two
    /// watermarks, unless one is open already.
    pub(super) async fn open_window(&mut self) -> Result<(), SourceError> {
        let Some(b) = self.backfill.as_mut() else {
            return Ok(());
        };
        if b.window.is_some() {
            return Ok(());
        }
        let id = format!(
            "{:x}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            b.staged.rows
        );
        self.emit(format!("low:{id}")).await?;
        let b = self.backfill.as_mut().expect("checked above");
        let page = b.reader.read_chunk(PAGE).await?;
        b.window = Some(Window {
            id: id.clone(),
            low_seen: false,
            page,
            touched: HashSet::new(),
            cleared: false,
        });
        self.emit(format!("high:{id}")).await
    }

    /// A watermark read from the stream: the low one opens the window, the
    /// high one adds what is left of the page to `chunk`.
    pub(super) async fn watermark(
        &mut self,
        content: &[u8],
        chunk: &mut Chunk,
    ) -> Result<(), SourceError> {
        let text = String::from_utf8_lossy(content);
        let Some((kind, id)) = text.split_once(':') else {
            return Ok(());
        };
        let Some(b) = self.backfill.as_mut() else {
            return Ok(()); // a window from before a restart
        };
        let Some(w) = b.window.as_mut().filter(|w| w.id == id) else {
            return Ok(());
        };
        if kind == "low" {
            w.low_seen = true;
            return Ok(());
        }
        let w = b.window.take().expect("matched above");
        let total = w.page.records.max(1);
        let mut kept = 0u64;
        for item in w.page.items {
            if let Item::Record(r) = &item {
                if w.cleared || w.touched.contains(&key_of(&r.fields, &b.key)) {
                    continue;
                }
                kept += 1;
            }
            chunk.items.push(item);
        }
        chunk.records += kept;
        chunk.bytes += w.page.bytes * kept / total;
        // the page brought its own table scope
        self.scope_in_chunk = None;
        b.staged.rows += kept;
        if w.page.cursor.is_some() {
            b.staged.after = w.page.cursor;
        }
        if w.page.at_end {
            tracing::info!(table = %b.table, rows = b.staged.rows, "backfill of a table done");
            let mut rest = std::mem::take(&mut b.staged.rest);
            let rows = b.staged.rows;
            self.backfill = None;
            self.position.backfill = None;
            if !rest.is_empty() {
                let next = Staged {
                    table: rest.remove(0),
                    after: None,
                    rest,
                    rows,
                };
                self.position.backfill = Some(next);
                self.start_backfill().await;
            }
        } else {
            self.position.backfill = Some(b.staged.clone());
        }
        // a valid cursor now: a restart reads the watermark again and
        // ignores it, and goes on after this page
        chunk.cursor = Some(self.cursor_text());
        Ok(())
    }
}
