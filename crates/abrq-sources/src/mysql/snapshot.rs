//! The copy of the tables' rows before streaming: keyset pages by primary
//! key inside one consistent-snapshot transaction whose binlog position is
//! known, so streaming from that position meets the copy exactly. MariaDB
//! says the position of its snapshot (`binlog_snapshot_file` and
//! `_position`); MySQL holds `FLUSH TABLES WITH READ LOCK` for the moment
//! the snapshot and the position are taken.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Value as V};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::catalog::Shape;
use super::config::{quote, TableName};
use super::values;
use crate::error::{Failure, SourceError};
use crate::filter::{Dialect, Expr};

/// Where the copy stands, in the stream's cursor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CopyPos {
    /// The table being copied (`database.name`).
    pub table: String,
    /// The key of its last staged row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<Value>>,
}

/// Opens a consistent snapshot on `conn`; returns the binlog file and
/// position it matches.
pub async fn open(conn: &mut Conn) -> Result<(String, u64), SourceError> {
    let err = |e| SourceError::from_client("cannot open a consistent snapshot", e);
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(err)?;
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        .await
        .map_err(err)?;
    let status: Vec<(String, String)> = conn
        .query("SHOW STATUS LIKE 'binlog_snapshot_%'")
        .await
        .map_err(err)?;
    let get = |name: &str| {
        status
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    if let (Some(file), Some(pos)) = (get("binlog_snapshot_file"), get("binlog_snapshot_position"))
    {
        let pos = pos.parse().map_err(|e| {
            SourceError::caused(
                Failure::Decode,
                format!("binlog_snapshot_position {pos:?}"),
                e,
            )
        })?;
        return Ok((file, pos));
    }
    // MySQL: no snapshot position; hold writes while both are taken
    conn.query_drop("ROLLBACK").await.map_err(err)?;
    conn.query_drop("FLUSH TABLES WITH READ LOCK")
        .await
        .map_err(|e| {
            SourceError::from_client("cannot lock tables for the snapshot (needs RELOAD)", e)
        })?;
    let taken = async {
        conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            .await
            .map_err(err)?;
        let row: Option<mysql_async::Row> =
            conn.query_first("SHOW MASTER STATUS").await.map_err(err)?;
        let file = row.as_ref().and_then(|r| r.get::<String, _>(0));
        let pos = row.as_ref().and_then(|r| r.get::<u64, _>(1));
        file.zip(pos).ok_or_else(|| {
            SourceError::new(Failure::NotConfigured, "SHOW MASTER STATUS shows no binlog")
        })
    }
    .await;
    conn.query_drop("UNLOCK TABLES").await.map_err(err)?;
    taken
}

/// One page of `table` after `after`, in key order: the rows' fields and
/// whether the table has more.
pub async fn page(
    conn: &mut Conn,
    table: &TableName,
    shape: &Shape,
    after: Option<&[Value]>,
    filter: Option<&Expr>,
    limit: u64,
) -> Result<(Vec<Map<String, Value>>, bool), SourceError> {
    let key: Vec<&str> = key_names(shape);
    if key.is_empty() {
        return Err(SourceError::new(
            Failure::NoKey,
            format!(
                "backfill: {table} has no primary key, so rows read now cannot be merged with \
                 the changes streamed meanwhile; add a primary key, or re-snapshot the table into \
                 a new stream"
            ),
        ));
    }
    let (sql, params) = keyset_sql(table, shape, after, filter, Some(limit));
    let rows: Vec<mysql_async::Row> = conn
        .exec(&sql, Params::Positional(params))
        .await
        .map_err(|e| SourceError::from_client(format!("cannot read a page of {table}"), e))?;
    let more = rows.len() as u64 >= limit;
    let out: Vec<Map<String, Value>> = rows
        .into_iter()
        .map(|r| values::row(&shape.columns, &r.unwrap()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.context(&format!("a page of {table}")))?;
    // a page must move past `after`: one that does not would be read
    // again forever
    if let (Some(after), Some(last)) = (after, out.last()) {
        if key_of(shape, last) == after {
            return Err(SourceError::new(
                Failure::Decode,
                format!(
                    "cannot page {table} by its key ({}): the page after {after:?} did not move \
                     past it",
                    key.join(", ")
                ),
            ));
        }
    }
    Ok((out, more))
}

fn key_names(shape: &Shape) -> Vec<&str> {
    let key = shape.columns.iter().filter(|c| c.key);
    key.map(|c| c.name.as_str()).collect()
}

/// The query of `table`'s rows after `after` in key order, at most
/// `limit` of them (`None`: all), and its parameters.
pub fn keyset_sql(
    table: &TableName,
    shape: &Shape,
    after: Option<&[Value]>,
    filter: Option<&Expr>,
    limit: Option<u64>,
) -> (String, Vec<V>) {
    let cols: Vec<String> = shape.columns.iter().map(|c| quote(&c.name)).collect();
    let keys: Vec<String> = key_names(shape).into_iter().map(quote).collect();
    let mut sql = format!("SELECT {} FROM {}", cols.join(", "), table.quoted());
    let mut params: Vec<V> = Vec::new();
    let mut conditions: Vec<String> = Vec::new();
    if let Some(after) = after {
        let marks = vec!["?"; keys.len()].join(", ");
        conditions.push(format!("({}) > ({marks})", keys.join(", ")));
        let key_cols = shape.columns.iter().filter(|c| c.key);
        params.extend(key_cols.zip(after).map(|(c, v)| values::param(Some(c), v)));
    }
    if let Some(f) = filter {
        conditions.push(f.to_sql(Dialect::Mysql));
    }
    if !conditions.is_empty() {
        sql.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
    }
    sql.push_str(&format!(" ORDER BY {}", keys.join(", ")));
    if let Some(limit) = limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    (sql, params)
}

/// The query of a table without a key: its rows after the first `done`,
/// in the order the copy's snapshot reads them.
pub fn by_count_sql(table: &TableName, shape: &Shape, done: u64, limit: Option<u64>) -> String {
    let cols: Vec<String> = shape.columns.iter().map(|c| quote(&c.name)).collect();
    // MySQL has no OFFSET without a LIMIT: the largest LIMIT is "all"
    let limit = limit.unwrap_or(u64::MAX);
    format!(
        "SELECT {} FROM {} LIMIT {done}, {limit}",
        cols.join(", "),
        table.quoted()
    )
}

/// The key of a copied row, as the cursor keeps it.
pub fn key_of(shape: &Shape, fields: &Map<String, Value>) -> Vec<Value> {
    shape
        .columns
        .iter()
        .filter(|c| c.key)
        .map(|c| fields.get(&c.name).cloned().unwrap_or(Value::Null))
        .collect()
}
