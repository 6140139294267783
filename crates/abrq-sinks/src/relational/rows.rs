//! Pass 3 of planning: every record converted for the table as it will
//! be, the drift policy applied to what still does not fit (each discard
//! counted), and the rows grouped into statements in batch order.

use std::collections::HashMap;

use super::config::{ColumnsPolicy, TruncatePolicy, TypesPolicy, WriteMode};
use abrq_core::{Item, Op};
use serde_json::{Map, Value};

use super::group::Grouper;
use super::plan::{drift_value, Counts, Items, PlanError, Policy, Row, Step};
use super::table::TableInfo;
use super::types::{cell, cell_in, Cell};

/// Pass 3: every record converted for the final table, policy applied,
/// grouped into statements in batch order.
pub fn steps<'a>(
    batch: Items<'_, 'a>,
    table: &TableInfo,
    old_key: &[String],
    aliases: &[(String, String)],
    p: &Policy,
    counts: &mut Counts,
) -> Result<Vec<Step<'a>>, PlanError> {
    let mut index = table.index();
    // a field under a renamed column's old name goes to the column
    for (old, new) in aliases {
        if let Some(&at) = index.get(new.as_str()) {
            index.entry(old.as_str()).or_insert(at);
        }
    }
    let key: Vec<usize> = table
        .key
        .iter()
        .filter_map(|k| index.get(k.as_str()).copied())
        .collect();
    // a table without a key cannot take upserts: inserts are appended,
    // a delete removes one row equal to the old row the record carries
    let keyless = p.mode == WriteMode::Upsert && key.is_empty();
    let upsert = p.mode == WriteMode::Upsert && !keyless;
    let mut out = Grouper::new(upsert, key.clone());
    for (i, item) in batch.enumerate() {
        match item {
            Item::Truncate => match p.truncate {
                TruncatePolicy::Apply => out.truncate(),
                TruncatePolicy::Ignore => counts.ignored_truncates += 1,
            },
            Item::Schema { .. } | Item::Table(_) | Item::Marker { .. } => {}
            Item::Record(r) if keyless && r.op == Op::Delete => {
                let (columns, cells) = whole_row(i, &r.fields, table, &index, &[])?;
                out.delete_one(columns, Row { item: i, cells });
            }
            Item::Record(r) if keyless && r.op == Op::Update => {
                return Err(PlanError::Rejected {
                    item: i,
                    message: "an update of a table without a primary key cannot say which row \
                              it changes; a database source sends it as a delete of the old \
                              row and an insert of the new"
                        .into(),
                });
            }
            // written before the key moved (this batch moves it): the
            // one row equal in the old key's columns
            Item::Record(r)
                if upsert
                    && r.op == Op::Delete
                    && carries(&r.fields, old_key)
                    && !carries(&r.fields, &table.key) =>
            {
                let (columns, cells) = whole_row(i, &r.fields, table, &index, old_key)?;
                out.delete_one(columns, Row { item: i, cells });
            }
            Item::Record(r) if upsert && r.op == Op::Delete => {
                let cells = key_cells(i, &r.fields, table, &key)?;
                out.delete(Row { item: i, cells });
            }
            Item::Record(r) => {
                if let Some(row) = convert(i, &r.fields, table, &index, p, counts)? {
                    if upsert {
                        if let Some(k) = key
                            .iter()
                            .find(|k| !row.iter().any(|(c, v)| c == *k && *v != Cell::Null))
                        {
                            return Err(PlanError::Rejected {
                                item: i,
                                message: format!(
                                    "upsert mode: the record has no value for key column {:?}",
                                    table.columns[*k].name
                                ),
                            });
                        }
                    }
                    out.write(i, row);
                }
            }
        }
    }
    Ok(out.finish())
}

/// One record as (column, cell) pairs, or `None` when the policy drops it.
fn convert<'a>(
    i: usize,
    fields: &'a Map<String, Value>,
    table: &TableInfo,
    index: &HashMap<&str, usize>,
    p: &Policy,
    counts: &mut Counts,
) -> Result<Option<Vec<(usize, Cell<'a>)>>, PlanError> {
    let mut row = Vec::with_capacity(fields.len());
    let mut dropped_values = 0;
    for (k, v) in fields {
        let Some(&c) = index.get(k.as_str()) else {
            if v.is_null() {
                continue; // an absent value and a null one are the same row
            }
            match p.drift.columns {
                ColumnsPolicy::DiscardValues => {
                    dropped_values += 1;
                    continue;
                }
                ColumnsPolicy::DiscardRows => {
                    counts.dropped_rows += 1;
                    return Ok(None);
                }
                ColumnsPolicy::Freeze | ColumnsPolicy::Evolve => {
                    return Err(PlanError::Drift {
                        item: i,
                        message: format!("field {k:?} is not a column of the table, and the schema drift policy does not allow adding it"),
                    });
                }
            }
        };
        let col = &table.columns[c];
        match cell_in(p.dialect, &col.ty, v) {
            Some(cell) => row.push((c, cell)),
            None => match p.drift.types {
                TypesPolicy::DiscardValues => {
                    dropped_values += 1;
                    row.push((c, Cell::Null));
                }
                TypesPolicy::DiscardRows => {
                    counts.dropped_rows += 1;
                    return Ok(None);
                }
                TypesPolicy::Freeze | TypesPolicy::Widen | TypesPolicy::WidenStrict => {
                    return Err(drift_value(i, col, v, p.dialect))
                }
            },
        }
    }
    counts.dropped_values += dropped_values;
    Ok(Some(row))
}

/// Whether a record carries a value for every column of `key` (not
/// empty).
fn carries(fields: &Map<String, Value>, key: &[String]) -> bool {
    let has = |k: &String| fields.get(k).is_some_and(|v| !v.is_null());
    !key.is_empty() && key.iter().all(has)
}

/// A keyless delete's old row: the columns it names that the table has
/// (only those of `only`, unless it is empty), and their cells.
fn whole_row<'a>(
    i: usize,
    fields: &'a Map<String, Value>,
    table: &TableInfo,
    index: &HashMap<&str, usize>,
    only: &[String],
) -> Result<(Vec<usize>, Vec<Cell<'a>>), PlanError> {
    let mut pairs: Vec<(usize, Cell<'a>)> = Vec::with_capacity(fields.len());
    for (k, v) in fields {
        if !only.is_empty() && !only.contains(k) {
            continue;
        }
        let Some(&c) = index.get(k.as_str()) else {
            continue; // no such column: no row of the table can differ in it
        };
        let col = &table.columns[c];
        let value = cell(&col.ty, v).ok_or_else(|| PlanError::Rejected {
            item: i,
            message: format!(
                "delete record: a value of the wrong type for column {:?}",
                col.name
            ),
        })?;
        pairs.push((c, value));
    }
    if pairs.is_empty() {
        return Err(PlanError::Rejected {
            item: i,
            message: "delete record of a table without a primary key names none of its columns"
                .into(),
        });
    }
    pairs.sort_by_key(|(c, _)| *c);
    Ok(pairs.into_iter().unzip())
}

/// The key of a delete record, converted for the key columns.
fn key_cells<'a>(
    i: usize,
    fields: &'a Map<String, Value>,
    table: &TableInfo,
    key: &[usize],
) -> Result<Vec<Cell<'a>>, PlanError> {
    key.iter()
        .map(|&c| {
            let col = &table.columns[c];
            let reject = |what: &str| PlanError::Rejected {
                item: i,
                message: format!("delete record: {what} for key column {:?}", col.name),
            };
            match fields.get(&col.name) {
                None | Some(Value::Null) => Err(reject("no value")),
                Some(v) => cell(&col.ty, v).ok_or_else(|| reject("a value of the wrong type")),
            }
        })
        .collect()
}
