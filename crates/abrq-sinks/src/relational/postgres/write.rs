//! PostgreSQL's statements for the shared batch transaction
//! (`relational/writer.rs`). The ledger row goes in with `ON CONFLICT DO
//! NOTHING`, DDL is transactional, appended rows go in with `COPY`
//! (`copy.rs`), and upserted and deleted rows as one array per column
//! through `unnest`, so a statement has one parameter per column whatever
//! the row count (no bind limit) and keeps one prepared form per column
//! set.

use std::borrow::Cow;

use abrq_core::BatchMeta;
use async_trait::async_trait;
use chrono::SecondsFormat;
use sqlx::postgres::{PgArguments, PgPool};
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres};

use super::errors::db_error;
use super::D;
use crate::relational::errors::DbError;
use crate::relational::plan::{Row, SOFT_DELETED};
use crate::relational::table::{source_comment, TableInfo};
use crate::relational::types::{Cell, Dialect, SqlType};
use crate::relational::writer::{Statements, Stmt};

/// Rows per statement: bounds the arrays' memory, not a server limit.
const CHUNK_ROWS: usize = 10_000;

/// One batch's part for one table.
pub struct Ctx<'a> {
    pub pool: &'a PgPool,
    pub ledger: &'a str,
    pub table: &'a str,
    /// The ledger row's `destination_table`: the configured table (its
    /// template when it names one table per source table).
    pub ledger_key: &'a str,
}

#[async_trait]
impl Statements for Ctx<'_> {
    type Db = Postgres;
    const DIALECT: Dialect = D;
    const DDL_IN_TRANSACTION: bool = true;

    fn pool(&self) -> &PgPool {
        self.pool
    }

    fn table(&self) -> &str {
        self.table
    }

    fn db_error(&self, op: String, source: sqlx::Error) -> DbError {
        db_error(op, source)
    }

    async fn execute(&self, conn: &mut PgConnection, sql: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sql).execute(conn).await.map(drop)
    }

    async fn record(&self, conn: &mut PgConnection, meta: &BatchMeta) -> Result<bool, DbError> {
        let ledger = self.ledger;
        let sql = format!(
            "INSERT INTO {ledger} (stream, idempotency_key, destination_table) \
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(&sql)
            .bind(&meta.stream)
            .bind(&meta.idempotency_key)
            .bind(self.ledger_key)
            .execute(conn)
            .await
            .map_err(|e| db_error(format!("record the batch in {ledger}"), e))?;
        Ok(done.rows_affected() > 0)
    }

    /// One statement for the group: the keys it returns are the new rows.
    async fn record_all(
        &self,
        conn: &mut PgConnection,
        metas: &[&BatchMeta],
    ) -> Result<Vec<bool>, DbError> {
        let ledger = self.ledger;
        let sql = format!(
            "INSERT INTO {ledger} (stream, idempotency_key, destination_table) \
             SELECT s, k, $3 FROM unnest($1::text[], $2::text[]) AS b(s, k) \
             ON CONFLICT DO NOTHING RETURNING stream, idempotency_key"
        );
        let streams: Vec<&str> = metas.iter().map(|m| m.stream.as_str()).collect();
        let keys: Vec<&str> = metas.iter().map(|m| m.idempotency_key.as_str()).collect();
        let new: Vec<(String, String)> = sqlx::query_as(&sql)
            .bind(&streams)
            .bind(&keys)
            .bind(self.ledger_key)
            .fetch_all(conn)
            .await
            .map_err(|e| db_error(format!("record {} batches in {ledger}", metas.len()), e))?;
        let new: std::collections::HashSet<(&str, &str)> =
            new.iter().map(|(s, k)| (s.as_str(), k.as_str())).collect();
        Ok(streams
            .iter()
            .zip(&keys)
            .map(|(s, k)| new.contains(&(*s, *k)))
            .collect())
    }

    /// Takes turns with every other session creating the table (see
    /// `creation_lock`).
    fn before_create(&self) -> Option<Stmt> {
        Some(Stmt {
            op: format!("create table {}", self.table),
            sql: super::creation_lock(self.table),
        })
    }

    fn after_create(&self) -> Option<Stmt> {
        Some(Stmt {
            op: format!("comment on {}", self.table),
            sql: format!(
                "COMMENT ON TABLE {} IS '{}'",
                self.table,
                crate::relational::table::CREATED
            ),
        })
    }

    fn rekey(&self, t: &TableInfo) -> String {
        let key: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
        let add = format!("ADD PRIMARY KEY ({})", key.join(", "));
        match &t.key_name {
            Some(name) => format!("DROP CONSTRAINT {}, {add}", D.quote(name)),
            None => add,
        }
    }

    fn column(&self, t: &TableInfo, name: &str) -> String {
        let Some(c) = t.column(name) else {
            return String::new();
        };
        let null = if c.nullable { "" } else { " NOT NULL" };
        format!("{} {}{null}", D.quote(name), D.type_name(&c.ty))
    }

    fn add_column(&self, t: &TableInfo, name: &str) -> String {
        let (n, ty) = typed(t, name);
        format!("ADD COLUMN IF NOT EXISTS {n} {ty}")
    }

    const COMMENT_IN_DEFINITION: bool = false;

    fn label(&self, t: &TableInfo, name: &str) -> Stmt {
        let comment = match t.column(name).and_then(|c| c.source) {
            Some(n) => format!("'{}'", source_comment(n)),
            None => "NULL".into(),
        };
        Stmt {
            op: format!("label column {name:?} of {}", self.table),
            sql: format!(
                "COMMENT ON COLUMN {}.{} IS {comment}",
                self.table,
                D.quote(name)
            ),
        }
    }

    /// Casts between instants, days and text read the session's zone: make
    /// it UTC, the zone abrq writes in.
    fn before_widen(&self) -> Option<Stmt> {
        Some(Stmt {
            op: "set the time zone for widening".into(),
            sql: "SET LOCAL TimeZone = 'UTC'".into(),
        })
    }

    fn widen_column(&self, t: &TableInfo, name: &str) -> String {
        let (n, ty) = typed(t, name);
        format!("ALTER COLUMN {n} TYPE {ty} USING {n}::{ty}")
    }

    fn truncate(&self) -> Stmt {
        Stmt {
            op: format!("truncate {}", self.table),
            sql: format!("TRUNCATE TABLE {}", self.table),
        }
    }

    fn chunks<'r, 'a>(&self, rows: &'r [Row<'a>], _width: usize, one: bool) -> Vec<&'r [Row<'a>]> {
        rows.chunks(if one { 1 } else { CHUNK_ROWS }).collect()
    }

    async fn write(
        &self,
        conn: &mut PgConnection,
        t: &TableInfo,
        columns: &[usize],
        rows: &[Row<'_>],
        upsert: bool,
    ) -> Result<(), sqlx::Error> {
        let table = self.table;
        if columns.is_empty() {
            for _ in rows {
                self.execute(conn, &format!("INSERT INTO {table} DEFAULT VALUES"))
                    .await?;
            }
            return Ok(());
        }
        if !upsert && rows.len() > 1 {
            return super::copy::copy_rows(conn, table, t, columns, &[rows]).await;
        }
        let names: Vec<String> = columns
            .iter()
            .map(|&c| D.quote(&t.columns[c].name))
            .collect();
        let mut sql = format!(
            "INSERT INTO {table} ({}) {}",
            names.join(", "),
            unnest_select(t, columns)
        );
        if upsert {
            let key: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
            let mut set: Vec<String> = columns
                .iter()
                .filter(|&&c| !t.key.contains(&t.columns[c].name))
                .map(|&c| {
                    let n = D.quote(&t.columns[c].name);
                    format!("{n} = EXCLUDED.{n}")
                })
                .collect();
            if t.soft_delete {
                // written again: live again
                set.push(format!("{} = NULL", D.quote(SOFT_DELETED)));
            }
            sql.push_str(&format!(" ON CONFLICT ({}) DO ", key.join(", ")));
            if set.is_empty() {
                sql.push_str("NOTHING");
            } else {
                sql.push_str(&format!("UPDATE SET {}", set.join(", ")));
            }
        }
        execute_with_arrays(conn, &sql, t, columns, rows).await
    }

    /// One `COPY` for every run (a group's appends: two round trips).
    async fn append_runs(
        &self,
        conn: &mut PgConnection,
        t: &TableInfo,
        columns: &[usize],
        runs: &[&[Row<'_>]],
    ) -> Result<(), sqlx::Error> {
        super::copy::copy_rows(conn, self.table, t, columns, runs).await
    }

    async fn delete_one(
        &self,
        conn: &mut PgConnection,
        t: &TableInfo,
        columns: &[usize],
        row: &Row<'_>,
    ) -> Result<(), sqlx::Error> {
        let sql = delete_one_sql(self.table, t, columns);
        let cols: Vec<(usize, &SqlType)> = columns
            .iter()
            .enumerate()
            .map(|(i, &c)| (i, &t.columns[c].ty))
            .collect();
        bind_arrays(sqlx::query(&sql), &cols, std::slice::from_ref(row))?
            .execute(conn)
            .await
            .map(drop)
    }

    async fn delete(
        &self,
        conn: &mut PgConnection,
        t: &TableInfo,
        rows: &[Row<'_>],
    ) -> Result<(), sqlx::Error> {
        let index = t.index();
        let key: Vec<usize> = t.key.iter().map(|k| index[k.as_str()]).collect();
        let names: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
        let at = format!("({}) IN ({})", names.join(", "), unnest_select(t, &key));
        let sql = match t.soft_delete {
            true => format!(
                "UPDATE {} SET {d} = now() WHERE {at} AND {d} IS NULL",
                self.table,
                d = D.quote(SOFT_DELETED)
            ),
            false => format!("DELETE FROM {} WHERE {at}", self.table),
        };
        execute_with_arrays(conn, &sql, t, &key, rows).await
    }
}

/// The statement of [`Statements::delete_one`]: the first row (by ctid)
/// equal in every given column to the one-row unnest of the old values.
fn delete_one_sql(table: &str, t: &TableInfo, columns: &[usize]) -> String {
    let equal: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            format!(
                "d.{} IS NOT DISTINCT FROM o.c{i}",
                D.quote(&t.columns[c].name)
            )
        })
        .collect();
    let (verb, live) = match t.soft_delete {
        true => {
            let d = D.quote(SOFT_DELETED);
            (
                format!("UPDATE {table} SET {d} = now()"),
                format!(" AND d.{d} IS NULL"),
            )
        }
        false => (format!("DELETE FROM {table}"), String::new()),
    };
    format!(
        "{verb} WHERE ctid = (SELECT d.ctid FROM {table} AS d, ({}) AS o WHERE {}{live} LIMIT 1)",
        unnest_select(t, columns),
        equal.join(" AND ")
    )
}

/// A column's quoted name and type, as ALTER TABLE names them.
fn typed(t: &TableInfo, name: &str) -> (String, String) {
    let ty = t
        .column(name)
        .map(|c| D.type_name(&c.ty))
        .unwrap_or_default();
    (D.quote(name), ty)
}

/// Runs `sql` with one typed array per table column in `columns` (by
/// position), filled from `rows`.
async fn execute_with_arrays(
    conn: &mut PgConnection,
    sql: &str,
    t: &TableInfo,
    columns: &[usize],
    rows: &[Row<'_>],
) -> Result<(), sqlx::Error> {
    let cols: Vec<(usize, &SqlType)> = columns
        .iter()
        .enumerate()
        .map(|(i, &c)| (i, &t.columns[c].ty))
        .collect();
    bind_arrays(sqlx::query(sql), &cols, rows)?
        .execute(conn)
        .await
        .map(drop)
}

/// The array type each column's cells are bound as (see `bind_arrays`).
fn array_type(ty: &SqlType) -> &'static str {
    match ty {
        SqlType::Bool => "boolean[]",
        SqlType::Int(_) => "int8[]",
        SqlType::Float(_) => "float8[]",
        SqlType::Numeric(_)
        | SqlType::Text(_)
        | SqlType::Date
        | SqlType::Timestamp
        | SqlType::Json
        | SqlType::Other { .. } => "text[]",
    }
}

/// `SELECT <exprs> FROM unnest($1::t[], ...) AS u(c0, ...)` over the
/// columns, casting text to the column's type where no array type binds
/// directly. The array types are spelled out so that the statement's text
/// changes when a column is widened: a statement prepared for a bigint
/// column never meets double precision arrays.
fn unnest_select(t: &TableInfo, columns: &[usize]) -> String {
    let exprs: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, &c)| match &t.columns[c].ty {
            SqlType::Numeric(_) => format!("u.c{i}::numeric"),
            SqlType::Date => format!("u.c{i}::date"),
            SqlType::Timestamp => format!("u.c{i}::timestamptz"),
            SqlType::Json => format!("u.c{i}::jsonb"),
            SqlType::Other { cast, .. } => format!("u.c{i}::{cast}"),
            SqlType::Bool | SqlType::Int(_) | SqlType::Float(_) | SqlType::Text(_) => {
                format!("u.c{i}")
            }
        })
        .collect();
    let params: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, &c)| format!("${}::{}", i + 1, array_type(&t.columns[c].ty)))
        .collect();
    let aliases: Vec<String> = (0..columns.len()).map(|i| format!("c{i}")).collect();
    format!(
        "SELECT {} FROM unnest({}) AS u({})",
        exprs.join(", "),
        params.join(", "),
        aliases.join(", ")
    )
}

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// One typed array per statement column, `(cell position, column type)`.
/// Exact numbers, instants and JSON go as text and are cast in the SQL.
fn bind_arrays<'q>(
    mut q: PgQuery<'q>,
    cols: &[(usize, &SqlType)],
    rows: &[Row<'q>],
) -> Result<PgQuery<'q>, sqlx::Error> {
    for &(at, ty) in cols {
        let cells = rows.iter().map(|r| &r.cells[at]);
        let mismatch = |c: &Cell| {
            sqlx::Error::Encode(format!("internal: {c:?} for a column of type {ty:?}").into())
        };
        macro_rules! array {
            ($pat:pat => $v:expr) => {{
                let mut out = Vec::with_capacity(rows.len());
                for c in cells {
                    out.push(match c {
                        Cell::Null => None,
                        $pat => Some($v),
                        other => return Err(mismatch(other)),
                    });
                }
                q.bind(out)
            }};
        }
        q = match ty {
            SqlType::Bool => array!(Cell::Bool(b) => *b),
            SqlType::Int(_) => array!(Cell::Int(i) => *i),
            SqlType::Float(_) => array!(Cell::Float(f) => *f),
            SqlType::Numeric(_)
            | SqlType::Text(_)
            | SqlType::Date
            | SqlType::Timestamp
            | SqlType::Json
            | SqlType::Other { .. } => {
                let mut out: Vec<Option<Cow<'q, str>>> = Vec::with_capacity(rows.len());
                for c in cells {
                    out.push(match c {
                        Cell::Null => None,
                        Cell::Text(s) => Some(s.clone()),
                        Cell::Decimal(s) => Some(Cow::Owned(s.clone())),
                        Cell::Date(d) => Some(Cow::Owned(d.format("%Y-%m-%d").to_string())),
                        Cell::Ts(t) => {
                            Some(Cow::Owned(t.to_rfc3339_opts(SecondsFormat::AutoSi, true)))
                        }
                        Cell::Json(v) => Some(Cow::Owned(v.to_string())),
                        other => return Err(mismatch(other)),
                    });
                }
                q.bind(out)
            }
        };
    }
    Ok(q)
}
