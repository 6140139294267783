//! Turns a batch into what to run against a table, without I/O: the DDL
//! (create, add columns, widen types) and the ordered steps (truncate,
//! write rows, delete keys), with the schema drift policy applied to every
//! field and value and every discard counted.
//!
//! Three passes: (1) what the batch's fields and declarations need,
//! (2) the table after DDL (evolve and widen decided once, up front, so
//! every row of the batch is written against the same table), (3) rows,
//! converted for their columns, grouped into statements.

use std::collections::{HashMap, HashSet};

use super::config::{
    ColumnsPolicy, DeletePolicy, SchemaDrift, TruncatePolicy, TypesPolicy, WriteMode,
};
use abrq_core::{Item, Op, Record};
use serde_json::Value;

use super::follow::{self, Followed};
use super::names::{BadNames, Spellings};
use super::table::{Column, TableInfo};
use super::types::{
    beyond_engine, fits_in, holds, join, natural, widen_for, widen_to, Cell, Dialect, Reach,
    SqlType,
};

/// The column a soft delete sets (`deletes = "soft"`).
pub const SOFT_DELETED: &str = "_abrq_deleted_at";

/// The items one table receives, each with its index in the batch (so
/// errors and rows name the batch's own items).
#[derive(Debug, Clone, Copy)]
pub struct Items<'s, 'a>(pub &'s [(usize, &'a Item)]);

impl<'s, 'a> Items<'s, 'a> {
    pub fn enumerate(self) -> impl DoubleEndedIterator<Item = (usize, &'a Item)> + 's {
        self.0.iter().map(|&(i, item)| (i, item))
    }

    pub fn iter(self) -> impl DoubleEndedIterator<Item = &'a Item> + 's {
        self.0.iter().map(|&(_, item)| item)
    }
}

/// The policies a plan follows.
#[derive(Debug, Clone)]
pub struct Policy {
    pub dialect: Dialect,
    pub drift: SchemaDrift,
    pub truncate: TruncatePolicy,
    pub mode: WriteMode,
    pub deletes: DeletePolicy,
    /// Primary key for a table abrq creates (upsert mode).
    pub key: Vec<String>,
}

/// Why a batch cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The drift policy blocks the batch (a `schema_drift` dead letter).
    #[error("{message}")]
    Drift { item: usize, message: String },
    /// The record can never be written as it is (a `rejected` dead letter).
    #[error("{message}")]
    Rejected { item: usize, message: String },
    /// Field names that cannot be columns, in these records (a `rejected`
    /// dead letter naming every one).
    #[error("{0}")]
    Names(BadNames),
    /// The table cannot take upserts until an operator gives it a key: not
    /// the batch's fault, so the batch waits (retry, breaker).
    #[error("{0}")]
    NoKey(String),
}

/// One row: the batch item it came from, and a cell per statement column.
#[derive(Debug, Clone, PartialEq)]
pub struct Row<'a> {
    pub item: usize,
    pub cells: Vec<Cell<'a>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step<'a> {
    Truncate,
    /// Insert (or upsert on the key) `rows`; `columns` index the table.
    Write {
        upsert: bool,
        columns: Vec<usize>,
        rows: Vec<Row<'a>>,
    },
    /// Delete by key; cells follow the table's key columns.
    Delete {
        rows: Vec<Row<'a>>,
    },
    /// A table without a key: delete one row equal to `row` in `columns`
    /// (NULL equal to NULL), as PostgreSQL's own subscriber does.
    DeleteOne {
        columns: Vec<usize>,
        row: Row<'a>,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub dropped_values: u64,
    pub dropped_rows: u64,
    pub ignored_truncates: u64,
    pub ignored_schemas: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan<'a> {
    /// Create the table (as `table` describes it) before anything else.
    pub create: bool,
    /// Columns to add (nullable), by name.
    pub add: Vec<String>,
    /// Columns whose type widens to the one in `table`, by name.
    pub alter: Vec<String>,
    /// The primary key moves from these columns to `table.key` (the
    /// source's key moved; the table is one abrq created).
    pub rekey: Vec<String>,
    /// Columns renamed after their source column, in order (old, new).
    pub rename: Vec<(String, String)>,
    /// Columns dropped after their source column (`dropped_columns`).
    pub drop: Vec<String>,
    /// Columns whose comment is to name their source column.
    pub label: Vec<String>,
    /// The table after the DDL.
    pub table: TableInfo,
    pub steps: Vec<Step<'a>>,
    pub counts: Counts,
}

impl Plan<'_> {
    pub fn has_ddl(&self) -> bool {
        self.create
            || !self.add.is_empty()
            || !self.alter.is_empty()
            || !self.rekey.is_empty()
            || !self.rename.is_empty()
            || !self.drop.is_empty()
            || !self.label.is_empty()
    }
}

pub fn plan<'a>(
    batch: Items<'_, 'a>,
    current: Option<&TableInfo>,
    p: &Policy,
) -> Result<Plan<'a>, PlanError> {
    let mut counts = Counts::default();
    let fresh = current.is_none();
    let mut table = current.cloned().unwrap_or_default();
    let mut add = Vec::new();
    let mut alter = Vec::new();
    let mut rekey = Vec::new();
    let followed = match fresh {
        true => Followed::default(),
        false => follow::follow(batch, &mut table, p),
    };

    // pass 1: declared types (later declarations win) and, for fields the
    // table lacks, the type their values need
    let declared = declarations(batch, p.dialect);
    // a renamed column's old name, in records written before the rename
    let known: HashSet<String> = table
        .columns
        .iter()
        .map(|c| c.name.clone())
        .chain(followed.aliases.iter().map(|(old, _)| old.clone()))
        .collect();
    // names are checked once each; the table's columns and then declared
    // names keep their spelling against a field differing only in case
    let adds = fresh || p.drift.columns == ColumnsPolicy::Evolve;
    let mut spellings = Spellings::new(
        p.dialect,
        adds,
        known
            .iter()
            .map(String::as_str)
            .chain(declared.iter().map(|(n, _)| n)),
    );
    let mut verdicts: HashMap<&str, Option<String>> = HashMap::new();
    let mut bad = BadNames::default();
    let mut needs: Vec<(&str, Option<SqlType>)> = Vec::new();
    let mut needs_at: HashMap<&str, usize> = HashMap::new();
    for (i, item) in batch.enumerate() {
        let Item::Record(r) = item else { continue };
        // a delete describes a row already there: it never adds a column
        if p.mode == WriteMode::Upsert && r.op == Op::Delete {
            continue;
        }
        for (k, v) in &r.fields {
            if known.contains(k.as_str()) || v.is_null() && !declared.contains_key(k) {
                continue;
            }
            let verdict = verdicts.entry(k).or_insert_with(|| spellings.check(k));
            if let Some(why) = verdict {
                bad.add(i, why);
                continue;
            }
            let at = *needs_at.entry(k).or_insert_with(|| {
                needs.push((k, None));
                needs.len() - 1
            });
            if let Some(t) = natural(v, p.dialect) {
                let slot = &mut needs[at].1;
                *slot = Some(match slot.take() {
                    Some(prev) => join(&prev, &t, p.dialect),
                    None => t,
                });
            }
        }
    }

    if !bad.is_empty() {
        return Err(PlanError::Names(bad));
    }

    // pass 2: the table after DDL
    if fresh {
        // a source that knows its key declares it (`primary_key: true`);
        // a configured key wins
        let key = match (p.key.is_empty(), p.mode) {
            (true, WriteMode::Upsert) => declared_key(batch),
            _ => p.key.clone(),
        };
        let mut order: Vec<(&str, SqlType)> = Vec::new();
        for (name, ty) in declared.iter() {
            order.push((name, ty.clone()));
        }
        for (name, ty) in &needs {
            if !declared.contains_key(name) {
                if let Some(ty) = ty {
                    order.push((name, ty.clone()));
                }
            }
        }
        table.columns = order
            .into_iter()
            .map(|(name, ty)| Column::new(name.to_string(), ty, !key.iter().any(|k| k == name)))
            .collect();
        // without a key (a source table that has none) the table is made
        // without one: rows are appended and deleted by their whole value
        if p.mode == WriteMode::Upsert && !table.columns.is_empty() {
            if let Some(k) = key.iter().find(|k| table.column(k).is_none()) {
                return Err(PlanError::NoKey(format!(
                    "upsert mode: key column {k:?} is not in the batch"
                )));
            }
            table.key = key;
        }
        // declared types can be too narrow for the values: the types
        // policy decides, and a widening simply becomes the created type
        if widens(p) {
            widen_for_values(batch, &mut table, &declared, &[], &mut Vec::new(), p)?;
        }
    } else {
        counts.ignored_schemas += apply_declarations(batch, &mut table, &mut add, &mut alter, p);
        if p.drift.columns == ColumnsPolicy::Evolve {
            for (name, ty) in &needs {
                let ty = declared.get(name).cloned().or_else(|| ty.clone());
                if let (Some(ty), None) = (ty, table.column(name)) {
                    add.push(name.to_string());
                    table.columns.push(Column::new(name.to_string(), ty, true));
                }
            }
        }
        if widens(p) {
            widen_for_values(batch, &mut table, &declared, &add, &mut alter, p)?;
        }
        if let Some(key) = moved_key(batch, &table, p) {
            for c in table.columns.iter_mut() {
                c.nullable &= !key.contains(&c.name);
            }
            rekey = std::mem::replace(&mut table.key, key);
        }
    }
    if p.deletes == DeletePolicy::Soft && !table.columns.is_empty() {
        table.soft_delete = true;
        if table.column(SOFT_DELETED).is_none() {
            if !fresh {
                add.push(SOFT_DELETED.to_string());
            }
            table.columns.push(Column::new(
                SOFT_DELETED.to_string(),
                SqlType::Timestamp,
                true,
            ));
        }
    }
    let label = follow::label(batch, &mut table);
    let create = fresh && !table.columns.is_empty();
    table.created |= create;

    // pass 3: rows
    let steps = if fresh && !create {
        Vec::new()
    } else {
        super::rows::steps(batch, &table, &rekey, &followed.aliases, p, &mut counts)?
    };
    Ok(Plan {
        create,
        add,
        alter,
        rekey,
        rename: followed.rename,
        drop: followed.drop,
        label,
        table,
        steps,
        counts,
    })
}

/// `name -> type` from every schema instruction, in order, later winning.
/// A type abrq does not model is left to inference.
fn declarations(batch: Items, d: Dialect) -> indexmap_lite::Ordered<SqlType> {
    let mut out = indexmap_lite::Ordered::default();
    for item in batch.iter() {
        if let Item::Schema { columns } = item {
            for (name, ty) in columns {
                // a name the server would refuse, or one differing only
                // in case from an earlier one, is left to the records
                if d.invalid_name(name).is_some()
                    || out
                        .iter()
                        .any(|(n, _)| n != name && d.fold(n) == d.fold(name))
                {
                    continue;
                }
                if let Some(t) = declared_type(ty).and_then(|t| d.parse_type(t)) {
                    out.insert(name.clone(), t);
                }
            }
        }
    }
    out
}

/// The source's key, when it moved to other columns of a table that
/// follows it: one abrq created, with no key configured, in upsert mode.
fn moved_key(batch: Items, table: &TableInfo, p: &Policy) -> Option<Vec<String>> {
    if p.mode != WriteMode::Upsert || !p.key.is_empty() || !table.created || table.key.is_empty() {
        return None;
    }
    let key = declared_key(batch);
    let known = key.iter().all(|k| table.column(k).is_some());
    (!key.is_empty() && key != table.key && known).then_some(key)
}

/// The columns the batch's last schema instruction marks `primary_key`, in
/// its order.
fn declared_key(batch: Items) -> Vec<String> {
    let last = batch.iter().rev().find_map(|item| match item {
        Item::Schema { columns } => Some(columns),
        _ => None,
    });
    last.map(abrq_core::key_columns).unwrap_or_default()
}

/// A declared type is a type name, or an object with a `type` key.
fn declared_type(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("type").and_then(Value::as_str),
        _ => None,
    }
}

/// Applies what each schema instruction declares to an existing table, as
/// the policy allows; returns how many instructions were not (fully) applied.
fn apply_declarations(
    batch: Items,
    table: &mut TableInfo,
    add: &mut Vec<String>,
    alter: &mut Vec<String>,
    p: &Policy,
) -> u64 {
    let mut ignored = 0;
    for item in batch.iter() {
        let Item::Schema { columns } = item else {
            continue;
        };
        let mut skipped = false;
        for (name, raw) in columns {
            let Some(want) = declared_type(raw).and_then(|t| p.dialect.parse_type(t)) else {
                continue;
            };
            // a column differing only in case, where case does not count
            let twin = table
                .columns
                .iter()
                .any(|c| c.name != *name && p.dialect.fold(&c.name) == p.dialect.fold(name));
            match table.columns.iter_mut().find(|c| c.name == *name) {
                None if p.drift.columns == ColumnsPolicy::Evolve
                    && p.dialect.invalid_name(name).is_none()
                    && !twin =>
                {
                    add.push(name.clone());
                    table.columns.push(Column::new(name.clone(), want, true));
                }
                None => skipped = true,
                Some(c) if holds(&c.ty, &want) => {}
                Some(c) => match widen_to(&c.ty, &want, p.dialect) {
                    Some(w) if widens(p) => {
                        c.ty = w;
                        note(alter, add, name);
                    }
                    Some(_) | None => skipped = true,
                },
            }
        }
        ignored += u64::from(skipped);
    }
    ignored
}

/// Records an altered column, unless it is new in this plan anyway.
fn note(alter: &mut Vec<String>, add: &[String], name: &str) {
    if !add.iter().any(|a| a == name) && !alter.iter().any(|a| a == name) {
        alter.push(name.to_string());
    }
}

fn widens(p: &Policy) -> bool {
    match p.drift.types {
        TypesPolicy::Widen | TypesPolicy::WidenStrict => true,
        TypesPolicy::DiscardValues | TypesPolicy::DiscardRows | TypesPolicy::Freeze => false,
    }
}

/// `types = widen` or `widen_strict`: widens each column until it holds
/// every value the batch writes to it, or fails the batch at the first
/// value no widening can hold. A column this batch declares widens only
/// exactly: declared types win over values.
fn widen_for_values(
    batch: Items,
    table: &mut TableInfo,
    declared: &indexmap_lite::Ordered<SqlType>,
    add: &[String],
    alter: &mut Vec<String>,
    p: &Policy,
) -> Result<(), PlanError> {
    let reach = |name: &str| match p.drift.types {
        TypesPolicy::Widen if !declared.contains_key(name) => Reach::Text,
        TypesPolicy::Widen
        | TypesPolicy::WidenStrict
        | TypesPolicy::DiscardValues
        | TypesPolicy::DiscardRows
        | TypesPolicy::Freeze => Reach::Exact,
    };
    let index: HashMap<String, usize> = table
        .index()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (i, item) in batch.enumerate() {
        let Item::Record(r) = item else { continue };
        if p.mode == WriteMode::Upsert && r.op == Op::Delete {
            continue;
        }
        if drops_row_for_columns(r, &index, p) {
            continue;
        }
        for (k, v) in &r.fields {
            let Some(&c) = index.get(k) else { continue };
            let col = &mut table.columns[c];
            if fits_in(p.dialect, &col.ty, v) {
                continue;
            }
            // a value the engine cannot hold in this kind at all (NaN in
            // MySQL): text holds it, declared type or not
            let reach = match beyond_engine(&col.ty, v, p.dialect) {
                true if p.drift.types == TypesPolicy::Widen => Reach::Text,
                true | false => reach(k),
            };
            let Some(w) = widen_for(&col.ty, v, p.dialect, reach) else {
                return Err(drift_value(i, col, v, p.dialect));
            };
            col.ty = w;
            note(alter, add, k);
        }
    }
    Ok(())
}

/// Whether the columns policy drops `r`: a field the table lacks, under
/// `discard_rows`. Such a row must not widen anything.
fn drops_row_for_columns(r: &Record, index: &HashMap<String, usize>, p: &Policy) -> bool {
    p.drift.columns == ColumnsPolicy::DiscardRows
        && r.fields
            .iter()
            .any(|(k, v)| !v.is_null() && !index.contains_key(k))
}

pub(super) fn drift_value(item: usize, col: &Column, v: &Value, d: Dialect) -> PlanError {
    let mut shown = v.to_string();
    if shown.len() > 80 {
        let mut cut = 77;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("...");
    }
    PlanError::Drift {
        item,
        message: format!(
            "value {shown} does not fit column {:?} of type {}, and the schema drift policy does not allow changing it",
            col.name,
            d.type_name(&col.ty)
        ),
    }
}

/// A small insertion-ordered map, enough for a batch's declared columns.
mod indexmap_lite {
    #[derive(Debug)]
    pub struct Ordered<V> {
        items: Vec<(String, V)>,
    }

    impl<V> Default for Ordered<V> {
        fn default() -> Self {
            Ordered { items: Vec::new() }
        }
    }

    impl<V> Ordered<V> {
        pub fn insert(&mut self, k: String, v: V) {
            match self.items.iter_mut().find(|(n, _)| *n == k) {
                Some(slot) => slot.1 = v,
                None => self.items.push((k, v)),
            }
        }
        pub fn get(&self, k: &str) -> Option<&V> {
            self.items.iter().find(|(n, _)| n == k).map(|(_, v)| v)
        }
        pub fn contains_key(&self, k: &str) -> bool {
            self.get(k).is_some()
        }
        pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
            self.items.iter().map(|(k, v)| (k.as_str(), v))
        }
    }
}
