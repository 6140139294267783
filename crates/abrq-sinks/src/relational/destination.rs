//! [`RelationalDestination`]: the delivery flow both engines share. Split
//! the batch by target table (one, or one per source table when `table`
//! holds `{table}`), plan each part against its table (cached between
//! batches, re-read whenever the plan would change it or anything failed),
//! run every part in one transaction, and when the database refuses a
//! row, find which one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use abrq_core::{
    scoped, Batch, BatchMeta, CheckReport, DeliveryError, DeliveryReport, Destination, Item,
};
use async_trait::async_trait;

use super::config::RelationalSettings;
use super::errors::DbError;
use super::plan::{plan, Items, Plan, Policy, Step};
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

/// One target table's part of a batch: its (unquoted) name and plan.
pub struct Part<'a> {
    pub table: String,
    pub plan: Plan<'a>,
}

/// What one engine does; everything else is shared.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> &'static str;
    /// The target table as the catalog has it, or `None` when missing.
    async fn load_table(&self, table: &str) -> Result<Option<TableInfo>, DbError>;
    /// Runs every part of the batch described by `meta`, in one
    /// transaction with one ledger row.
    async fn apply(
        &self,
        meta: &BatchMeta,
        parts: &[Part<'_>],
        run: Run,
    ) -> Result<Applied, RunError>;
    /// Whether [`Backend::apply_group`] runs several batches in one
    /// transaction (an engine whose DDL commits by itself cannot).
    fn groups_batches(&self) -> bool {
        false
    }
    /// Runs several batches' parts in one transaction, each batch with its
    /// own ledger row (a batch whose row is there already is skipped):
    /// whether each was applied now.
    async fn apply_group(
        &self,
        _batches: &[(&BatchMeta, &[Part<'_>])],
    ) -> Result<Vec<Applied>, RunError> {
        unreachable!("only called when groups_batches() says so")
    }
    /// Connects and makes sure the ledger exists; returns where it connected.
    async fn connect(&self) -> Result<String, DbError>;
    /// The table's quoted, qualified name, for messages.
    async fn table_name(&self, table: &str) -> Result<String, DbError>;
}

/// A batch's items by target table, in the order each table first appears.
type Groups<'a> = Vec<(String, Vec<(usize, &'a Item)>)>;

pub struct RelationalDestination<B> {
    backend: B,
    settings: Arc<RelationalSettings>,
    policy: Policy,
    /// Each table as last seen: absent = unknown, `None` = missing.
    cache: Mutex<HashMap<String, Option<TableInfo>>>,
}

impl<B: Backend> RelationalDestination<B> {
    pub fn new(backend: B, settings: Arc<RelationalSettings>) -> Self {
        let policy = Policy {
            dialect: settings.dialect,
            drift: settings.drift,
            truncate: settings.truncate,
            mode: settings.mode,
            deletes: settings.deletes,
            key: settings.key.clone(),
        };
        RelationalDestination {
            backend,
            settings,
            policy,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<TableInfo>>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the table from the catalog (None: it does not exist yet) and
    /// caches what it read.
    async fn reload_table(&self, table: &str) -> Result<Option<TableInfo>, DeliveryError> {
        let info = self
            .backend
            .load_table(table)
            .await
            .map_err(DbError::into_delivery)?;
        self.cache().insert(table.to_string(), info.clone());
        Ok(info)
    }

    /// The batch's items by target table; a target that cannot be named
    /// is the batch's fault (a `rejected` dead letter at that item).
    fn groups<'a>(&self, batch: &'a Batch) -> Result<Groups<'a>, DeliveryError> {
        let mut out: Groups<'a> = Vec::new();
        let mut current: Option<(Option<&abrq_core::TableRef>, usize)> = None;
        for (i, source, item) in scoped(&batch.items) {
            // a transaction marker is not a row of any table
            if matches!(item, Item::Marker { .. }) {
                continue;
            }
            let at = match current {
                Some((s, at)) if s == source => at,
                _ => {
                    let target = self
                        .settings
                        .target(source)
                        .map_err(|why| Failure::Rejected { record: Some(i) }.error(why))?;
                    let at = match out.iter().position(|(t, _)| *t == target) {
                        Some(at) => at,
                        None => {
                            out.push((target, Vec::new()));
                            out.len() - 1
                        }
                    };
                    current = Some((source, at));
                    at
                }
            };
            out[at].1.push((i, item));
        }
        Ok(out)
    }

    /// Plans against the cached table; re-reads the catalog first when
    /// nothing is cached, and again when the cached view would lead to DDL
    /// or a drift error (an operator may have changed the table since).
    async fn plan<'a>(&self, table: &str, items: Items<'_, 'a>) -> Result<Plan<'a>, DeliveryError> {
        let cached = self.cache().get(table).cloned();
        if let Some(info) = cached {
            match plan(items, info.as_ref(), &self.policy) {
                Ok(p) if !p.has_ddl() => return Ok(p),
                Ok(_) | Err(_) => {}
            }
        }
        let info = self.reload_table(table).await?;
        Ok(plan(items, info.as_ref(), &self.policy)?)
    }

    /// Runs the batch again one row per statement to name the refused row.
    async fn find_row(
        &self,
        meta: &BatchMeta,
        groups: &Groups<'_>,
        first: DbError,
    ) -> DeliveryError {
        let mut parts = Vec::with_capacity(groups.len());
        for (table, items) in groups {
            let info = match self.backend.load_table(table).await {
                Ok(t) => t,
                Err(_) => return first.into_delivery(),
            };
            match plan(Items(items), info.as_ref(), &self.policy) {
                Ok(plan) => parts.push(Part {
                    table: table.clone(),
                    plan,
                }),
                Err(e) => return e.into(),
            }
        }
        match self.backend.apply(meta, &parts, Run::FindRow).await {
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

    /// Plans every part; on failure the cache is forgotten.
    async fn plan_all<'a>(&self, groups: &Groups<'a>) -> Result<Vec<Part<'a>>, DeliveryError> {
        let mut parts = Vec::with_capacity(groups.len());
        for (table, items) in groups {
            match self.plan(table, Items(items)).await {
                Ok(plan) => parts.push(Part {
                    table: table.clone(),
                    plan,
                }),
                Err(e) => {
                    self.cache().clear();
                    return Err(e);
                }
            }
        }
        Ok(parts)
    }
}

/// Clears the table cache when dropped, unless the group committed.
struct ForgetUnlessCommitted<'a>(&'a Mutex<HashMap<String, Option<TableInfo>>>, bool);

impl ForgetUnlessCommitted<'_> {
    fn settle(mut self, committed: bool) {
        self.1 = !committed;
    }
}

impl Drop for ForgetUnlessCommitted<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }
}

/// What a batch's committed parts wrote and dropped.
fn report_of(parts: &[Part<'_>]) -> DeliveryReport {
    let mut report = DeliveryReport::default();
    for part in parts {
        let c = part.plan.counts;
        report.bytes += written_bytes(&part.plan);
        report.ignored_truncates += c.ignored_truncates;
        report.ignored_schemas += c.ignored_schemas;
        report.dropped_values += c.dropped_values;
        report.dropped_rows += c.dropped_rows;
    }
    report
}

/// Batches one grouped attempt carries at most.
const GROUP_BATCHES: usize = 16;

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
            Step::DeleteOne { row, .. } => {
                n += row.cells.iter().map(|c| c.wire_len()).sum::<usize>();
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
        let groups = self.groups(batch)?;
        if groups.is_empty() {
            return Ok(DeliveryReport::default());
        }
        let parts = self.plan_all(&groups).await?;
        match self.backend.apply(&batch.meta, &parts, Run::Commit).await {
            Ok(Applied::Committed) => {
                let mut cache = self.cache();
                for part in &parts {
                    cache.insert(part.table.clone(), Some(part.plan.table.clone()));
                }
                Ok(report_of(&parts))
            }
            // Counted when it was applied; counting again would double
            // the drop metrics for one batch.
            Ok(Applied::AlreadyApplied) | Ok(Applied::RolledBack) => {
                self.cache().clear();
                Ok(DeliveryReport::default())
            }
            Err(RunError { error, item }) => {
                self.cache().clear();
                match item {
                    Some(i) => Err(error.into_delivery().at_record(i)),
                    None if error.kind.blames_a_row() => {
                        Err(self.find_row(&batch.meta, &groups, error).await)
                    }
                    None => Err(error.into_delivery()),
                }
            }
        }
    }

    fn group_limit(&self) -> usize {
        match self.backend.groups_batches() {
            true => GROUP_BATCHES,
            false => 1,
        }
    }

    /// Several batches in one transaction, one ledger row each: each batch
    /// is planned against the tables as the batches before it leave them.
    /// Any failure fails the group; the engine then takes its batches one
    /// at a time, so only a batch at fault is dead-lettered.
    async fn deliver_group(&self, batches: &[Batch]) -> Result<Vec<DeliveryReport>, DeliveryError> {
        if !self.backend.groups_batches() {
            return abrq_core::destination::deliver_each(self, batches).await;
        }
        let mut grouped = Vec::with_capacity(batches.len());
        for b in batches {
            grouped.push(self.groups(b)?);
        }
        // Each batch is planned against the tables the batches before it
        // leave, through the cache; until the group commits, that view is
        // a promise, forgotten on every way out (a timeout included).
        let forget = ForgetUnlessCommitted(&self.cache, true);
        let mut planned = Vec::with_capacity(batches.len());
        for groups in &grouped {
            let parts = self.plan_all(groups).await?;
            let mut cache = self.cache();
            for part in &parts {
                cache.insert(part.table.clone(), Some(part.plan.table.clone()));
            }
            planned.push(parts);
        }
        let work: Vec<(&BatchMeta, &[Part<'_>])> = batches
            .iter()
            .zip(&planned)
            .map(|(b, parts)| (&b.meta, parts.as_slice()))
            .collect();
        let applied = self.backend.apply_group(&work).await;
        forget.settle(applied.is_ok());
        match applied {
            Ok(applied) => Ok(planned
                .iter()
                .zip(applied)
                .map(|(parts, a)| match a {
                    Applied::Committed => report_of(parts),
                    Applied::AlreadyApplied | Applied::RolledBack => DeliveryReport::default(),
                })
                .collect()),
            Err(RunError { error, .. }) => Err(error.into_delivery()),
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
        if s.per_table() {
            let about = format!(
                "tables are named after each source table ({:?}), created by the first batch \
                 that needs them",
                s.table
            );
            return Ok(CheckReport {
                detail: format!(
                    "{} destination {:?} of stream {:?}: connected to {at}; {about}",
                    self.backend.kind(),
                    s.destination,
                    s.stream
                ),
            });
        }
        let name = self
            .backend
            .table_name(&s.table)
            .await
            .map_err(DbError::into_delivery)?;
        let table = self.reload_table(&s.table).await?;
        let d = s.dialect;
        let about = match &table {
            None => format!(
                "table {name} does not exist yet; the first batch creates it from its columns"
            ),
            Some(t) => format!("table {name} exists: {}", t.describe(|ty| d.type_name(ty))),
        };
        let about = match &table {
            Some(t) if s.mode == super::config::WriteMode::Upsert && t.key.is_empty() => format!(
                "{about}; it has no primary key: rows are appended, and a delete removes one row equal to the old row"
            ),
            _ => about,
        };
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
