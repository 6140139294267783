//! A table following its source's columns by their identity, not their
//! name: a source that says which source column each declared column is
//! (`source_column`, PostgreSQL's `attnum`) gets a rename followed as a
//! rename, and a dropped column kept or dropped as `dropped_columns`
//! says. Each column abrq writes a source column into is labelled with it
//! (the column's comment), so the table itself remembers across restarts.
//! A source without column ids (MySQL) says a rename outright instead
//! (`renamed_from`, read from the `ALTER TABLE`).

use abrq_core::{source_columns, Item, RENAMED_FROM};

use super::config::{ColumnsPolicy, DroppedColumnsPolicy};
use super::plan::{Items, Policy};
use super::table::{Column, TableInfo};

/// What following the source changes in an existing table.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Followed {
    /// Columns renamed, in order: (old name, new name).
    pub rename: Vec<(String, String)>,
    /// Columns dropped after their source column was.
    pub drop: Vec<String>,
    /// Each renamed column's earlier names and its name now, for records
    /// of the batch written before the rename.
    pub aliases: Vec<(String, String)>,
}

/// Each declaration's source columns, in batch order (a declaration that
/// does not name one for every column names none).
fn declarations(batch: Items) -> Vec<Vec<(String, i64)>> {
    batch
        .iter()
        .filter_map(|item| match item {
            Item::Schema { columns } => Some(source_columns(columns).unwrap_or_default()),
            _ => None,
        })
        .collect()
}

/// The renames declarations tell outright (`renamed_from`: a MySQL
/// source read them from the `ALTER TABLE`), in batch order.
fn told(batch: Items) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for item in batch.iter() {
        let Item::Schema { columns } = item else {
            continue;
        };
        for (name, v) in columns {
            if let Some(old) = v.get(RENAMED_FROM).and_then(|o| o.as_str()) {
                out.push((old.to_string(), name.clone()));
            }
        }
    }
    out
}

/// Renames the column `pick` finds to `new`, the key with it, unless a
/// column of that name (as the dialect folds it) is there already; its old
/// name.
fn rename(
    table: &mut TableInfo,
    p: &Policy,
    pick: impl Fn(&Column) -> bool,
    new: &str,
) -> Option<String> {
    let taken = table
        .columns
        .iter()
        .any(|c| p.dialect.fold(&c.name) == p.dialect.fold(new));
    if taken {
        return None;
    }
    let c = table.columns.iter_mut().find(|c| pick(c))?;
    let old = std::mem::replace(&mut c.name, new.to_string());
    for k in table.key.iter_mut().filter(|k| **k == old) {
        *k = new.to_string();
    }
    Some(old)
}

/// Renames (and drops) the columns of `table`, an existing table, as the
/// batch's declarations say its source's columns changed. Only under
/// `columns = "evolve"`: the other policies keep the table as it is.
pub fn follow(batch: Items, table: &mut TableInfo, p: &Policy) -> Followed {
    let mut out = Followed::default();
    if p.drift.columns != ColumnsPolicy::Evolve {
        return out;
    }
    for (old, new) in told(batch) {
        if let Some(old) = rename(table, p, |c| c.name == old, &new) {
            out.rename.push((old, new));
        }
    }
    let mut last = Vec::new();
    for sources in declarations(batch) {
        for (name, n) in &sources {
            // the old name is declared too: never rename onto it
            let pick =
                |c: &Column| c.source == Some(*n) && !sources.iter().any(|(o, _)| *o == c.name);
            if let Some(old) = rename(table, p, pick, name) {
                out.rename.push((old, name.clone()));
            }
        }
        last = sources;
    }
    // each old name to the name its column has at the end of the batch
    for (i, (old, new)) in out.rename.iter().enumerate() {
        let now =
            out.rename[i + 1..].iter().fold(
                new.clone(),
                |at, (o, n)| if *o == at { n.clone() } else { at },
            );
        if table.column(old).is_none() {
            out.aliases.push((old.clone(), now));
        }
    }
    if p.drift.dropped_columns == DroppedColumnsPolicy::Drop && !last.is_empty() {
        let gone: Vec<String> = table
            .columns
            .iter()
            .filter(|c| {
                c.source.is_some_and(|n| !last.iter().any(|(_, m)| *m == n))
                    && !last.iter().any(|(name, _)| *name == c.name)
                    && !table.key.contains(&c.name)
            })
            .map(|c| c.name.clone())
            .collect();
        table.columns.retain(|c| !gone.contains(&c.name));
        out.drop = gone;
    }
    out
}

/// Labels each column the batch's last declaration names a source column
/// for, where the table does not say so yet; the labelled columns.
pub fn label(batch: Items, table: &mut TableInfo) -> Vec<String> {
    let Some(last) = declarations(batch).pop() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, n) in last {
        // another column holds that source column: leave both as they are
        if table
            .columns
            .iter()
            .any(|c| c.source == Some(n) && c.name != name)
        {
            continue;
        }
        if let Some(c) = table.columns.iter_mut().find(|c| c.name == name) {
            if c.source != Some(n) {
                c.source = Some(n);
                out.push(name);
            }
        }
    }
    out
}
