//! Catalog reads both postgres modes share.

use sqlx::postgres::PgConnection;

use super::config::TableName;
use crate::error::SourceError;

/// The table's primary key columns, in key order.
pub async fn primary_key(
    conn: &mut PgConnection,
    table: &TableName,
) -> Result<Vec<String>, SourceError> {
    sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i \
         CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
         WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY k.ord",
    )
    .bind(table.quoted())
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client(format!("cannot read the primary key of {table}"), e))
}

/// Each live column of relation `oid` with its `attnum`, in order: the
/// column's identity across renames.
pub async fn column_numbers(
    conn: &mut PgConnection,
    oid: u32,
) -> Result<Vec<(String, i64)>, SourceError> {
    sqlx::query_as(
        "SELECT attname::text, attnum::int8 FROM pg_attribute \
         WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
    )
    .bind(i64::from(oid))
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| SourceError::from_client(format!("cannot read the columns of relation {oid}"), e))
}

/// The relations that hold the rows of the table named by `$1`: the table
/// itself, or a partitioned table's leaf partitions (`pg_partition_tree`
/// lists nothing for a table that is not partitioned).
pub const HOLDERS: &str = "(SELECT c.oid AS relid FROM pg_class c \
     WHERE c.oid = to_regclass($1) AND c.relkind <> 'p' \
     UNION ALL SELECT p.relid FROM pg_partition_tree(to_regclass($1)) p WHERE p.isleaf)";
