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
//! truncate drops the whole page; at the high watermark the rest of the
//! page joins the stream. So each row arrives either as the page read it
//! or through a later change, and no change is overtaken by an older copy
//! of its row. The page's last key goes into the stream's cursor: a
//! backfill goes on after a restart.

use std::collections::HashSet;

use abrq_core::{Item, TableRef};
use pgwire_replication::Lsn;
use serde_json::{Map, Value};

use super::super::config::TableName;
use super::super::cursor::PgCursorSource;
use super::pgoutput::Session;
use super::{setup, PgCdc};
use crate::cdc::deadline::{self, within};
use crate::cdc::{Ctx, Staged};
use crate::chunk::{Chunk, Limits};
use crate::error::{Context as _, SourceError};
use crate::source::Source as _;

/// Rows per window: two watermark commits per page.
const PAGE: Limits = Limits {
    max_records: 2_000,
    max_bytes: 4 << 20,
};

/// The logical message prefix of abrq's watermarks.
pub const PREFIX: &str = "abrq.backfill";

/// The backfill reading now: its table, reader and key, and the page
/// between its watermarks.
pub struct Backfill {
    table: TableName,
    reader: PgCursorSource,
    key: Vec<String>,
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
    fn is(&self, table: &TableRef) -> bool {
        table.schema.as_deref() == self.table.schema.as_deref() && table.name == self.table.name
    }

    /// A change the stream read: inside an open window, its row leaves
    /// the page.
    pub fn touched(&mut self, table: &TableRef, fields: &Map<String, Value>) {
        if !self.is(table) {
            return;
        }
        if let Some(w) = self.window.as_mut().filter(|w| w.low_seen) {
            w.touched.insert(key_of(fields, &self.key));
        }
    }

    /// A truncate the stream read: inside an open window, the whole page
    /// is older than it.
    pub fn truncated(&mut self, table: &TableRef) {
        if !self.is(table) {
            return;
        }
        if let Some(w) = self.window.as_mut().filter(|w| w.low_seen) {
            w.cleared = true;
        }
    }
}

fn key_of(fields: &Map<String, Value>, key: &[String]) -> String {
    let values: Vec<Option<&Value>> = key.iter().map(|k| fields.get(k)).collect();
    serde_json::to_string(&values).unwrap_or_default()
}

impl PgCdc {
    /// Takes up the backfill the cursor holds, or the next one asked for.
    /// A backfill that cannot start says why in status; streaming goes on.
    pub(super) async fn start_backfill(&mut self, session: &mut Session, ctx: &mut Ctx<'_, Lsn>) {
        if session.backfill.is_some() {
            return;
        }
        let staged = match ctx.cursor.backfill.clone() {
            Some(s) => s,
            None => {
                let Some(asked) = ctx.backfills.next_asked(&mut ctx.cursor.taken) else {
                    return;
                };
                match self.backfill_tables(asked.table.as_deref()).await {
                    Ok(tables) => match Staged::of(&tables, None) {
                        Some(s) => Staged {
                            filter: asked.filter,
                            ..s
                        },
                        None => return,
                    },
                    Err(e) => return ctx.backfills.refused(e.to_string()),
                }
            }
        };
        match self.backfill_reader(&staged).await {
            Ok(b) => {
                tracing::info!(table = %b.table, rows = staged.rows, "backfill reads");
                ctx.cursor.backfill = Some(staged);
                ctx.backfills.started();
                session.backfill = Some(b);
            }
            Err(e) => {
                tracing::warn!(error = %e, "backfill cannot read");
                ctx.backfills.refused(e.to_string());
                ctx.cursor.backfill = None;
            }
        }
    }

    /// The captured tables a backfill of `asked` reads, in order.
    async fn backfill_tables(&mut self, asked: Option<&str>) -> Result<Vec<String>, SourceError> {
        let Some(name) = asked else {
            return match self.tables.is_empty() {
                true => Err(SourceError::new(
                    crate::error::Failure::NotConfigured,
                    "the stream captures no table yet",
                )),
                false => Ok(self.table_names()),
            };
        };
        let parsed = TableName::parse(name)
            .map_err(|e| SourceError::new(crate::error::Failure::Invalid, e))?;
        let conn = self.catalog().await?;
        let found = setup::resolve_table(conn, &parsed).await?;
        match self.tables.contains(&found) {
            true => Ok(vec![found.to_string()]),
            false => Err(SourceError::new(
                crate::error::Failure::NotConfigured,
                format!("table {found} is not one this stream captures"),
            )),
        }
    }

    async fn backfill_reader(&mut self, staged: &Staged) -> Result<Backfill, SourceError> {
        let table = self.table_named(&staged.table).context("backfill")?;
        let after = staged.after.as_ref().and_then(Value::as_str);
        let filter = staged.filter()?;
        let reader = self.copier(&table, after, filter).await?;
        let key = reader.key_columns();
        Ok(Backfill {
            table,
            reader,
            key,
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
        done.map(drop).context("cannot write a backfill watermark")
    }

    /// Between source transactions: reads the next page between two
    /// watermarks, unless one is open already.
    pub(super) async fn open_window(
        &mut self,
        session: &mut Session,
        ctx: &mut Ctx<'_, Lsn>,
    ) -> Result<(), SourceError> {
        let Some(b) = session.backfill.as_ref() else {
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
            ctx.cursor.backfill.as_ref().map_or(0, |s| s.rows)
        );
        self.emit(format!("low:{id}")).await?;
        let Some(b) = session.backfill.as_mut() else {
            return Ok(());
        };
        let page = within(
            deadline::PAGE,
            "reading a backfill page",
            b.reader.read(PAGE),
        )
        .await?;
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
    /// high one gives what is left of the page, to join the stream here.
    pub(super) async fn watermark(
        &mut self,
        session: &mut Session,
        content: &[u8],
        ctx: &mut Ctx<'_, Lsn>,
    ) -> Result<Option<Chunk>, SourceError> {
        let text = String::from_utf8_lossy(content);
        let Some((kind, id)) = text.split_once(':') else {
            return Ok(None);
        };
        // a window from before a restart has no backfill or another id
        let Some(b) = session.backfill.as_mut() else {
            return Ok(None);
        };
        let Some(w) = b.window.as_mut().filter(|w| w.id == id) else {
            return Ok(None);
        };
        if kind == "low" {
            w.low_seen = true;
            return Ok(None);
        }
        let Some(w) = b.window.take() else {
            return Ok(None);
        };
        let total = w.page.records.max(1);
        let mut out = Chunk::default();
        let mut kept = 0u64;
        for item in w.page.items {
            if let Item::Record(r) = &item {
                if w.cleared || w.touched.contains(&key_of(&r.fields, &b.key)) {
                    continue;
                }
                kept += 1;
            }
            out.items.push(item);
        }
        out.records = kept;
        out.bytes = w.page.bytes * kept / total;
        let Some(mut staged) = ctx.cursor.backfill.take() else {
            return Ok(Some(out));
        };
        staged.rows += kept;
        if let Some(after) = w.page.cursor {
            staged.after = Some(Value::String(after));
        }
        if w.page.at_end {
            tracing::info!(table = %b.table, rows = staged.rows, "backfill of a table done");
            session.backfill = None;
            if staged.next_table() {
                ctx.cursor.backfill = Some(staged);
                self.start_backfill(session, ctx).await;
            }
        } else {
            ctx.cursor.backfill = Some(staged);
        }
        Ok(Some(out))
    }
}
