//! `mode = "cursor"`: reads a table or view in the order of a monotonic
//! column with the primary key as tie-break, a page at a time, and keeps
//! the last row's (cursor, key) as the stream's cursor. A page is one
//! keyset query, so each costs an index range scan however far the
//! stream has come.
//!
//! Rows are rendered by PostgreSQL itself (`row_to_json`), so every type
//! arrives as its own JSON form; `numeric` is read as text, since a JSON
//! number would lose its digits. Each chunk starts with its table's scope
//! and a schema
//! instruction that declares every column's type as the catalog spells it
//! (the key columns marked), so every batch describes itself: a
//! destination added later, or a replayed dead letter, creates the same
//! table the first batch did.

use abrq_core::{Item, Record, TableRef};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::postgres::PgConnection;
use sqlx::Connection;

use super::catalog;
use super::config::{quote, PostgresSettings};
use crate::cdc::deadline::{self, within};
use crate::chunk::record_bytes;
use crate::chunk::{Chunk, Limits};
use crate::error::{Context as _, Failure, SourceError};
use crate::filter::Dialect;
use crate::progress::Progress;
use crate::source::{stored_cursor, Pace, Source};

/// The cursor a snapshot copy reads a table without a key by: the row's
/// physical place, stable while the copy's snapshot holds the table under
/// `ACCESS SHARE` (nothing can move a row it sees).
pub(crate) const PHYSICAL: &str = "ctid";

/// Where the stream stands: the last staged row's cursor column and
/// tie-break key, as PostgreSQL's text forms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Position {
    #[serde(rename = "c")]
    pub cursor: String,
    #[serde(rename = "k")]
    pub key: Vec<String>,
}

impl Position {
    /// A copy's stored key (its text, as the copy's cursor keeps it), if
    /// there is one.
    pub(crate) fn stored(after: Option<&Value>) -> Result<Option<Position>, SourceError> {
        match after.and_then(Value::as_str) {
            Some(text) => Ok(Some(crate::source::parse_cursor(text)?)),
            None => Ok(None),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Column {
    name: String,
    /// `format_type` of the column: what a cast and a destination take.
    ty: String,
    /// Read as text (`numeric`, and `numeric[]` as `text[]`): its JSON
    /// number would lose digits.
    as_text: bool,
    /// Its `attnum`: the column's identity across renames.
    number: i64,
}

/// The relation's columns as last read, and the page query built on them.
#[derive(Debug, Clone)]
struct Shape {
    columns: Vec<Column>,
    /// The tie-break: key columns other than the cursor, in key order.
    key: Vec<String>,
    /// Every key column, the cursor among them where it is one.
    key_all: Vec<String>,
    first_page: String,
    next_page: String,
    schema: Map<String, Value>,
}

pub struct PgCursorSource {
    settings: PostgresSettings,
    conn: Option<PgConnection>,
    position: Option<Position>,
    shape: Option<Shape>,
    /// Stage pages as the server rendered them (see `Chunk::kept`); a
    /// backfill parses them, to hold them against the stream.
    keep_lines: bool,
}

impl PgCursorSource {
    pub fn new(settings: PostgresSettings, cursor: Option<&str>) -> Result<Self, SourceError> {
        let position = stored_cursor(cursor, || settings.describe())?;
        Ok(PgCursorSource {
            settings,
            conn: None,
            position,
            shape: None,
            keep_lines: true,
        })
    }

    /// Pages as parsed items, never kept lines.
    pub fn parsed(mut self) -> Self {
        self.keep_lines = false;
        self
    }

    /// The columns that order the rows after the cursor (the key).
    pub fn key_columns(&self) -> Vec<String> {
        self.settings.primary_key.clone()
    }

    async fn connect(&mut self) -> Result<(), SourceError> {
        if self.conn.is_none() {
            let options = self.settings.connect_options();
            let conn = within(deadline::CONNECT, "connecting", async {
                PgConnection::connect_with(&options)
                    .await
                    .context("cannot connect")
            })
            .await
            .map_err(|e| e.at(self.settings.describe()))?;
            self.conn = Some(conn);
        }
        Ok(())
    }

    async fn read_page(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        self.refresh_shape().await?;
        let shape = self.shape.clone().expect("shape read above");
        let want = limits.max_records.max(1);
        let conn = self.conn.as_mut().expect("connected above");
        let rows: Vec<(String, Option<String>)> = match &self.position {
            None => {
                sqlx::query_as(&shape.first_page)
                    .bind(want as i64)
                    .fetch_all(&mut *conn)
                    .await
            }
            Some(p) => {
                let mut q = sqlx::query_as(&shape.next_page).bind(&p.cursor);
                for k in &p.key {
                    q = q.bind(k);
                }
                q.bind(want as i64).fetch_all(&mut *conn).await
            }
        }
        .context("cannot read a page")?;
        let at_end = (rows.len() as u64) < want;
        let mut chunk = Chunk {
            at_end,
            ..Chunk::default()
        };
        // a `json` column keeps its own whitespace, newlines too, which a
        // kept line cannot hold: such a page is parsed
        let keep = self.keep_lines && !rows.iter().any(|(text, _)| text.contains('\n'));
        let mut last = None;
        for (i, (text, place)) in rows.iter().enumerate() {
            // a kept row is parsed only if it is the page's last, for the cursor
            let fields = match keep {
                true => {
                    chunk.kept.push(b'I');
                    chunk.kept.extend_from_slice(text.as_bytes());
                    chunk.kept.push(b'\n');
                    chunk.bytes += text.len() as u64 + 2;
                    None
                }
                false => {
                    let fields = parse_row(text)?;
                    chunk.bytes += record_bytes(&fields);
                    Some(fields)
                }
            };
            chunk.records += 1;
            let full = chunk.bytes >= limits.max_bytes;
            if full || i + 1 == rows.len() {
                last = Some(match (place, &fields) {
                    (Some(place), _) => Position {
                        cursor: place.clone(),
                        key: Vec::new(),
                    },
                    (None, Some(fields)) => self.position_of(&shape, fields)?,
                    (None, None) => self.position_of(&shape, &parse_row(text)?)?,
                });
            }
            if let Some(fields) = fields {
                chunk.items.push(Item::Record(Record::insert(fields)));
            }
            if full && i + 1 < rows.len() {
                chunk.at_end = false;
                break;
            }
        }
        if let Some(p) = last {
            let t = &self.settings.table;
            let table = TableRef::new(t.schema.as_deref(), &t.name);
            chunk.close_page(table, shape.schema.clone(), &p);
            self.position = Some(p);
        }
        Ok(chunk)
    }

    fn position_of(
        &self,
        shape: &Shape,
        row: &Map<String, Value>,
    ) -> Result<Position, SourceError> {
        let text = |col: &str| -> Result<String, SourceError> {
            match row.get(col) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(Value::Null) | None => Err(SourceError::new(
                    Failure::Invalid,
                    format!("cannot keep the cursor: column {col:?} is null in a row; the cursor and primary_key columns must not be null"),
                )),
                Some(v) => Ok(v.to_string()),
            }
        };
        Ok(Position {
            cursor: text(&self.settings.cursor)?,
            key: shape
                .key
                .iter()
                .map(|k| text(k))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Reads the relation's columns and key; rebuilds the queries when
    /// they changed (a column added or its type changed).
    async fn refresh_shape(&mut self) -> Result<(), SourceError> {
        let rel = self.settings.table.quoted();
        let conn = self.conn.as_mut().expect("connected");
        // a composite reads as its text (the stream has no other form)
        let cols: Vec<(String, String, String, i64)> = sqlx::query_as(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
             CASE WHEN t.typtype = 'c' THEN 'record' ELSE t.typname::text END, a.attnum::int8 \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = CAST($1::text AS regclass) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
        )
        .bind(&rel)
        .fetch_all(&mut *conn)
        .await
        .context("cannot read the table's columns")?;
        let columns: Vec<Column> = cols
            .into_iter()
            .map(|(name, ty, base, number)| Column {
                name,
                ty,
                as_text: matches!(base.as_str(), "numeric" | "_numeric" | "record"),
                number,
            })
            .collect();
        if self.shape.as_ref().is_some_and(|s| s.columns == columns) {
            return Ok(());
        }
        let conn = self.conn.as_mut().expect("connected");
        let catalog_key = catalog::primary_key(conn, &self.settings.table)
            .await
            .context("cannot read the table's primary key")?;
        let shape = build_shape(&self.settings, columns, catalog_key).map_err(|e| {
            SourceError::new(
                Failure::NotConfigured,
                format!("cannot read this table by cursor: {e}"),
            )
        })?;
        if let Some(old) = &self.shape {
            tracing::info!(table = %self.settings.table, before = old.columns.len(), after = shape.columns.len(), "source table's columns changed");
        }
        self.shape = Some(shape);
        Ok(())
    }
}

fn parse_row(text: &str) -> Result<Map<String, Value>, SourceError> {
    abrq_core::json::from_str(text)
        .map_err(|e| SourceError::caused(Failure::Decode, "a row is not JSON", e))
}

/// The page queries and the schema instruction for `columns`.
fn build_shape(
    s: &PostgresSettings,
    columns: Vec<Column>,
    catalog_key: Vec<String>,
) -> Result<Shape, String> {
    if columns.is_empty() {
        return Err(format!("{} has no columns", s.table));
    }
    let find = |name: &str| columns.iter().find(|c| c.name == name);
    // ctid: a system column (attnum -1), never declared
    let physical = Column {
        name: PHYSICAL.into(),
        ty: "tid".into(),
        as_text: false,
        number: -1,
    };
    let cursor = match s.cursor == PHYSICAL && s.primary_key.is_empty() {
        true => &physical,
        false => find(&s.cursor).ok_or_else(|| {
            format!(
                "cursor column {:?} is not a column of {}",
                s.cursor, s.table
            )
        })?,
    };
    let key_all = if s.primary_key.is_empty() {
        catalog_key
    } else {
        s.primary_key.clone()
    };
    if key_all.is_empty() && cursor.name != PHYSICAL {
        return Err(format!(
            "{} has no primary key to break ties between rows with the same {:?}; set primary_key = [...] to unique columns",
            s.table, s.cursor
        ));
    }
    let mut key_cols = Vec::new();
    for k in key_all.iter().filter(|k| **k != s.cursor) {
        key_cols.push(
            find(k).ok_or_else(|| {
                format!("primary_key column {k:?} is not a column of {}", s.table)
            })?,
        );
    }
    let rel = s.table.quoted();
    let select: Vec<String> = columns
        .iter()
        .map(|c| match c.as_text {
            true if c.ty.ends_with("[]") => format!("r.{q}::text[] AS {q}", q = quote(&c.name)),
            true => format!("r.{q}::text AS {q}", q = quote(&c.name)),
            false => format!("r.{}", quote(&c.name)),
        })
        .collect();
    let order: Vec<String> = std::iter::once(cursor)
        .chain(key_cols.iter().copied())
        .map(|c| format!("r.{}", quote(&c.name)))
        .collect();
    let bounds: Vec<String> = std::iter::once(cursor)
        .chain(key_cols.iter().copied())
        .enumerate()
        .map(|(i, c)| format!("CAST(${}::text AS {})", i + 1, c.ty))
        .collect();
    // the place is its own column, never a field of the record
    let place = match cursor.name == PHYSICAL {
        true => "r.ctid::text",
        false => "NULL::text",
    };
    // a backfill's filter, on the table's own columns
    let filter = match &s.filter {
        Some(f) => format!(" AND {}", f.to_sql_on(Dialect::Postgres, "r.")),
        None => String::new(),
    };
    let head = format!(
        "SELECT row_to_json(t.*)::text, {place} FROM {rel} AS r CROSS JOIN LATERAL (SELECT {}) AS t \
         WHERE r.{} IS NOT NULL{filter}",
        select.join(", "),
        quote(&cursor.name)
    );
    let order = order.join(", ");
    let first_page = format!("{head} ORDER BY {order} LIMIT $1");
    let next_page = format!(
        "{head} AND ({order}) > ({}) ORDER BY {order} LIMIT ${}",
        bounds.join(", "),
        bounds.len() + 1
    );
    let schema = declared(
        columns
            .iter()
            .map(|c| (c.name.as_str(), c.ty.as_str(), c.number)),
        &key_all,
    );
    Ok(Shape {
        key: key_cols.iter().map(|c| c.name.clone()).collect(),
        key_all,
        columns,
        first_page,
        next_page,
        schema,
    })
}

/// The schema instruction of columns (name, type as the catalog spells
/// it, `attnum`), the key's marked.
pub(crate) fn declared<'a>(
    columns: impl Iterator<Item = (&'a str, &'a str, i64)>,
    key: &[String],
) -> Map<String, Value> {
    columns
        .map(|(name, ty, number)| {
            let decl = match key.iter().any(|k| k == name) {
                true => serde_json::json!({
                    "type": ty, "primary_key": true, abrq_core::SOURCE_COLUMN: number
                }),
                false => serde_json::json!({ "type": ty, abrq_core::SOURCE_COLUMN: number }),
            };
            (name.to_string(), decl)
        })
        .collect()
}

#[async_trait::async_trait]
impl Source for PgCursorSource {
    /// Reads the next page of at most `limits` rows after the cursor.
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        self.connect().await?;
        let result = within(deadline::PAGE, "reading a page", self.read_page(limits)).await;
        if result.is_err() {
            // a broken connection is made again on the next read
            self.conn = None;
        }
        result.map_err(|e| e.at(self.settings.describe()))
    }

    fn describe(&self) -> String {
        self.settings.describe()
    }

    /// Where the source stands: the table, its order and the last row read.
    fn progress(&self) -> Option<Progress> {
        Some(Progress {
            position: serde_json::json!({
                "table": self.settings.table.to_string(),
                "cursor": self.settings.cursor,
                "last": self.position.as_ref().map(|p| serde_json::json!({"cursor": p.cursor, "key": p.key})),
            }),
            lag_seconds: None,
            lag_bytes: None,
        })
    }

    /// For `abrq check`: connects, reads the table's columns and key, and
    /// says how the table will be read.
    async fn check(&mut self) -> Result<String, SourceError> {
        self.connect().await?;
        let refreshed = self.refresh_shape().await;
        refreshed.map_err(|e| e.at(self.settings.describe()))?;
        let shape = self.shape.as_ref().expect("shape read above");
        Ok(format!(
            "{} columns, read in order of {} then ({}); {}",
            shape.columns.len(),
            self.settings.cursor,
            shape.key_all.join(", "),
            match &self.position {
                Some(p) => format!("resumes after {} = {}", self.settings.cursor, p.cursor),
                None => "starts at the first row".into(),
            }
        ))
    }

    /// A page after the last row, then again after `poll_interval`.
    fn pace(&self) -> Pace {
        Pace::forever(self.settings.poll_interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::config::{Mode, TableName};

    fn settings(cursor: &str, key: &[&str]) -> PostgresSettings {
        PostgresSettings {
            endpoint: abrq_endpoint::Endpoint {
                host: "127.0.0.1".into(),
                port: 5432,
                database: None,
                username: None,
                password: None,
                tls: false,
                tls_ca_file: None,
            },
            mode: Mode::Cursor,
            table: TableName::parse("app.orders").unwrap(),
            tables: vec![TableName::parse("app.orders").unwrap()],
            cursor: cursor.into(),
            primary_key: key.iter().map(|k| k.to_string()).collect(),
            poll_interval: std::time::Duration::from_secs(1),
            slot: None,
            publication: None,
            snapshot: Default::default(),
            snapshot_connections: 1,
            transaction_metadata: false,
            transaction_markers: false,
            heartbeat_interval: None,
            per_table: Default::default(),
            filter: None,
        }
    }

    fn col(name: &str, ty: &str) -> Column {
        Column {
            name: name.into(),
            ty: ty.into(),
            as_text: ty.starts_with("numeric"),
            number: 1,
        }
    }

    #[test]
    fn pages_follow_cursor_then_key() {
        let cols = vec![
            col("id", "bigint"),
            col("updated_at", "timestamp with time zone"),
            col("total", "numeric(10,2)"),
        ];
        let s = build_shape(&settings("updated_at", &[]), cols, vec!["id".into()]).unwrap();
        assert_eq!(s.key, vec!["id"]);
        assert!(s
            .first_page
            .contains("ORDER BY r.\"updated_at\", r.\"id\" LIMIT $1"));
        assert!(s.next_page.contains(
            "(r.\"updated_at\", r.\"id\") > (CAST($1::text AS timestamp with time zone), CAST($2::text AS bigint))"
        ), "{}", s.next_page);
        assert!(s.next_page.ends_with("LIMIT $3"));
        assert!(s.first_page.contains("r.\"total\"::text AS \"total\""));
        assert_eq!(s.schema["id"]["primary_key"], true);
        assert_eq!(s.schema["total"]["type"], "numeric(10,2)");
        assert_eq!(s.schema["total"]["source_column"], 1);
    }

    #[test]
    fn cursor_that_is_the_key_needs_no_tie_break() {
        let cols = vec![col("id", "bigint"), col("name", "text")];
        let s = build_shape(&settings("id", &[]), cols, vec!["id".into()]).unwrap();
        assert!(s.key.is_empty());
        assert!(s
            .next_page
            .contains("(r.\"id\") > (CAST($1::text AS bigint)) ORDER BY r.\"id\" LIMIT $2"));
    }

    #[test]
    fn missing_columns_and_keys_are_named() {
        let cols = vec![col("id", "bigint")];
        let e = build_shape(&settings("ts", &[]), cols.clone(), vec!["id".into()]).unwrap_err();
        assert!(e.contains("cursor column \"ts\""), "{e}");
        let e = build_shape(&settings("id", &[]), cols.clone(), vec![]).unwrap_err();
        assert!(
            e.contains("no primary key") && e.contains("primary_key"),
            "{e}"
        );
        let e = build_shape(&settings("id", &["nope"]), cols, vec![]).unwrap_err();
        assert!(e.contains("\"nope\""), "{e}");
    }
}
