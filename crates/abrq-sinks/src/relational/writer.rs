//! One batch, one transaction, in the same order for every dialect: the
//! ledger row first (a batch already there is skipped), the DDL, then each
//! target table's steps in batch order, and commit; or, to name a refused row, the
//! same steps one row per statement, rolled back. The statements are built
//! here from each dialect's pieces ([`Statements`]: `postgres/write.rs`,
//! `mysql/write.rs`), and every failure is named for what was being done.

use abrq_core::BatchMeta;
use async_trait::async_trait;

use super::connection::why_unreachable;
use super::destination::{Applied, Run, RunError};
use super::errors::DbError;
use super::plan::{Plan, Row, Step};
use super::table::TableInfo;
use super::types::Dialect;

/// A dialect's connection.
pub type Conn<S> = <<S as Statements>::Db as sqlx::Database>::Connection;

/// One statement and what it does, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stmt {
    pub op: String,
    pub sql: String,
}

/// What one dialect says, for one batch into one table.
#[async_trait]
pub trait Statements: Sync {
    type Db: sqlx::Database;
    const DIALECT: Dialect;

    /// PostgreSQL's DDL is transactional, so it runs inside the batch's
    /// transaction; MySQL commits around DDL, so it runs (idempotently)
    /// before the transaction opens.
    const DDL_IN_TRANSACTION: bool;

    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    /// The quoted, qualified target table.
    fn table(&self) -> &str;

    /// The dialect's classification of a driver error.
    fn db_error(&self, op: String, source: sqlx::Error) -> DbError;

    /// Runs one statement without parameters.
    async fn execute(&self, conn: &mut Conn<Self>, sql: &str) -> Result<(), sqlx::Error>;

    /// Whether the ledger holds the batch already, read before anything
    /// runs. A dialect whose DDL commits by itself reads it here, so an
    /// applied batch changes nothing; the others learn it from `record`.
    async fn seen(&self, _meta: &BatchMeta) -> Result<bool, DbError> {
        Ok(false)
    }

    /// Adds the batch's ledger row inside the transaction: false when it
    /// was there already.
    async fn record(&self, conn: &mut Conn<Self>, meta: &BatchMeta) -> Result<bool, DbError>;

    /// Adds the ledger rows of a group's batches (one ledger key for all),
    /// saying for each whether it is new; a dialect may do it in one
    /// statement.
    async fn record_all(
        &self,
        conn: &mut Conn<Self>,
        metas: &[&BatchMeta],
    ) -> Result<Vec<bool>, DbError> {
        let mut fresh = Vec::with_capacity(metas.len());
        for meta in metas {
            fresh.push(self.record(conn, meta).await?);
        }
        Ok(fresh)
    }

    /// Runs first when the plan creates the table.
    fn before_create(&self) -> Option<Stmt> {
        None
    }

    /// What follows CREATE TABLE's column list (MySQL's table comment).
    fn table_options(&self) -> String {
        String::new()
    }

    /// Runs after CREATE TABLE (PostgreSQL's table comment).
    fn after_create(&self) -> Option<Stmt> {
        None
    }

    /// The ALTER TABLE clauses moving the primary key to `t.key`.
    fn rekey(&self, t: &TableInfo) -> String;

    /// A column's definition in CREATE TABLE: name, type, nullability.
    fn column(&self, t: &TableInfo, name: &str) -> String;

    /// An ALTER TABLE clause adding a column.
    fn add_column(&self, t: &TableInfo, name: &str) -> String;

    /// Whether a column's definition carries its comment (MySQL), so a
    /// column created or added needs no label of its own.
    const COMMENT_IN_DEFINITION: bool;

    /// Labels a column with the source column it holds (`t` says which).
    fn label(&self, t: &TableInfo, name: &str) -> Stmt;

    /// Runs first when the plan widens columns.
    fn before_widen(&self) -> Option<Stmt> {
        None
    }

    /// An ALTER TABLE clause widening a column to its type in `t`.
    fn widen_column(&self, t: &TableInfo, name: &str) -> String;

    /// Empties the table inside the transaction.
    fn truncate(&self) -> Stmt;

    /// `rows` split into statements of `width` values a row; one row each
    /// when `one`.
    fn chunks<'r, 'a>(&self, rows: &'r [Row<'a>], width: usize, one: bool) -> Vec<&'r [Row<'a>]>;

    /// Inserts (or upserts on the key) `rows` into `columns` of `t`.
    async fn write(
        &self,
        conn: &mut Conn<Self>,
        t: &TableInfo,
        columns: &[usize],
        rows: &[Row<'_>],
        upsert: bool,
    ) -> Result<(), sqlx::Error>;

    /// Appends runs of rows (from consecutive batches of a group, one
    /// shape) into `columns` of `t`; a dialect may send them as one
    /// statement.
    async fn append_runs(
        &self,
        conn: &mut Conn<Self>,
        t: &TableInfo,
        columns: &[usize],
        runs: &[&[Row<'_>]],
    ) -> Result<(), sqlx::Error> {
        for run in runs {
            for chunk in self.chunks(run, columns.len(), false) {
                self.write(conn, t, columns, chunk, false).await?;
            }
        }
        Ok(())
    }

    /// Deletes `rows` by the key of `t`.
    async fn delete(
        &self,
        conn: &mut Conn<Self>,
        t: &TableInfo,
        rows: &[Row<'_>],
    ) -> Result<(), sqlx::Error>;

    /// Deletes one row of a table without a key whose `columns` equal
    /// `row`'s cells (NULL equal to NULL).
    async fn delete_one(
        &self,
        conn: &mut Conn<Self>,
        t: &TableInfo,
        columns: &[usize],
        row: &Row<'_>,
    ) -> Result<(), sqlx::Error>;
}

/// The DDL the plan needs, in order: create, rename and drop columns
/// after the source's, add columns, widen columns, move the key, label
/// columns with their source column.
pub fn ddl<S: Statements>(s: &S, plan: &Plan<'_>) -> Vec<Stmt> {
    let (t, table) = (&plan.table, s.table());
    let mut out = Vec::new();
    if plan.create {
        out.extend(s.before_create());
        let mut defs: Vec<String> = t.columns.iter().map(|c| s.column(t, &c.name)).collect();
        if !t.key.is_empty() {
            let key: Vec<String> = t.key.iter().map(|k| S::DIALECT.quote(k)).collect();
            defs.push(format!("PRIMARY KEY ({})", key.join(", ")));
        }
        out.push(Stmt {
            op: format!("create table {table}"),
            sql: format!(
                "CREATE TABLE IF NOT EXISTS {table} ({}){}",
                defs.join(", "),
                s.table_options()
            ),
        });
        out.extend(s.after_create());
    }
    for (old, new) in &plan.rename {
        let (o, n) = (S::DIALECT.quote(old), S::DIALECT.quote(new));
        out.push(Stmt {
            op: format!("rename column {old:?} of {table} to {new:?}, as its source column was"),
            sql: format!("ALTER TABLE {table} RENAME COLUMN {o} TO {n}"),
        });
    }
    if !plan.drop.is_empty() {
        let parts: Vec<String> = plan
            .drop
            .iter()
            .map(|n| format!("DROP COLUMN {}", S::DIALECT.quote(n)))
            .collect();
        out.push(Stmt {
            op: format!(
                "drop columns {} of {table}, as the source did",
                plan.drop.join(", ")
            ),
            sql: format!("ALTER TABLE {table} {}", parts.join(", ")),
        });
    }
    if !plan.add.is_empty() {
        let parts: Vec<String> = plan.add.iter().map(|n| s.add_column(t, n)).collect();
        out.push(Stmt {
            op: format!("add columns to {table}"),
            sql: format!("ALTER TABLE {table} {}", parts.join(", ")),
        });
    }
    if !plan.alter.is_empty() {
        out.extend(s.before_widen());
        let parts: Vec<String> = plan.alter.iter().map(|n| s.widen_column(t, n)).collect();
        out.push(Stmt {
            op: format!("widen columns of {table}"),
            sql: format!("ALTER TABLE {table} {}", parts.join(", ")),
        });
    }
    if !plan.rekey.is_empty() {
        out.push(Stmt {
            op: format!(
                "move the primary key of {table} from ({}) to ({})",
                plan.rekey.join(", "),
                t.key.join(", ")
            ),
            sql: format!("ALTER TABLE {table} {}", s.rekey(t)),
        });
    }
    for name in &plan.label {
        let defined = plan.create || plan.add.contains(name);
        if !(S::COMMENT_IN_DEFINITION && defined) {
            out.push(s.label(t, name));
        }
    }
    out
}

async fn run_ddl<S: Statements>(s: &S, conn: &mut Conn<S>, plan: &Plan<'_>) -> Result<(), DbError> {
    run_stmts(s, conn, ddl(s, plan)).await
}

async fn run_stmts<S: Statements>(
    s: &S,
    conn: &mut Conn<S>,
    stmts: Vec<Stmt>,
) -> Result<(), DbError> {
    for Stmt { op, sql } in stmts {
        s.execute(conn, &sql).await.map_err(|e| s.db_error(op, e))?;
    }
    Ok(())
}

/// Runs every part of the batch `meta` describes, each `S` speaking for
/// its part's table (the first one's ledger row stands for the batch).
pub async fn apply<S: Statements>(
    parts: &[(S, &Plan<'_>)],
    meta: &BatchMeta,
    run: Run,
) -> Result<Applied, RunError> {
    let Some((s, _)) = parts.first() else {
        return Ok(Applied::Committed);
    };
    if run == Run::Commit && s.seen(meta).await? {
        return Ok(Applied::AlreadyApplied);
    }
    if !S::DDL_IN_TRANSACTION {
        for (s, plan) in parts {
            let mut conn = match s.pool().acquire().await {
                Ok(c) => c,
                Err(e) => {
                    let e = why_unreachable(s.pool(), e).await;
                    return Err(s
                        .db_error(format!("connect to change {}", s.table()), e)
                        .into());
                }
            };
            run_ddl(s, &mut conn, plan).await?;
        }
    }
    let mut conn = Exclusive::acquire(s).await?;
    let mut tx = conn
        .begin()
        .await
        .map_err(|e| s.db_error("begin a transaction".into(), e))?;
    if run == Run::Commit && !s.record(&mut tx, meta).await? {
        tx.rollback()
            .await
            .map_err(|e| s.db_error("roll back".into(), e))?;
        conn.finished();
        return Ok(Applied::AlreadyApplied);
    }
    for (s, plan) in parts {
        if S::DDL_IN_TRANSACTION {
            run_ddl(s, &mut tx, plan).await?;
        }
        run_steps(s, &mut tx, plan, run).await?;
    }
    let tables: Vec<&str> = parts.iter().map(|(s, _)| s.table()).collect();
    let tables = tables.join(", ");
    match run {
        Run::Commit => {
            tx.commit()
                .await
                .map_err(|e| s.db_error(format!("commit the batch into {tables}"), e))?;
            conn.finished();
            Ok(Applied::Committed)
        }
        Run::FindRow => {
            tx.rollback()
                .await
                .map_err(|e| s.db_error("roll back".into(), e))?;
            conn.finished();
            Ok(Applied::RolledBack)
        }
    }
}

/// Runs several batches in one transaction, in order, each under its own
/// ledger row: a batch whose row is there already is skipped. Only for a
/// dialect whose DDL is transactional. Behind a slow link the round trips
/// are the cost, so the ledger rows go in together and appends that follow
/// one another into one table and columns go in together (`Appends`):
/// a group of plain appends is begin, ledger, one copy, commit.
pub async fn apply_group<S: Statements>(
    batches: &[(&BatchMeta, Vec<(S, &Plan<'_>)>)],
) -> Result<Vec<Applied>, RunError> {
    let Some(s) = batches
        .iter()
        .find_map(|(_, parts)| parts.first().map(|(s, _)| s))
    else {
        return Ok(vec![Applied::Committed; batches.len()]);
    };
    assert!(S::DDL_IN_TRANSACTION, "a group needs transactional DDL");
    let mut conn = Exclusive::acquire(s).await?;
    let mut tx = conn
        .begin()
        .await
        .map_err(|e| s.db_error("begin a transaction".into(), e))?;
    let metas: Vec<&BatchMeta> = batches
        .iter()
        .filter(|(_, parts)| !parts.is_empty())
        .map(|(meta, _)| *meta)
        .collect();
    let mut fresh = s.record_all(&mut tx, &metas).await?.into_iter();
    let mut applied = Vec::with_capacity(batches.len());
    let mut appends: Option<Appends<'_, '_, S>> = None;
    for (_, parts) in batches {
        if parts.is_empty() {
            applied.push(Applied::Committed);
            continue;
        }
        if !fresh.next().unwrap_or(false) {
            applied.push(Applied::AlreadyApplied);
            continue;
        }
        for (s, plan) in parts {
            let ddl = ddl(s, plan);
            if !ddl.is_empty() {
                // the appends before it see the table as it was
                if let Some(open) = appends.take() {
                    open.run(&mut tx).await?;
                }
                run_stmts(s, &mut tx, ddl).await?;
            }
            for step in &plan.steps {
                if appends.as_mut().is_some_and(|a| a.takes(s, plan, step)) {
                    continue;
                }
                if let Some(open) = appends.take() {
                    open.run(&mut tx).await?;
                }
                appends = Appends::open(s, plan, step);
                if appends.is_none() {
                    run_step(s, &mut tx, plan, step, Run::Commit).await?;
                }
            }
        }
        applied.push(Applied::Committed);
    }
    if let Some(open) = appends.take() {
        open.run(&mut tx).await?;
    }
    tx.commit()
        .await
        .map_err(|e| s.db_error(format!("commit {} batches", batches.len()), e))?;
    conn.finished();
    Ok(applied)
}

/// Appended rows of one table and column list, from consecutive steps of
/// a group's batches, waiting to be sent together.
struct Appends<'g, 'a, S> {
    s: &'g S,
    plan: &'g Plan<'a>,
    columns: &'g [usize],
    runs: Vec<&'g [Row<'a>]>,
}

impl<'g, 'a, S: Statements> Appends<'g, 'a, S> {
    /// An append worth holding: rows into named columns.
    fn open(s: &'g S, plan: &'g Plan<'a>, step: &'g Step<'a>) -> Option<Self> {
        match step {
            Step::Write {
                upsert: false,
                columns,
                rows,
            } if !columns.is_empty() && !rows.is_empty() => Some(Appends {
                s,
                plan,
                columns,
                runs: vec![rows],
            }),
            _ => None,
        }
    }

    /// Takes `step` when it appends into the same table and columns.
    fn takes(&mut self, s: &S, plan: &'g Plan<'a>, step: &'g Step<'a>) -> bool {
        let Step::Write {
            upsert: false,
            columns,
            rows,
        } = step
        else {
            return false;
        };
        let names = |p: &'g Plan<'a>, cols: &'g [usize]| {
            cols.iter().map(move |&c| p.table.columns[c].name.as_str())
        };
        if s.table() != self.s.table() || !names(plan, columns).eq(names(self.plan, self.columns)) {
            return false;
        }
        if !rows.is_empty() {
            self.runs.push(rows);
        }
        true
    }

    async fn run(self, tx: &mut Conn<S>) -> Result<(), RunError> {
        let (s, table) = (self.s, self.s.table());
        let n: usize = self.runs.iter().map(|r| r.len()).sum();
        s.append_runs(tx, &self.plan.table, self.columns, &self.runs)
            .await
            .map_err(|e| RunError {
                item: None,
                error: s.db_error(format!("insert {n} rows into {table}"), e),
            })
    }
}

/// The connection a batch's transaction runs on, closed instead of going
/// back to the pool unless the transaction ended cleanly. An attempt cut
/// off at its timeout (or failed) may leave it mid-protocol, a `COPY`
/// never ended above all, and the driver would hand its next user the
/// answers meant for this one: a ledger insert reading "0 rows" would
/// skip a batch that was never applied.
struct Exclusive<DB: sqlx::Database> {
    conn: sqlx::pool::PoolConnection<DB>,
    clean: bool,
}

impl<DB: sqlx::Database> Exclusive<DB> {
    async fn acquire<S: Statements<Db = DB>>(s: &S) -> Result<Self, DbError> {
        let conn = match s.pool().acquire().await {
            Ok(c) => c,
            Err(e) => {
                let e = why_unreachable(s.pool(), e).await;
                return Err(s.db_error("connect".into(), e));
            }
        };
        Ok(Exclusive { conn, clean: false })
    }

    fn begin(
        &mut self,
    ) -> futures::future::BoxFuture<'_, Result<sqlx::Transaction<'_, DB>, sqlx::Error>> {
        use sqlx::Connection;
        self.conn.begin()
    }

    /// The transaction committed or rolled back: the connection may be
    /// used again.
    fn finished(&mut self) {
        self.clean = true;
    }
}

impl<DB: sqlx::Database> Drop for Exclusive<DB> {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

/// One table's truncates, writes and deletes, in batch order.
async fn run_steps<S: Statements>(
    s: &S,
    tx: &mut Conn<S>,
    plan: &Plan<'_>,
    run: Run,
) -> Result<(), RunError> {
    for step in &plan.steps {
        run_step(s, tx, plan, step, run).await?;
    }
    Ok(())
}

/// One truncate, write or delete of a table's plan.
async fn run_step<S: Statements>(
    s: &S,
    tx: &mut Conn<S>,
    plan: &Plan<'_>,
    step: &Step<'_>,
    run: Run,
) -> Result<(), RunError> {
    let table = s.table();
    let one = run == Run::FindRow;
    let blame = |rows: &[Row], op: String, e: sqlx::Error| RunError {
        item: (rows.len() == 1).then(|| rows[0].item),
        error: s.db_error(op, e),
    };
    match step {
        Step::Truncate => {
            let Stmt { op, sql } = s.truncate();
            s.execute(tx, &sql).await.map_err(|e| s.db_error(op, e))?;
        }
        Step::Write {
            upsert,
            columns,
            rows,
        } => {
            let verb = if *upsert { "upsert" } else { "insert" };
            for chunk in s.chunks(rows, columns.len(), one) {
                s.write(tx, &plan.table, columns, chunk, *upsert)
                    .await
                    .map_err(|e| {
                        let op = format!("{verb} {} rows into {table}", chunk.len());
                        blame(chunk, op, e)
                    })?;
            }
        }
        Step::DeleteOne { columns, row } => {
            s.delete_one(tx, &plan.table, columns, row)
                .await
                .map_err(|e| {
                    let op = format!("delete a row equal to the old row from {table}");
                    blame(std::slice::from_ref(row), op, e)
                })?;
        }
        Step::Delete { rows } => {
            for chunk in s.chunks(rows, plan.table.key.len(), one) {
                s.delete(tx, &plan.table, chunk).await.map_err(|e| {
                    let op = format!("delete {} rows from {table}", chunk.len());
                    blame(chunk, op, e)
                })?;
            }
        }
    }
    Ok(())
}
