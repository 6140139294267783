//! A table's snapshot copy as one query read to its end by a task of its
//! own, into pages, while the engine stages the pages before: the server
//! sends rows, this process turns them into record lines and the spool
//! takes them, all at once. Each page is the spool's record lines as they
//! will be kept (see `Chunk::kept`), after the table's scope and columns.

use abrq_core::Item;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Value as V};
use serde_json::{json, Value};

use super::super::catalog::Shape;
use super::super::config::TableName;
use super::super::row_line::RowLine;
use super::super::{snapshot, values};
use super::Shaped;
use crate::cdc::copy_task::{CopyTask, Last, Pages};
use crate::chunk::{Chunk, Limits};
use crate::error::SourceError;

/// One page of the copy: its chunk, where the copy stands after it, and
/// whether rows follow it.
pub struct Page {
    pub chunk: Chunk,
    pub after: Value,
    pub last: bool,
}

/// Where a table's copy starts.
pub enum From {
    /// After this key (the table has one).
    Key(Option<Vec<Value>>),
    /// After this many rows, in the snapshot's order (it has none).
    Count(u64),
}

impl Last for Page {
    fn is_last(&self) -> bool {
        self.last
    }
}

/// A table's copy in flight, on `conn`, which holds the copy's snapshot,
/// in pages of `limits`. Dropping it stops the copy.
pub type CopyOut = CopyTask<Conn, Page>;

/// Starts copying `table`.
pub fn start(conn: Conn, table: TableName, shaped: Shaped, from: From, limits: Limits) -> CopyOut {
    CopyTask::spawn(move |tx| read(conn, table, shaped, from, limits, tx))
}

/// Reads the copy to its end, a page at a time into `pages`; the
/// connection comes back when it is done.
async fn read(
    mut conn: Conn,
    table: TableName,
    shaped: Shaped,
    from: From,
    limits: Limits,
    pages: Pages<Page>,
) -> Result<Conn, SourceError> {
    let shape = shaped.shape.clone();
    let (sql, params, mut count) = match &from {
        From::Key(after) => {
            let (sql, params) = snapshot::keyset_sql(&table, &shape, after.as_deref(), None, None);
            (sql, params, None)
        }
        From::Count(done) => (
            snapshot::by_count_sql(&table, &shape, *done, None),
            Vec::new(),
            Some(*done),
        ),
    };
    let page_of = |shaped: &Shaped| Chunk {
        items: vec![
            Item::Table(shaped.table.table.clone()),
            Item::Schema {
                columns: shaped.table.declared.clone(),
            },
        ],
        ..Chunk::default()
    };
    let failed = |e| SourceError::from_client(format!("snapshot: cannot read {table}"), e);
    {
        let mut rows = conn
            .exec_iter(sql.as_str(), Params::Positional(params))
            .await
            .map_err(failed)?;
        let line = RowLine::new(&shape.columns);
        let mut page = page_of(&shaped);
        // the last row's values, for where the copy stands after it
        let mut last_row: Vec<V> = Vec::new();
        // a full page waits for the next row, so the last one is marked
        let mut full: Option<Page> = None;
        while let Some(row) = rows.next().await.map_err(failed)? {
            if let Some(done) = full.take() {
                pages.send(done).await?;
            }
            let vals = row.unwrap();
            let before = page.kept.len();
            line.write(&vals, &mut page.kept)
                .map_err(|e| e.context(&format!("snapshot of {table}")))?;
            page.records += 1;
            page.bytes += (page.kept.len() - before) as u64;
            if let Some(n) = &mut count {
                *n += 1;
            }
            last_row = vals;
            if page.is_full(limits) {
                let chunk = std::mem::replace(&mut page, page_of(&shaped));
                full = Some(Page {
                    chunk,
                    after: after(&shape, count, &last_row)?,
                    last: false,
                });
            }
        }
        drop(rows);
        let last = match full {
            Some(full) => Page { last: true, ..full },
            None => Page {
                after: match page.records {
                    0 => Value::Null,
                    _ => after(&shape, count, &last_row)?,
                },
                chunk: match page.records {
                    0 => Chunk::default(),
                    _ => page,
                },
                last: true,
            },
        };
        // a reader that stopped waiting has nothing left to hand on
        let _ = pages.send(last).await;
    }
    Ok(conn)
}

/// Where the copy stands after a row: its key, as the cursor keeps it,
/// or the rows copied so far (a keyless table).
fn after(shape: &Shape, count: Option<u64>, row: &[V]) -> Result<Value, SourceError> {
    if let Some(n) = count {
        return Ok(json!([{ "rows": n }]));
    }
    let key = shape.columns.iter().zip(row).filter(|(c, _)| c.key);
    let key: Result<Vec<Value>, SourceError> = key.map(|(c, v)| values::value(c, v)).collect();
    Ok(Value::Array(key?))
}
