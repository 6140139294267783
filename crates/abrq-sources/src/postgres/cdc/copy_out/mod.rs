//! A table's snapshot copy as one `COPY (SELECT ...) TO STDOUT`, read by
//! a task of its own into pages while the engine stages the pages before:
//! the server renders rows, this process turns them into record lines
//! and the spool takes them, all at once. Each page is the spool's record
//! lines as they will be kept (see `Chunk::kept`), and its last row's key
//! is the copy's position. A large table is copied in parts (`split.rs`),
//! one `COPY` for each range of its key on a connection of its own, all
//! on the one snapshot; each part keeps its own position.

mod plan;
mod row;
pub mod split;

use std::sync::Arc;

use futures::StreamExt as _;
use sqlx::postgres::PgConnection;

use self::plan::Plan;
use super::super::config::TableName;
use super::super::cursor::Position;
use crate::cdc::copy_task::{CopyTask, Last, Pages};
use crate::cdc::cursor::Part;
use crate::chunk::{Chunk, Limits};
use crate::error::{Context as _, Failure, SourceError};

/// One page of the copy.
struct Page {
    chunk: Chunk,
    /// The part it is of (its index in the copy's parts).
    part: usize,
    /// The page's last row, raw, for its position.
    last_row: Vec<u8>,
    /// No rows of its part follow it.
    last: bool,
}

/// A table's copy in flight. Dropping it stops the copy (and closes its
/// connections).
pub struct CopyOut {
    plan: Arc<Plan>,
    task: CopyTask<PgConnection, Page>,
}

/// A page handed on: its chunk (scope, schema, lines, and as its cursor
/// the key of its last row, none when it is empty), its part, and whether
/// its part and the table end with it.
pub struct CopiedPage {
    pub chunk: Chunk,
    /// Its index in the copy's parts (0 for a copy not in parts).
    pub part: usize,
    /// Its part has no more rows.
    pub part_done: bool,
    /// The table has no more rows.
    pub done: bool,
}

impl CopyOut {
    /// Starts copying `table`'s rows after `after`, or, when `parts` are
    /// given, each part not done on a connection of its own (from
    /// `conns`, which hold the copy's snapshot; the first reads the
    /// catalog), in pages of `limits`.
    pub async fn start(
        mut conns: Vec<PgConnection>,
        table: &TableName,
        key: &[String],
        after: Option<&Position>,
        parts: &[Part],
        limits: Limits,
    ) -> Result<CopyOut, SourceError> {
        let plan = Arc::new(Plan::read(&mut conns[0], table, key).await?);
        let mut sqls = Vec::new();
        for (i, part) in parts.iter().enumerate().filter(|(_, p)| !p.done) {
            let after = Position::stored(part.after.as_ref())?;
            sqls.push((i, plan.sql(after.as_ref(), Some(&part.range))));
        }
        if parts.is_empty() {
            sqls.push((0, plan.sql(after, None)));
        }
        tracing::info!(%table, key = ?key, parts = parts.len(), resume = after.is_some(), "snapshot copy starts");
        let reads: Vec<_> = conns
            .into_iter()
            .zip(sqls)
            .map(|(conn, (part, sql))| {
                let plan = plan.clone();
                move |pages| read(conn, plan, sql, part, limits, pages)
            })
            .collect();
        Ok(CopyOut {
            plan,
            task: CopyTask::spawn_all(reads),
        })
    }

    /// The next page: `None` once the table's last page was handed on.
    pub async fn next(&mut self) -> Result<Option<CopiedPage>, SourceError> {
        let Some(page) = self.task.next().await? else {
            return Ok(None);
        };
        let mut chunk = page.chunk;
        if chunk.records > 0 {
            let texts = row::key_texts(&self.plan, &page.last_row).map_err(|e| self.failure(e))?;
            let position = self.plan.position(texts);
            chunk.close_page(self.plan.table.clone(), self.plan.schema.clone(), &position);
        }
        Ok(Some(CopiedPage {
            chunk,
            part: page.part,
            part_done: page.last,
            done: self.task.is_done(),
        }))
    }

    /// The connections back once the table's last page was handed on,
    /// for the next table on the same snapshot.
    pub async fn into_connections(self) -> Result<Vec<PgConnection>, SourceError> {
        self.task.into_connections().await
    }

    fn failure(&self, e: String) -> SourceError {
        SourceError::new(
            Failure::Decode,
            format!("snapshot of {}: {e}", self.plan.table),
        )
    }
}

impl Last for Page {
    fn is_last(&self) -> bool {
        self.last
    }
}

/// Reads the copy `sql` of `part` to its end, a page at a time into
/// `pages`; the connection comes back when it is done.
async fn read(
    mut conn: PgConnection,
    plan: Arc<Plan>,
    sql: String,
    part: usize,
    limits: Limits,
    pages: Pages<Page>,
) -> Result<PgConnection, SourceError> {
    {
        let mut stream = conn
            .copy_out_raw(&sql)
            .await
            .context("snapshot: cannot start the copy")?;
        let mut page = Page::new(part);
        // a full page waits for the next row, so the last one is marked
        let mut full: Option<Page> = None;
        let mut carry = Vec::new();
        let mut scratch = Vec::new();
        while let Some(data) = stream.next().await {
            let data = data.context("snapshot: cannot read the copy")?;
            // the server sends a row per message; a row split across
            // messages is put together
            let bytes: &[u8] = match carry.is_empty() {
                true => &data,
                false => {
                    carry.extend_from_slice(&data);
                    &carry
                }
            };
            let mut rest = bytes;
            while let Some(end) = memchr::memchr(b'\n', rest) {
                let row = &rest[..end];
                rest = &rest[end + 1..];
                if let Some(done) = full.take() {
                    let room = done.chunk.kept.len();
                    pages.send(done).await?;
                    page.chunk.kept.reserve(room);
                }
                let before = page.chunk.kept.len();
                row::write_line(&plan, row, &mut page.chunk.kept, &mut scratch).map_err(|e| {
                    SourceError::new(Failure::Decode, format!("snapshot of {}: {e}", plan.table))
                })?;
                page.chunk.records += 1;
                page.chunk.bytes += (page.chunk.kept.len() - before) as u64;
                page.last_row.clear();
                page.last_row.extend_from_slice(row);
                if page.chunk.is_full(limits) {
                    full = Some(std::mem::replace(&mut page, Page::new(part)));
                }
            }
            let rest = rest.to_vec();
            carry = rest;
        }
        if !carry.is_empty() {
            return Err(SourceError::new(
                Failure::Decode,
                format!("snapshot of {}: the copy ends inside a row", plan.table),
            ));
        }
        let mut last = full.unwrap_or(page);
        last.last = true;
        // a reader that stopped waiting has nothing left to hand on
        let _ = pages.send(last).await;
    }
    Ok(conn)
}

impl Page {
    fn new(part: usize) -> Page {
        Page {
            chunk: Chunk::default(),
            part,
            last_row: Vec::new(),
            last: false,
        }
    }
}
