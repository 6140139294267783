//! Catalog reads and errors both postgres modes share.

use sqlx::postgres::PgConnection;

use super::config::TableName;
use crate::file::SourceError;

/// The table's primary key columns, in key order.
pub async fn primary_key(
    conn: &mut PgConnection,
    table: &TableName,
) -> Result<Vec<String>, String> {
    sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i \
         CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY k.ord",
    )
    .bind(table.quoted())
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| format!("cannot read the primary key of {table}: {e}"))
}

/// A database source's error: `at` names the server and table.
pub fn db_error(at: &str, what: &str, e: impl std::fmt::Display) -> SourceError {
    SourceError::Database {
        at: at.to_string(),
        message: format!("{what}: {e}"),
    }
}
