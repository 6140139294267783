//! One batch, one MySQL transaction. MySQL commits implicitly around DDL,
//! so the ledger is checked first, the (idempotent) DDL runs before the
//! transaction, and the transaction holds the ledger row, the truncates
//! (`DELETE FROM`: `TRUNCATE` would commit) and the rows. Rows go in as
//! multi-row `VALUES`, each statement under 65,535 placeholders and half of
//! `max_allowed_packet`.

use abrq_core::BatchMeta;
use sqlx::mysql::{MySqlArguments, MySqlPool};
use sqlx::{Arguments, MySql, Transaction};

use super::errors::{db_error, number, DUPLICATE_ENTRY};
use super::D;
use crate::relational::destination::{Applied, Run, RunError};
use crate::relational::errors::DbError;
use crate::relational::plan::{Plan, Row, Step};
use crate::relational::table::TableInfo;
use crate::relational::types::{Cell, SqlType};

const MAX_PLACEHOLDERS: usize = 65_535;

pub struct Ctx<'a> {
    pub pool: &'a MySqlPool,
    pub ledger: &'a str,
    pub table: &'a str,
    pub packet: usize,
}

pub async fn apply(
    ctx: &Ctx<'_>,
    meta: &BatchMeta,
    plan: &Plan<'_>,
    run: Run,
) -> Result<Applied, RunError> {
    let (ledger, table) = (ctx.ledger, ctx.table);
    let record_op = || format!("record the batch in {ledger}");
    if run == Run::Commit {
        let seen: Option<i32> = sqlx::query_scalar(&format!(
            "SELECT 1 FROM {ledger} WHERE stream = ? AND idempotency_key = ? AND destination_table = ?"
        ))
        .bind(&meta.stream)
        .bind(&meta.idempotency_key)
        .bind(table)
        .fetch_optional(ctx.pool)
        .await
        .map_err(|e| db_error(record_op(), e))?;
        if seen.is_some() {
            return Ok(Applied::AlreadyApplied);
        }
    }
    ddl(ctx, plan).await?;
    let mut tx = ctx
        .pool
        .begin()
        .await
        .map_err(|e| db_error("begin a transaction", e))?;
    if run == Run::Commit {
        let insert = sqlx::query(&format!(
            "INSERT INTO {ledger} (stream, idempotency_key, destination_table) VALUES (?, ?, ?)"
        ))
        .bind(&meta.stream)
        .bind(&meta.idempotency_key)
        .bind(table)
        .execute(&mut *tx)
        .await;
        match insert {
            Ok(_) => {}
            // another process applied it between the check and now
            Err(e) if number(&e) == Some(DUPLICATE_ENTRY) => return Ok(Applied::AlreadyApplied),
            Err(e) => return Err(db_error(record_op(), e).into()),
        }
    }
    let one = run == Run::FindRow;
    let blame = |rows: &[Row], error: DbError| RunError {
        item: (rows.len() == 1).then(|| rows[0].item),
        error,
    };
    for step in &plan.steps {
        match step {
            Step::Truncate => {
                sqlx::query(&format!("DELETE FROM {table}"))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| db_error(format!("empty {table}"), e))?;
            }
            Step::Write {
                upsert,
                columns,
                rows,
            } => {
                for chunk in chunks(rows, columns.len(), ctx.packet, one) {
                    write(&mut tx, table, &plan.table, columns, chunk, *upsert)
                        .await
                        .map_err(|e| blame(chunk, e))?;
                }
            }
            Step::Delete { rows } => {
                for chunk in chunks(rows, plan.table.key.len(), ctx.packet, one) {
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

async fn ddl(ctx: &Ctx<'_>, plan: &Plan<'_>) -> Result<(), DbError> {
    let (t, table) = (&plan.table, ctx.table);
    let def = |name: &String| -> String {
        let Some(c) = t.column(name) else {
            return String::new();
        };
        let mut ty = D.type_name(&c.ty);
        // a key column cannot be longtext or json: give it a bounded length
        if t.key.contains(name) && matches!(c.ty, SqlType::Text(None) | SqlType::Json) {
            ty = "varchar(255)".into();
        }
        let null = if c.nullable { "NULL" } else { "NOT NULL" };
        format!("{} {ty} {null}", D.quote(name))
    };
    let mut stmts = Vec::new();
    if plan.create {
        let mut defs: Vec<String> = t.columns.iter().map(|c| def(&c.name)).collect();
        if !t.key.is_empty() {
            let key: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
            defs.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        stmts.push((
            format!("create table {table}"),
            format!("CREATE TABLE IF NOT EXISTS {table} ({})", defs.join(", ")),
        ));
    }
    for (names, clause, what) in [
        (&plan.add, "ADD COLUMN", "add columns to"),
        (&plan.alter, "MODIFY COLUMN", "widen columns of"),
    ] {
        if names.is_empty() {
            continue;
        }
        let parts: Vec<String> = names
            .iter()
            .map(|n| format!("{clause} {}", def(n)))
            .collect();
        stmts.push((
            format!("{what} {table}"),
            format!("ALTER TABLE {table} {}", parts.join(", ")),
        ));
    }
    for (op, sql) in stmts {
        sqlx::query(&sql)
            .execute(ctx.pool)
            .await
            .map_err(|e| db_error(op, e))?;
    }
    Ok(())
}

/// `(?, ?), (?, ?)` for `rows` rows of `width` values.
fn placeholders(rows: usize, width: usize) -> String {
    let one = format!("({})", vec!["?"; width].join(", "));
    vec![one; rows].join(", ")
}

async fn write(
    tx: &mut Transaction<'_, MySql>,
    table: &str,
    t: &TableInfo,
    columns: &[usize],
    rows: &[Row<'_>],
    upsert: bool,
) -> Result<(), DbError> {
    let verb = if upsert { "upsert" } else { "insert" };
    let op = || format!("{verb} {} rows into {table}", rows.len());
    let names: Vec<String> = columns
        .iter()
        .map(|&c| D.quote(&t.columns[c].name))
        .collect();
    let mut sql = format!(
        "INSERT INTO {table} ({}) VALUES {}",
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
        if set.is_empty() {
            let k = D.quote(&t.key[0]);
            set.push(format!("{k} = {k}"));
        }
        sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {}", set.join(", ")));
    }
    let args =
        arguments(rows.iter().flat_map(|r| r.cells.iter())).map_err(|e| db_error(op(), e))?;
    sqlx::query_with(&sql, args)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error(op(), e))?;
    Ok(())
}

async fn delete(
    tx: &mut Transaction<'_, MySql>,
    table: &str,
    t: &TableInfo,
    rows: &[Row<'_>],
) -> Result<(), DbError> {
    let op = || format!("delete {} rows from {table}", rows.len());
    let names: Vec<String> = t.key.iter().map(|k| D.quote(k)).collect();
    let sql = format!(
        "DELETE FROM {table} WHERE ({}) IN ({})",
        names.join(", "),
        placeholders(rows.len(), names.len())
    );
    let args =
        arguments(rows.iter().flat_map(|r| r.cells.iter())).map_err(|e| db_error(op(), e))?;
    sqlx::query_with(&sql, args)
        .execute(&mut **tx)
        .await
        .map_err(|e| db_error(op(), e))?;
    Ok(())
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
