//! What the catalog says about a table: its columns in order (the binlog
//! names none), their declared types, and the primary key.

use mysql_async::prelude::Queryable;
use serde_json::{Map, Value};

use super::config::TableName;
use crate::error::{Failure, SourceError};

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    /// `COLUMN_TYPE`, e.g. `decimal(10,2)` or `int(10) unsigned`.
    pub column_type: String,
    /// `DATA_TYPE`, e.g. `decimal`.
    pub data_type: String,
    pub key: bool,
    /// `CHARACTER_SET_NAME` of a string column: the binlog writes its
    /// bytes in this set.
    pub charset: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub columns: Vec<Column>,
    /// The schema instruction batches carry for this table.
    pub declared: Map<String, Value>,
}

/// The table's columns in ordinal order; `None` when it does not exist.
pub async fn shape(
    conn: &mut mysql_async::Conn,
    t: &TableName,
) -> Result<Option<Shape>, SourceError> {
    let rows: Vec<(String, String, String, String, Option<String>)> = conn
        .exec(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), CAST(DATA_TYPE AS CHAR), \
             CAST(COLUMN_KEY AS CHAR), CAST(CHARACTER_SET_NAME AS CHAR) \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (&t.database, &t.name),
        )
        .await
        .map_err(|e| SourceError::from_client(format!("cannot read the columns of {t}"), e))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let columns: Vec<Column> = rows
        .into_iter()
        .map(|(name, column_type, data_type, key, charset)| Column {
            name,
            column_type,
            data_type: data_type.to_ascii_lowercase(),
            key: key == "PRI",
            charset: charset.map(|c| c.to_ascii_lowercase()),
        })
        .collect();
    let declared = columns
        .iter()
        .map(|c| {
            let ty = match c.key {
                true => serde_json::json!({ "type": c.column_type, "primary_key": true }),
                false => Value::String(c.column_type.clone()),
            };
            (c.name.clone(), ty)
        })
        .collect();
    Ok(Some(Shape { columns, declared }))
}

/// Every server setting the binlog source needs that is not so, each with
/// its fix.
pub async fn missing(conn: &mut mysql_async::Conn) -> Result<Vec<String>, SourceError> {
    let row: Option<(String, String, String)> = conn
        .query_first(
            "SELECT CAST(@@GLOBAL.log_bin AS CHAR), CAST(@@GLOBAL.binlog_format AS CHAR), \
             CAST(@@GLOBAL.binlog_row_image AS CHAR)",
        )
        .await
        .map_err(|e| SourceError::from_client("cannot read the binlog settings", e))?;
    let Some((log_bin, format, image)) = row else {
        return Err(SourceError::new(
            Failure::Server,
            "cannot read the binlog settings: no answer",
        ));
    };
    let mut out = Vec::new();
    if log_bin != "1" && !log_bin.eq_ignore_ascii_case("on") {
        out.push("the binlog is off: start the server with log_bin".to_string());
    }
    if !format.eq_ignore_ascii_case("row") {
        out.push(format!(
            "binlog_format is {format}: set binlog_format = ROW (changes logged as statements cannot be read as rows)"
        ));
    }
    if !image.eq_ignore_ascii_case("full") {
        out.push(format!(
            "binlog_row_image is {image}: set binlog_row_image = FULL (a partial image leaves columns out of updates and deletes)"
        ));
    }
    for (name, value) in settings(conn).await? {
        let on = value.eq_ignore_ascii_case("on") || value == "1";
        match name.to_ascii_lowercase().as_str() {
            "binlog_transaction_compression" if on => out.push(
                "binlog_transaction_compression is ON: compressed transaction payloads are not read; set binlog_transaction_compression = OFF"
                    .to_string(),
            ),
            "binlog_row_value_options" if value.to_ascii_uppercase().contains("PARTIAL_JSON") => out.push(
                "binlog_row_value_options is PARTIAL_JSON: JSON updates are logged as diffs; set binlog_row_value_options = ''"
                    .to_string(),
            ),
            _ => {}
        }
    }
    Ok(out)
}

/// The binlog settings only some servers have, as the server spells them.
async fn settings(conn: &mut mysql_async::Conn) -> Result<Vec<(String, String)>, SourceError> {
    conn.query(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('binlog_transaction_compression', \
         'binlog_row_value_options', 'binlog_row_metadata')",
    )
    .await
    .map_err(|e| SourceError::from_client("cannot read the binlog settings", e))
}

/// Whether changes carry their column names (`binlog_row_metadata =
/// FULL`), so a backlog across DDL decodes by name.
pub async fn row_metadata_full(conn: &mut mysql_async::Conn) -> Result<bool, SourceError> {
    Ok(settings(conn).await?.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("binlog_row_metadata") && value.eq_ignore_ascii_case("full")
    }))
}
