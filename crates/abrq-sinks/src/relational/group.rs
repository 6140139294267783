//! Groups converted rows into statements, keeping the batch's order.
//!
//! Append mode: consecutive rows share one statement over the union of
//! their columns (a field a record lacks is written as NULL). Upsert mode:
//! a statement only holds rows with the same columns, so a record that
//! omits a field leaves that column as it is; within a statement the last
//! row for a key wins (PostgreSQL refuses to touch one row twice in one
//! `ON CONFLICT` statement, and a later full row supersedes an earlier one).

use std::collections::HashMap;

use super::plan::{Row, Step};
use super::types::Cell;

type Pairs<'a> = Vec<(usize, Cell<'a>)>;
/// An open write: its columns (sorted) and rows as (item, pairs).
type Open<'a> = (Vec<usize>, Vec<(usize, Pairs<'a>)>);

pub struct Grouper<'a> {
    upsert: bool,
    key: Vec<usize>,
    steps: Vec<Step<'a>>,
    writes: Option<Open<'a>>,
    deletes: Vec<Row<'a>>,
}

impl<'a> Grouper<'a> {
    pub fn new(upsert: bool, key: Vec<usize>) -> Self {
        Grouper {
            upsert,
            key,
            steps: Vec::new(),
            writes: None,
            deletes: Vec::new(),
        }
    }

    pub fn truncate(&mut self) {
        self.flush();
        self.steps.push(Step::Truncate);
    }

    pub fn delete(&mut self, row: Row<'a>) {
        self.flush_writes();
        self.deletes.push(row);
    }

    /// A keyless table's delete: a statement of its own, in order.
    pub fn delete_one(&mut self, columns: Vec<usize>, row: Row<'a>) {
        self.flush();
        self.steps.push(Step::DeleteOne { columns, row });
    }

    pub fn write(&mut self, item: usize, mut pairs: Pairs<'a>) {
        self.flush_deletes();
        pairs.sort_by_key(|(c, _)| *c);
        let shape: Vec<usize> = pairs.iter().map(|(c, _)| *c).collect();
        match &mut self.writes {
            Some((cols, rows)) if !self.upsert || *cols == shape => {
                if !self.upsert {
                    union_into(cols, &shape);
                }
                rows.push((item, pairs));
            }
            Some(_) | None => {
                self.flush_writes();
                self.writes = Some((shape, vec![(item, pairs)]));
            }
        }
    }

    pub fn finish(mut self) -> Vec<Step<'a>> {
        self.flush();
        self.steps
    }

    fn flush(&mut self) {
        self.flush_writes();
        self.flush_deletes();
    }

    fn flush_deletes(&mut self) {
        if !self.deletes.is_empty() {
            let rows = std::mem::take(&mut self.deletes);
            self.steps.push(Step::Delete { rows });
        }
    }

    fn flush_writes(&mut self) {
        let Some((columns, pending)) = self.writes.take() else {
            return;
        };
        let pending = if self.upsert {
            last_per_key(pending, &self.key)
        } else {
            pending
        };
        let rows = pending
            .into_iter()
            .map(|(item, pairs)| Row {
                item,
                cells: spread(&columns, pairs),
            })
            .collect();
        self.steps.push(Step::Write {
            upsert: self.upsert,
            columns,
            rows,
        });
    }
}

/// Merges sorted `more` into sorted `cols`.
fn union_into(cols: &mut Vec<usize>, more: &[usize]) {
    if more.iter().all(|c| cols.binary_search(c).is_ok()) {
        return;
    }
    cols.extend_from_slice(more);
    cols.sort_unstable();
    cols.dedup();
}

/// The row's cells in `columns` order, NULL where it has no value.
fn spread<'a>(columns: &[usize], pairs: Pairs<'a>) -> Vec<Cell<'a>> {
    if pairs.len() == columns.len() {
        return pairs.into_iter().map(|(_, v)| v).collect();
    }
    let mut out = vec![Cell::Null; columns.len()];
    for (c, v) in pairs {
        if let Ok(at) = columns.binary_search(&c) {
            out[at] = v;
        }
    }
    out
}

/// Keeps only the last row of each key, in the order of those last rows.
fn last_per_key<'a>(rows: Vec<(usize, Pairs<'a>)>, key: &[usize]) -> Vec<(usize, Pairs<'a>)> {
    let key_of = |pairs: &Pairs<'a>| -> String {
        let cells: Vec<&Cell> = key
            .iter()
            .filter_map(|k| pairs.iter().find(|(c, _)| c == k).map(|(_, v)| v))
            .collect();
        format!("{cells:?}")
    };
    let mut last: HashMap<String, usize> = HashMap::with_capacity(rows.len());
    for (at, (_, pairs)) in rows.iter().enumerate() {
        last.insert(key_of(pairs), at);
    }
    if last.len() == rows.len() {
        return rows;
    }
    rows.into_iter()
        .enumerate()
        .filter(|(at, (_, pairs))| last.get(&key_of(pairs)) == Some(at))
        .map(|(_, r)| r)
        .collect()
}
