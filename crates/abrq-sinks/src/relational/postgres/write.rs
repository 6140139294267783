//! One batch, one PostgreSQL transaction: ledger row first (a batch already
//! there is skipped), DDL (transactional in PostgreSQL), then the steps in
//! batch order. Rows go in as one array per column through `unnest`, so a
//! statement has one parameter per column whatever the row count (no bind
//! limit) and keeps one prepared form per column set.

use std::borrow::Cow;

use abrq_core::BatchMeta;
use chrono::SecondsFormat;
use sqlx::postgres::{PgArguments, PgPool};
use sqlx::query::Query;
use sqlx::{Postgres, Transaction};

use super::errors::db_error;
use super::D;
use crate::relational::destination::{Applied, Run, RunError};
use crate::relational::errors::DbError;
use crate::relational::plan::{Plan, Row, Step};
use crate::relational::table::TableInfo;
use crate::relational::types::{Cell, SqlType};

/// Rows per statement: bounds the arrays' memory, not a server limit.
const CHUNK_ROWS: usize = 10_000;

pub async fn apply(
    pool: &PgPool,
    ledger: &str,
    table: &str,
    meta: &BatchMeta,
    plan: &Plan<'_>,
    run: Run,
) -> Result<Applied, RunError> {
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| db_error("begin a transaction", e))?;
    if run == Run::Commit {
        let sql = format!(
            "INSERT INTO {ledger} (stream, idempotency_key, destination_table) \
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(&sql)
            .bind(&meta.stream)
            .bind(&meta.idempotency_key)
            .bind(table)
            .execute(&mut *tx)
            .await
            .map_err(|e| db_error(format!("record the batch in {ledger}"), e))?;
        if done.rows_affected() == 0 {
            return Ok(Applied::AlreadyApplied); // dropping `tx` rolls back
        }
    }
    ddl(&mut tx, table, plan).await?;
    let per = match run {
        Run::Commit => CHUNK_ROWS,
        Run::FindRow => 1,
    };
    let blame = |rows: &[Row], error: DbError| RunError {
        item: (rows.len() == 1).then(|| rows[0].item),
        error,
    };
    for step in &plan.steps {
        match step {
            Step::Truncate => {
                sqlx::query(&format!("TRUNCATE TABLE {table}"))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db_error(format!("truncate {table}"), e))?;
            }
            Step::Write {
                upsert,
                columns,
                rows,
            } => {
                for chunk in rows.chunks(per) {
                    write(&mut tx, table, &plan.table, columns, chunk, *upsert)
                        .await
                        .map_err(|e| blame(chunk, e))?;
                }
            }
            Step::Delete { rows } => {
                for chunk in rows.chunks(per) {
                    delete(&mut tx, table, &plan.table, chunk)
                        .await
                        .map_err(|e| blame(chunk, e))?;
                }
            }
        }
    }
    match run {
        Run::Commit => {
            tx.commit()
                .await
                .map_err(|e| db_error(format!("commit the batch into {table}"), e))?;
            Ok(Applied::Committed)
        }
        Run::FindRow => {
            tx.rollback().await.map_err(|e| db_error("roll back", e))?;
            Ok(Applied::RolledBack)
        }
    }
}

async fn ddl(
    tx: &mut Transaction<'_, Postgres>,
    table: &str,
    plan: &Plan<'_>,
) -> Result<(), DbError> {
    let t = &plan.table;
    let mut stmts = Vec::new();
    if plan.create {
        super::creation_lock(tx, table)
            .await
            .map_err(|e| db_error(format!("create table {table}"), e))?;
        let mut defs: Vec<String> = t
            .columns
            .iter()
            .map(|c| {
                let null = if c.nullable { "" } else { " NOT NULL" };
                format!("{} {}{null}", D.quote(&c.name), D.type_name(&c.ty))
            })
            .collect();
        if !t.key.is_empty() {
            let key: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
            defs.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        stmts.push((
            format!("create table {table}"),
            format!("CREATE TABLE IF NOT EXISTS {table} ({})", defs.join(", ")),
        ));
    }
    let typed = |name: &String| {
        let ty = t
            .column(name)
            .map(|c| D.type_name(&c.ty))
            .unwrap_or_default();
        (D.quote(name), ty)
    };
    if !plan.add.is_empty() {
        let parts: Vec<String> = plan
            .add
            .iter()
            .map(typed)
            .map(|(n, ty)| format!("ADD COLUMN IF NOT EXISTS {n} {ty}"))
            .collect();
        stmts.push((
            format!("add columns to {table}"),
            format!("ALTER TABLE {table} {}", parts.join(", ")),
        ));
    }
    if !plan.alter.is_empty() {
        // casts between instants, days and text read the session's zone:
        // make it UTC, the zone abrq writes in
        stmts.push((
            "set the time zone for widening".into(),
            "SET LOCAL TimeZone = 'UTC'".into(),
        ));
        let parts: Vec<String> = plan
            .alter
            .iter()
            .map(typed)
            .map(|(n, ty)| format!("ALTER COLUMN {n} TYPE {ty} USING {n}::{ty}"))
            .collect();
        stmts.push((
            format!("widen columns of {table}"),
            format!("ALTER TABLE {table} {}", parts.join(", ")),
        ));
    }
    for (op, sql) in stmts {
        sqlx::query(&sql)
            .execute(&mut **tx)
            .await
            .map_err(|e| db_error(op, e))?;
    }
    Ok(())
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

async fn write(
    tx: &mut Transaction<'_, Postgres>,
    table: &str,
    t: &TableInfo,
    columns: &[usize],
    rows: &[Row<'_>],
    upsert: bool,
) -> Result<(), DbError> {
    let verb = if upsert { "upsert" } else { "insert" };
    let op = || format!("{verb} {} rows into {table}", rows.len());
    if columns.is_empty() {
        for _ in rows {
            sqlx::query(&format!("INSERT INTO {table} DEFAULT VALUES"))
                .execute(&mut **tx)
                .await
                .map_err(|e| db_error(op(), e))?;
        }
        return Ok(());
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
        let set: Vec<String> = columns
            .iter()
            .filter(|&&c| !t.key.contains(&t.columns[c].name))
            .map(|&c| {
                let n = D.quote(&t.columns[c].name);
                format!("{n} = EXCLUDED.{n}")
            })
            .collect();
        sql.push_str(&format!(" ON CONFLICT ({}) DO ", key.join(", ")));
        if set.is_empty() {
            sql.push_str("NOTHING");
        } else {
            sql.push_str(&format!("UPDATE SET {}", set.join(", ")));
        }
    }
    execute_with_arrays(tx, &sql, t, columns, rows, op).await
}

async fn delete(
    tx: &mut Transaction<'_, Postgres>,
    table: &str,
    t: &TableInfo,
    rows: &[Row<'_>],
) -> Result<(), DbError> {
    let op = || format!("delete {} rows from {table}", rows.len());
    let index = t.index();
    let key: Vec<usize> = t.key.iter().map(|k| index[k.as_str()]).collect();
    let names: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
    let sql = format!(
        "DELETE FROM {table} WHERE ({}) IN ({})",
        names.join(", "),
        unnest_select(t, &key)
    );
    execute_with_arrays(tx, &sql, t, &key, rows, op).await
}

/// Runs `sql` with one typed array per table column in `columns` (by
/// position), filled from `rows`; `op` says what for in an error.
async fn execute_with_arrays(
    tx: &mut Transaction<'_, Postgres>,
    sql: &str,
    t: &TableInfo,
    columns: &[usize],
    rows: &[Row<'_>],
    op: impl Fn() -> String,
) -> Result<(), DbError> {
    let cols: Vec<(usize, &SqlType)> = columns
        .iter()
        .enumerate()
        .map(|(i, &c)| (i, &t.columns[c].ty))
        .collect();
    bind_arrays(sqlx::query(sql), &cols, rows)
        .map_err(|e| db_error(op(), e))?
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error(op(), e))?;
    Ok(())
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
