//! `mode = "cursor"`: polls a table in the order of a monotonic column
//! with the primary key as tie-break, a page at a time, keeping the last
//! row's (cursor, key) as the stream's cursor. Each chunk starts with its
//! table's scope and the catalog's columns, as the binlog source's do.

use abrq_core::{Item, Record, TableRef};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Value as V};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::catalog::{self, Shape};
use super::config::{quote, MysqlSettings, TableName};
use super::values;
use crate::cdc::deadline::{self, within};
use crate::chunk::record_bytes;
use crate::chunk::{Chunk, Limits};
use crate::error::{Context as _, Failure, SourceError};
use crate::progress::Progress;
use crate::source::{stored_cursor, Pace, Source};

pub struct MysqlCursorSource {
    settings: MysqlSettings,
    table: TableName,
    cursor: String,
    conn: Option<Conn>,
    shape: Option<Shape>,
    position: Option<Position>,
}

/// The last staged row's cursor value and key, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Position {
    #[serde(rename = "c")]
    cursor: Value,
    #[serde(rename = "k")]
    key: Vec<Value>,
}

impl MysqlCursorSource {
    pub fn new(settings: MysqlSettings, cursor: Option<&str>) -> Result<Self, SourceError> {
        let position = stored_cursor(cursor, || settings.describe())?;
        let (table, column) = (settings.tables[0].clone(), settings.cursor.clone());
        Ok(MysqlCursorSource {
            table,
            cursor: column.unwrap_or_default(),
            settings,
            conn: None,
            shape: None,
            position,
        })
    }

    /// Reads the table's columns; the key breaks ties after the cursor.
    async fn refresh(&mut self) -> Result<(Shape, Vec<String>), SourceError> {
        if self.conn.is_none() {
            let opts = self.settings.opts();
            let conn = within(deadline::CONNECT, "connecting", async {
                Conn::new(opts).await.context("cannot connect")
            })
            .await?;
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let shape = catalog::shape(conn, &self.table)
            .await
            .context("catalog")?
            .ok_or_else(|| {
                SourceError::new(
                    Failure::NotConfigured,
                    format!("catalog: table {} does not exist", self.table),
                )
            })?;
        if !shape.columns.iter().any(|c| c.name == self.cursor) {
            return Err(SourceError::new(
                Failure::NotConfigured,
                format!(
                    "cursor: cursor column {:?} is not a column of {}",
                    self.cursor, self.table
                ),
            ));
        }
        let key: Vec<String> = shape
            .columns
            .iter()
            .filter(|c| c.key && c.name != self.cursor)
            .map(|c| c.name.clone())
            .collect();
        if !shape.columns.iter().any(|c| c.key) {
            return Err(SourceError::new(
                Failure::NoKey,
                format!(
                    "cursor: {} has no primary key to break ties between rows",
                    self.table
                ),
            ));
        }
        if self.shape.as_ref() != Some(&shape) {
            self.shape = Some(shape.clone());
        }
        Ok((shape, key))
    }

    async fn read_page(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let (shape, key) = self.refresh().await?;
        let order: Vec<String> = std::iter::once(&self.cursor)
            .chain(key.iter())
            .map(|c| quote(c))
            .collect();
        let cols: Vec<String> = shape.columns.iter().map(|c| quote(&c.name)).collect();
        let mut sql = format!(
            "SELECT {} FROM {} WHERE {} IS NOT NULL",
            cols.join(", "),
            self.table.quoted(),
            quote(&self.cursor)
        );
        let mut params: Vec<V> = Vec::new();
        if let Some(p) = &self.position {
            let marks = vec!["?"; order.len()].join(", ");
            sql.push_str(&format!(" AND ({}) > ({marks})", order.join(", ")));
            let col = |name: &String| shape.columns.iter().find(|c| c.name == *name);
            params.push(values::param(col(&self.cursor), &p.cursor));
            params.extend(
                key.iter()
                    .zip(&p.key)
                    .map(|(k, v)| values::param(col(k), v)),
            );
        }
        let want = limits.max_records.max(1);
        sql.push_str(&format!(" ORDER BY {} LIMIT {want}", order.join(", ")));
        let conn = self.conn.as_mut().expect("connected in refresh");
        let rows: Vec<mysql_async::Row> = conn
            .exec(&sql, Params::Positional(params))
            .await
            .context("cannot read a page")?;
        let mut chunk = Chunk {
            at_end: (rows.len() as u64) < want,
            ..Chunk::default()
        };
        let mut last = None;
        for r in rows {
            let vals = r.unwrap();
            let fields = values::row(&shape.columns, &vals)?;
            last = Some(Position {
                cursor: fields.get(&self.cursor).cloned().unwrap_or(Value::Null),
                key: key
                    .iter()
                    .map(|k| fields.get(k).cloned().unwrap_or(Value::Null))
                    .collect(),
            });
            chunk.records += 1;
            chunk.bytes += record_bytes(&fields);
            chunk.items.push(Item::Record(Record::insert(fields)));
        }
        if let Some(p) = last {
            // a page must move past the position it was read after: one
            // that does not (a value that does not round-trip as a
            // parameter) would be read again forever
            if self.position.as_ref() == Some(&p) {
                return Err(SourceError::new(
                    Failure::Decode,
                    format!(
                        "cannot page {} by ({}, {}): the page after {} did not move past it",
                        self.table,
                        self.cursor,
                        key.join(", "),
                        serde_json::json!({"cursor": p.cursor, "key": p.key})
                    ),
                ));
            }
            let table = TableRef::new(Some(&self.table.database), &self.table.name);
            chunk.close_page(table, shape.declared.clone(), &p);
            self.position = Some(p);
        }
        Ok(chunk)
    }
}

#[async_trait::async_trait]
impl Source for MysqlCursorSource {
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let result = within(deadline::PAGE, "reading a page", self.read_page(limits)).await;
        if result.is_err() {
            self.conn = None;
        }
        result.map_err(|e| e.at(self.settings.describe()))
    }

    fn progress(&self) -> Option<Progress> {
        Some(Progress {
            position: serde_json::json!({
                "table": self.table.to_string(),
                "cursor": self.cursor,
                "last": self.position.as_ref().map(|p| serde_json::json!({"cursor": p.cursor, "key": p.key})),
            }),
            lag_seconds: None,
            lag_bytes: None,
        })
    }

    /// For `abrq check`.
    async fn check(&mut self) -> Result<String, SourceError> {
        let refreshed = self.refresh().await;
        let (shape, key) = refreshed.map_err(|e| e.at(self.settings.describe()))?;
        Ok(format!(
            "{} columns, read in order of {} then ({})",
            shape.columns.len(),
            self.cursor,
            key.join(", ")
        ))
    }

    /// A page after the last row, then again after `poll_interval`.
    fn pace(&self) -> Pace {
        Pace::forever(self.settings.poll_interval)
    }

    fn describe(&self) -> String {
        self.settings.describe()
    }
}
