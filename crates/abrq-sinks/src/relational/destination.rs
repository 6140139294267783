//! [`RelationalDestination`]: the delivery flow both engines share. Plan
//! the batch against the table (cached between batches, re-read whenever
//! the plan would change it or anything failed), run the plan as one
//! transaction, and when the database refuses a row, find which one.

use std::sync::{Arc, Mutex};

use abrq_core::{Batch, BatchMeta, CheckReport, DeliveryError, DeliveryReport, Destination};
use async_trait::async_trait;

use super::config::RelationalSettings;
use super::errors::DbError;
use super::plan::{plan, Plan, Policy, Step};
use super::table::TableInfo;
use crate::failure::Failure;

/// How a plan is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// The delivery: ledger row, every step, commit.
    Commit,
    /// After a refused row: the same steps one row per statement, to name
    /// the row; always rolled back, and no ledger row.
    FindRow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Committed,
    /// The ledger already had the batch: nothing was written.
    AlreadyApplied,
    /// A `FindRow` run that went through.
    RolledBack,
}

/// A failed run: the database error, and the batch item whose statement
/// failed when the statement held only that row.
#[derive(Debug)]
pub struct RunError {
    pub error: DbError,
    pub item: Option<usize>,
}

impl From<DbError> for RunError {
    fn from(error: DbError) -> Self {
        RunError { error, item: None }
    }
}

/// What one engine does; everything else is shared.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> &'static str;
    /// The target table as the catalog has it, or `None` when missing.
    async fn load_table(&self) -> Result<Option<TableInfo>, DbError>;
    /// Runs `plan` for the batch described by `meta`.
    async fn apply(&self, meta: &BatchMeta, plan: &Plan<'_>, run: Run)
        -> Result<Applied, RunError>;
    /// Connects and makes sure the ledger exists; returns where it connected.
    async fn connect(&self) -> Result<String, DbError>;
    /// The table's quoted, qualified name, for messages.
    async fn table_name(&self) -> Result<String, DbError>;
}

pub struct RelationalDestination<B> {
    backend: B,
    settings: Arc<RelationalSettings>,
    policy: Policy,
    /// The table as last seen: `None` = unknown, `Some(None)` = missing.
    cache: Mutex<Option<Option<TableInfo>>>,
}

impl<B: Backend> RelationalDestination<B> {
    pub fn new(backend: B, settings: Arc<RelationalSettings>) -> Self {
        let policy = Policy {
            dialect: settings.dialect,
            drift: settings.drift,
            truncate: settings.truncate,
            mode: settings.mode,
            key: settings.key.clone(),
        };
        RelationalDestination {
            backend,
            settings,
            policy,
            cache: Mutex::new(None),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn cached(&self) -> Option<Option<TableInfo>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn remember(&self, t: Option<Option<TableInfo>>) {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    /// Reads the table from the catalog (None: it does not exist yet) and
    /// caches what it read.
    async fn reload_table(&self) -> Result<Option<TableInfo>, DeliveryError> {
        let table = self
            .backend
            .load_table()
            .await
            .map_err(DbError::into_delivery)?;
        self.remember(Some(table.clone()));
        Ok(table)
    }

    /// Plans against the cached table; re-reads the catalog first when
    /// nothing is cached, and again when the cached view would lead to DDL
    /// or a drift error (an operator may have changed the table since).
    async fn plan<'a>(&self, batch: &'a Batch) -> Result<Plan<'a>, DeliveryError> {
        if let Some(table) = self.cached() {
            match plan(batch, table.as_ref(), &self.policy) {
                Ok(p) if !p.has_ddl() => return Ok(p),
                Ok(_) | Err(_) => {}
            }
        }
        let table = self.reload_table().await?;
        Ok(plan(batch, table.as_ref(), &self.policy)?)
    }

    /// Runs the batch again one row per statement to name the refused row.
    async fn find_row(&self, batch: &Batch, first: DbError) -> DeliveryError {
        let table = match self.backend.load_table().await {
            Ok(t) => t,
            Err(_) => return first.into_delivery(),
        };
        let plan = match plan(batch, table.as_ref(), &self.policy) {
            Ok(p) => p,
            Err(e) => return e.into(),
        };
        match self.backend.apply(&batch.meta, &plan, Run::FindRow).await {
            Err(RunError {
                error,
                item: Some(i),
            }) => error.into_delivery().at_record(i),
            Err(RunError { error, item: None }) => error.into_delivery(),
            // Not reproduced (the table changed in between): let the
            // retry decide with a fresh view rather than dead-letter.
            Ok(_) => Failure::Conflict.error(first),
        }
    }
}

/// Bytes of values written, as the report's `bytes`.
fn written_bytes(plan: &Plan<'_>) -> u64 {
    let mut n = 0usize;
    for step in &plan.steps {
        match step {
            Step::Truncate => {}
            Step::Write { rows, .. } | Step::Delete { rows } => {
                n += rows
                    .iter()
                    .flat_map(|r| r.cells.iter())
                    .map(|c| c.wire_len())
                    .sum::<usize>();
            }
        }
    }
    n as u64
}

#[async_trait]
impl<B: Backend> Destination for RelationalDestination<B> {
    fn kind(&self) -> &'static str {
        self.backend.kind()
    }

    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        let plan = self
            .plan(batch)
            .await
            .inspect_err(|_| self.remember(None))?;
        match self.backend.apply(&batch.meta, &plan, Run::Commit).await {
            Ok(Applied::Committed) => {
                self.remember(Some(Some(plan.table.clone())));
                let c = plan.counts;
                Ok(DeliveryReport {
                    bytes: written_bytes(&plan),
                    ignored_truncates: c.ignored_truncates,
                    ignored_schemas: c.ignored_schemas,
                    dropped_values: c.dropped_values,
                    dropped_rows: c.dropped_rows,
                })
            }
            // Counted when it was applied; counting again would double
            // the drop metrics for one batch.
            Ok(Applied::AlreadyApplied) | Ok(Applied::RolledBack) => {
                self.remember(None);
                Ok(DeliveryReport::default())
            }
            Err(RunError { error, item }) => {
                self.remember(None);
                match item {
                    Some(i) => Err(error.into_delivery().at_record(i)),
                    None if error.kind.blames_a_row() => Err(self.find_row(batch, error).await),
                    None => Err(error.into_delivery()),
                }
            }
        }
    }

    /// Connects, makes sure the ledger exists (proving the rights a
    /// delivery needs), and says whether the table exists and its columns;
    /// the stream's columns are only known once a batch arrives.
    async fn check(&self) -> Result<CheckReport, DeliveryError> {
        let s = &self.settings;
        let at = self
            .backend
            .connect()
            .await
            .map_err(DbError::into_delivery)?;
        let name = self
            .backend
            .table_name()
            .await
            .map_err(DbError::into_delivery)?;
        let table = self.reload_table().await?;
        let d = s.dialect;
        let about = match &table {
            None => format!(
                "table {name} does not exist yet; the first batch creates it from its columns"
            ),
            Some(t) => format!("table {name} exists: {}", t.describe(|ty| d.type_name(ty))),
        };
        if s.mode == super::config::WriteMode::Upsert
            && table.as_ref().is_some_and(|t| t.key.is_empty())
        {
            return Err(Failure::Misconfigured
                .error(format!("{about}; upsert mode needs a primary key on it")));
        }
        Ok(CheckReport {
            detail: format!(
                "{} destination {:?} of stream {:?}: connected to {at}; {about}",
                self.backend.kind(),
                s.destination,
                s.stream
            ),
        })
    }
}
