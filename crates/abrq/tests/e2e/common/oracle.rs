//! The conservation check: what one destination holds, read back with
//! `sinks`, against what was appended to the source.
//!
//! After copies of one delivery are folded (same key, see
//! [`Found::key`]), every appended record must be there exactly once, or
//! its batch must be among the destination's dead letters (then at most
//! once: a dead-lettered attempt may have landed before its reply was
//! lost). Nothing may be there that was not appended, and everything must
//! read back as it was appended.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde_json::{Map, Value};

use super::csv_cells;
use super::sinks::{self, Cells, DeadLetters, Found};

/// What the source was fed.
pub struct Appended<'a> {
    /// The field that holds each record's unique integer id.
    pub id_field: &'a str,
    /// Every id appended.
    pub ids: &'a [u64],
    /// The record appended under `id`; None for an id never appended.
    pub record: &'a dyn Fn(u64) -> Option<Map<String, Value>>,
}

/// One destination's figures when it passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Records read back, copies included.
    pub found: usize,
    /// Copies folded into an earlier one with the same key.
    pub deduped: usize,
    /// Distinct appended records present.
    pub delivered: usize,
    pub dead_letters: usize,
    pub dead_lettered_records: usize,
    /// Dead-lettered records that are present all the same.
    pub dead_lettered_present: usize,
}

/// Everything wrong with one destination (examples capped, counts not).
#[derive(Debug, Default)]
pub struct Violations {
    pub lost: Vec<u64>,
    /// (id, copies) after folding.
    pub duplicated: Vec<(u64, usize)>,
    /// Records that were never appended (or carry no id).
    pub foreign: Vec<String>,
    /// Records whose content differs from what was appended.
    pub altered: Vec<String>,
    /// Two copies under one key that differ.
    pub conflicting: Vec<String>,
    pub unreadable_dead_letters: Vec<i64>,
}

impl Violations {
    pub fn is_empty(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.foreign.is_empty()
            && self.altered.is_empty()
            && self.conflicting.is_empty()
            && self.unreadable_dead_letters.is_empty()
    }
}

const EXAMPLES: usize = 10;

fn list<T: fmt::Debug>(f: &mut fmt::Formatter<'_>, what: &str, items: &[T]) -> fmt::Result {
    if !items.is_empty() {
        let shown: Vec<&T> = items.iter().take(EXAMPLES).collect();
        writeln!(f, "  {} {what}, e.g. {shown:?}", items.len())?;
    }
    Ok(())
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        list(f, "lost", &self.lost)?;
        list(f, "duplicated (id, copies)", &self.duplicated)?;
        list(f, "never appended", &self.foreign)?;
        list(f, "altered", &self.altered)?;
        list(f, "conflicting copies", &self.conflicting)?;
        list(f, "unreadable dead letters", &self.unreadable_dead_letters)
    }
}

fn id_of(record: &Map<String, Value>, field: &str) -> Option<u64> {
    match record.get(field)? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Whether `found` reads back as `expected` under `cells`' rules.
pub fn same(expected: &Map<String, Value>, found: &Map<String, Value>, cells: Cells) -> bool {
    match cells {
        Cells::Json => expected == found,
        Cells::Text => &csv_cells(expected) == found,
        Cells::Typed => {
            let text = csv_cells(expected);
            expected.iter().filter(|(_, v)| !v.is_null()).count() == found.len()
                && expected.iter().all(|(k, v)| match found.get(k) {
                    None => v.is_null(),
                    Some(f) => {
                        f == v
                            || f == &text[k]
                            || matches!((v, f), (Value::String(a), Value::String(b))
                                if sinks::same_instant(a, b))
                    }
                })
        }
    }
}

pub fn reconcile(
    appended: &Appended,
    found: &[Found],
    dead: &DeadLetters,
) -> Result<Tally, Box<Violations>> {
    let mut v = Violations::default();
    let mut tally = Tally {
        found: found.len(),
        dead_letters: dead.rows.len(),
        dead_lettered_records: dead.records.len(),
        ..Tally::default()
    };
    v.unreadable_dead_letters = dead.unreadable.clone();

    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut copies: HashMap<u64, usize> = HashMap::new();
    for (i, f) in found.iter().enumerate() {
        if let Some(key) = f.key.as_deref() {
            if let Some(&j) = first.get(key) {
                tally.deduped += 1;
                if found[j].record != f.record {
                    v.conflicting
                        .push(format!("{key}: {:?} and {:?}", found[j].record, f.record));
                }
                continue;
            }
            first.insert(key, i);
        }
        let Some(id) = id_of(&f.record, appended.id_field) else {
            v.foreign
                .push(format!("no {}: {:?}", appended.id_field, f.record));
            continue;
        };
        let Some(expected) = (appended.record)(id) else {
            v.foreign.push(format!("{id}: {:?}", f.record));
            continue;
        };
        if !same(&expected, &f.record, f.cells) {
            v.altered.push(format!(
                "{id}: appended {expected:?}, read back {:?}",
                f.record
            ));
        }
        *copies.entry(id).or_default() += 1;
    }

    let mut dead_ids = HashSet::new();
    for r in &dead.records {
        let Some(id) = id_of(r, appended.id_field) else {
            v.foreign
                .push(format!("dead letter without {}: {r:?}", appended.id_field));
            continue;
        };
        match (appended.record)(id) {
            None => v.foreign.push(format!("dead letter {id}: {r:?}")),
            Some(expected) if &expected != r => v.altered.push(format!(
                "dead letter {id}: appended {expected:?}, holds {r:?}"
            )),
            Some(_) => {}
        }
        dead_ids.insert(id);
    }

    for &id in appended.ids {
        let n = copies.get(&id).copied().unwrap_or(0);
        let dead = dead_ids.contains(&id);
        match n {
            0 if !dead => v.lost.push(id),
            0 => {}
            1 => {
                tally.delivered += 1;
                if dead {
                    tally.dead_lettered_present += 1;
                }
            }
            _ => v.duplicated.push((id, n)),
        }
    }
    if v.is_empty() {
        Ok(tally)
    } else {
        Err(Box::new(v))
    }
}

/// One line of the per-destination report.
pub fn report_line(name: &str, t: &Tally) -> String {
    format!(
        "{name:<10} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9}",
        t.found,
        t.deduped,
        t.delivered,
        t.dead_letters,
        t.dead_lettered_records,
        t.dead_lettered_present
    )
}

pub fn report_header() -> String {
    format!(
        "{:<10} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9}",
        "dest", "read", "deduped", "delivered", "dl", "dl_recs", "dl_there"
    )
}

/// Where a parquet copy of a history differs from its JSON lines (by id,
/// the last record of each), column by column under parquet's
/// typed-column rules (`Cells::Typed`); abrq's own fields are left out.
pub fn parquet_differences(
    jsonl: &std::collections::BTreeMap<i32, Map<String, Value>>,
    parquet: &std::collections::BTreeMap<i32, Map<String, Value>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (id, want) in jsonl {
        let Some(got) = parquet.get(id) else {
            out.push(format!("row {id}: not in parquet"));
            continue;
        };
        for (name, w) in want.iter().filter(|(k, _)| !k.starts_with("_abrq")) {
            let cell = |v: Option<&Value>| -> Map<String, Value> {
                v.map(|v| (name.clone(), v.clone())).into_iter().collect()
            };
            if !same(&cell(Some(w)), &cell(got.get(name)), Cells::Typed) {
                out.push(format!(
                    "row {id}, column {name}: parquet {:?}, jsonl {w}",
                    got.get(name)
                ));
            }
        }
    }
    out
}
