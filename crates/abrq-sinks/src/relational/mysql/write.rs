//! MySQL's statements for the shared batch transaction
//! (`relational/writer.rs`). MySQL commits implicitly around DDL, so the
//! ledger is read first, the (idempotent) DDL runs before the transaction,
//! and the transaction holds the ledger row, the truncates (`DELETE FROM`:
//! `TRUNCATE` would commit) and the rows. Rows go in as multi-row `VALUES`,
//! each statement under 65,535 placeholders and half of
//! `max_allowed_packet`.

use abrq_core::BatchMeta;
use async_trait::async_trait;
use sqlx::mysql::{MySqlArguments, MySqlPool};
use sqlx::{Arguments, MySql, MySqlConnection};

use super::errors::{db_error, number, DUPLICATE_ENTRY};
use super::D;
use crate::relational::connection::why_unreachable;
use crate::relational::errors::DbError;
use crate::relational::plan::{Row, SOFT_DELETED};
use crate::relational::table::{source_comment, TableInfo};
use crate::relational::types::{Cell, Dialect, SqlType};
use crate::relational::writer::{Statements, Stmt};

const MAX_PLACEHOLDERS: usize = 65_535;

/// One batch's part for one table.
pub struct Ctx<'a> {
    pub pool: &'a MySqlPool,
    pub ledger: &'a str,
    pub table: &'a str,
    /// The ledger row's `destination_table`: the configured table (its
    /// template when it names one table per source table).
    pub ledger_key: &'a str,
    /// The server's `max_allowed_packet`.
    pub packet: usize,
}

#[async_trait]
impl Statements for Ctx<'_> {
    type Db = MySql;
    const DIALECT: Dialect = D;
    const DDL_IN_TRANSACTION: bool = false;

    fn pool(&self) -> &MySqlPool {
        self.pool
    }

    fn table(&self) -> &str {
        self.table
    }

    fn db_error(&self, op: String, source: sqlx::Error) -> DbError {
        db_error(op, source)
    }

    async fn execute(&self, conn: &mut MySqlConnection, sql: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sql).execute(conn).await.map(drop)
    }

    async fn seen(&self, meta: &BatchMeta) -> Result<bool, DbError> {
        let ledger = self.ledger;
        let seen = sqlx::query_scalar::<_, i32>(&format!(
            "SELECT 1 FROM {ledger} WHERE stream = ? AND idempotency_key = ? AND destination_table = ?"
        ))
        .bind(&meta.stream)
        .bind(&meta.idempotency_key)
        .bind(self.ledger_key)
        .fetch_optional(self.pool)
        .await;
        match seen {
            Ok(seen) => Ok(seen.is_some()),
            // the first statement of a batch: an unreachable server shows here
            Err(e) => {
                let e = why_unreachable(self.pool, e).await;
                Err(db_error(format!("record the batch in {ledger}"), e))
            }
        }
    }

    async fn record(&self, conn: &mut MySqlConnection, meta: &BatchMeta) -> Result<bool, DbError> {
        let ledger = self.ledger;
        let insert = sqlx::query(&format!(
            "INSERT INTO {ledger} (stream, idempotency_key, destination_table) VALUES (?, ?, ?)"
        ))
        .bind(&meta.stream)
        .bind(&meta.idempotency_key)
        .bind(self.ledger_key)
        .execute(conn)
        .await;
        match insert {
            Ok(_) => Ok(true),
            // another process applied it between `seen` and now
            Err(e) if number(&e) == Some(DUPLICATE_ENTRY) => Ok(false),
            Err(e) => Err(db_error(format!("record the batch in {ledger}"), e)),
        }
    }

    fn table_options(&self) -> String {
        format!(" COMMENT = '{}'", crate::relational::table::CREATED)
    }

    /// Key columns made NOT NULL (and bounded, for text) first.
    fn rekey(&self, t: &TableInfo) -> String {
        let mut parts: Vec<String> = t
            .key
            .iter()
            .map(|k| format!("MODIFY COLUMN {}", self.column(t, k)))
            .collect();
        let key: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
        parts.push(format!(
            "DROP PRIMARY KEY, ADD PRIMARY KEY ({})",
            key.join(", ")
        ));
        parts.join(", ")
    }

    fn column(&self, t: &TableInfo, name: &str) -> String {
        let Some(c) = t.column(name) else {
            return String::new();
        };
        let mut ty = D.type_name(&c.ty);
        // a key column cannot be longtext or json: give it a bounded length
        if t.key.iter().any(|k| k == name) && matches!(c.ty, SqlType::Text(None) | SqlType::Json) {
            ty = "varchar(255)".into();
        }
        let null = if c.nullable { "NULL" } else { "NOT NULL" };
        // MODIFY COLUMN drops a comment it does not restate
        let comment = c
            .source
            .map(|n| format!(" COMMENT '{}'", source_comment(n)))
            .unwrap_or_default();
        format!("{} {ty} {null}{comment}", D.quote(name))
    }

    fn add_column(&self, t: &TableInfo, name: &str) -> String {
        format!("ADD COLUMN {}", self.column(t, name))
    }

    const COMMENT_IN_DEFINITION: bool = true;

    fn label(&self, t: &TableInfo, name: &str) -> Stmt {
        Stmt {
            op: format!("label column {name:?} of {}", self.table),
            sql: format!(
                "ALTER TABLE {} MODIFY COLUMN {}",
                self.table,
                self.column(t, name)
            ),
        }
    }

    fn widen_column(&self, t: &TableInfo, name: &str) -> String {
        format!("MODIFY COLUMN {}", self.column(t, name))
    }

    /// `TRUNCATE` would commit the transaction.
    fn truncate(&self) -> Stmt {
        Stmt {
            op: format!("empty {}", self.table),
            sql: format!("DELETE FROM {}", self.table),
        }
    }

    fn chunks<'r, 'a>(&self, rows: &'r [Row<'a>], width: usize, one: bool) -> Vec<&'r [Row<'a>]> {
        chunks(rows, width, self.packet, one)
    }

    async fn write(
        &self,
        conn: &mut MySqlConnection,
        t: &TableInfo,
        columns: &[usize],
        rows: &[Row<'_>],
        upsert: bool,
    ) -> Result<(), sqlx::Error> {
        let names: Vec<String> = columns
            .iter()
            .map(|&c| D.quote(&t.columns[c].name))
            .collect();
        let mut sql = format!(
            "INSERT INTO {} ({}) VALUES {}",
            self.table,
            names.join(", "),
            placeholders(rows.len(), columns.len())
        );
        if upsert {
            let mut set: Vec<String> = columns
                .iter()
                .filter(|&&c| !t.key.contains(&t.columns[c].name))
                .map(|&c| {
                    let n = D.quote(&t.columns[c].name);
                    format!("{n} = VALUES({n})")
                })
                .collect();
            if t.soft_delete {
                // written again: live again
                set.push(format!("{} = NULL", D.quote(SOFT_DELETED)));
            }
            if set.is_empty() {
                let k = D.quote(&t.key[0]);
                set.push(format!("{k} = {k}"));
            }
            sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {}", set.join(", ")));
        }
        let args = arguments(rows.iter().flat_map(|r| r.cells.iter()))?;
        sqlx::query_with(&sql, args).execute(conn).await.map(drop)
    }

    async fn delete_one(
        &self,
        conn: &mut MySqlConnection,
        t: &TableInfo,
        columns: &[usize],
        row: &Row<'_>,
    ) -> Result<(), sqlx::Error> {
        let equal: Vec<String> = columns
            .iter()
            .map(|&c| {
                let col = &t.columns[c];
                let value = match col.ty {
                    SqlType::Json => "CAST(? AS JSON)",
                    _ => "?",
                };
                format!("{} <=> {value}", D.quote(&col.name))
            })
            .collect();
        let sql = match t.soft_delete {
            true => format!(
                "UPDATE {} SET {d} = UTC_TIMESTAMP(6) WHERE {} AND {d} IS NULL LIMIT 1",
                self.table,
                equal.join(" AND "),
                d = D.quote(SOFT_DELETED)
            ),
            false => format!(
                "DELETE FROM {} WHERE {} LIMIT 1",
                self.table,
                equal.join(" AND ")
            ),
        };
        let args = arguments(row.cells.iter())?;
        sqlx::query_with(&sql, args).execute(conn).await.map(drop)
    }

    async fn delete(
        &self,
        conn: &mut MySqlConnection,
        t: &TableInfo,
        rows: &[Row<'_>],
    ) -> Result<(), sqlx::Error> {
        let names: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
        let at = format!(
            "({}) IN ({})",
            names.join(", "),
            placeholders(rows.len(), names.len())
        );
        let sql = match t.soft_delete {
            true => format!(
                "UPDATE {} SET {d} = UTC_TIMESTAMP(6) WHERE {at} AND {d} IS NULL",
                self.table,
                d = D.quote(SOFT_DELETED)
            ),
            false => format!("DELETE FROM {} WHERE {at}", self.table),
        };
        let args = arguments(rows.iter().flat_map(|r| r.cells.iter()))?;
        sqlx::query_with(&sql, args).execute(conn).await.map(drop)
    }
}

/// Splits rows so each statement stays under the placeholder limit and
/// half the packet limit (the other half is headroom for encoding).
fn chunks<'r, 'a>(
    rows: &'r [Row<'a>],
    width: usize,
    packet: usize,
    one: bool,
) -> Vec<&'r [Row<'a>]> {
    let budget = (packet / 2).max(1 << 16);
    let max_rows = if one {
        1
    } else {
        (MAX_PLACEHOLDERS / width.max(1)).max(1)
    };
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        let len: usize = r.cells.iter().map(|c| c.wire_len() + 4).sum();
        if i > start && (i - start >= max_rows || bytes + len > budget) {
            out.push(&rows[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// `(?, ?), (?, ?)` for `rows` rows of `width` values.
fn placeholders(rows: usize, width: usize) -> String {
    let one = format!("({})", vec!["?"; width].join(", "));
    vec![one; rows].join(", ")
}

fn arguments<'c>(cells: impl Iterator<Item = &'c Cell<'c>>) -> Result<MySqlArguments, sqlx::Error> {
    let mut args = MySqlArguments::default();
    for c in cells {
        match c {
            Cell::Null => args.add(Option::<&str>::None),
            Cell::Bool(b) => args.add(*b),
            Cell::Int(i) => args.add(*i),
            Cell::Float(f) => args.add(*f),
            Cell::Decimal(s) => args.add(s.as_str()),
            Cell::Text(s) => args.add(s.as_ref()),
            Cell::Date(d) => args.add(d.format("%Y-%m-%d").to_string()),
            Cell::Ts(t) => args.add(t.format("%Y-%m-%d %H:%M:%S%.6f").to_string()),
            Cell::Json(v) => args.add(v.to_string()),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(args)
}
