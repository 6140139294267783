//! Which columns of a database source's tables reach the destinations, and
//! masked how: `[streams.source.per_table."schema.table"]` with `columns`
//! (only these) or `exclude_columns`, and `mask = { email = "hash", phone
//! = "redact" }`. Applied to every chunk the source hands out (its copy,
//! its stream, its backfills, a cursor source's pages alike), to the
//! table's declared columns as to its records, so a relational destination
//! never creates a column that was left out.
//!
//! `where` keeps only the rows a filter (`filter::Expr`) keeps, evaluated
//! by abrq on each row as read, before columns are left out: an insert
//! that fails it is dropped, an update that fails it becomes a delete of
//! its row (the row may have matched before), and a delete always passes
//! (its old row is not known in full).
//!
//! `hash` is SHA-256 over the source's `mask_salt`, a zero byte and the
//! value (a string's text, anything else its JSON), as 64 hex digits: the
//! same value hashes the same in every run and every stream with that
//! salt, so a masked column still joins. Its declared type becomes `text`.
//! `redact` makes the value null. A key column cannot be left out or
//! redacted (upserts and deletes find rows by it); it can be hashed.

use std::collections::BTreeMap;

use abrq_core::config::Secret;
use abrq_core::{Item, Op, TableRef};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::chunk::{Chunk, Limits};
use crate::error::{Failure, SourceError};
use crate::filter::Expr;
use crate::progress::Progress;
use crate::source::{BackfillAsk, Pace, Source};

/// One table's keys, as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TableOptions {
    /// Only these columns (and abrq's own `_abrq_*` fields).
    pub columns: Option<Vec<String>>,
    #[serde(default)]
    pub exclude_columns: Vec<String>,
    #[serde(default)]
    pub mask: BTreeMap<String, Mask>,
    /// Only the rows this filter keeps.
    #[serde(rename = "where")]
    pub filter: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mask {
    Hash,
    Redact,
}

/// The rules of a source, checked.
#[derive(Debug, Clone, Default)]
pub struct PerTable {
    /// Table as written (`name` or `schema.name`), its options and its
    /// filter, parsed.
    tables: Vec<(String, TableOptions, Option<Expr>)>,
    salt: Option<Secret>,
}

impl PerTable {
    /// `tables` from `per_table`, `salt` from `mask_salt`; the error names
    /// the key.
    pub fn new(
        tables: BTreeMap<String, TableOptions>,
        salt: Option<Secret>,
    ) -> Result<PerTable, (&'static str, String)> {
        let mut parsed = Vec::with_capacity(tables.len());
        for (name, o) in &tables {
            let filter = o.filter.as_deref().map(Expr::parse).transpose();
            let filter = filter.map_err(|e| ("per_table", format!("{name:?}: where: {e}")))?;
            parsed.push((name.clone(), o.clone(), filter));
            if o.columns.is_some() && !o.exclude_columns.is_empty() {
                return Err((
                    "per_table",
                    format!("{name:?}: set columns or exclude_columns, not both"),
                ));
            }
            if o.columns.as_ref().is_some_and(Vec::is_empty) {
                return Err(("per_table", format!("{name:?}: columns is empty")));
            }
        }
        let hashes = tables
            .values()
            .any(|o| o.mask.values().any(|m| *m == Mask::Hash));
        let salt = salt.filter(|s| !s.is_empty());
        if hashes && salt.is_none() {
            return Err((
                "mask_salt",
                "a column is masked with \"hash\": set mask_salt (a secret, e.g. \"${MASK_SALT}\"), \
                 so the same value hashes the same in every run"
                    .into(),
            ));
        }
        Ok(PerTable {
            tables: parsed,
            salt,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The names written, for a check that each is captured.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tables.iter().map(|(n, _, _)| n.as_str())
    }

    /// The columns of `table` that are masked: their values differ from
    /// the source's by design.
    pub fn masked(&self, table: &TableRef) -> Vec<String> {
        self.of(Some(table))
            .map(|(o, _)| o.mask.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The filter that keeps `table`'s rows, if it has one.
    pub fn filter(&self, table: &TableRef) -> Option<&Expr> {
        self.of(Some(table)).and_then(|(_, f)| f)
    }

    /// The options of `table`: `schema.name` as written, or `name` alone.
    fn of(&self, table: Option<&TableRef>) -> Option<(&TableOptions, Option<&Expr>)> {
        let t = table?;
        let full = t.to_string();
        self.tables
            .iter()
            .find(|(n, _, _)| *n == full)
            .or_else(|| self.tables.iter().find(|(n, _, _)| *n == t.name))
            .map(|(_, o, f)| (o, f.as_ref()))
    }

    /// Applies the rules to every item of `chunk`.
    pub fn apply(&self, chunk: &mut Chunk) -> Result<(), SourceError> {
        chunk
            .parse_kept()
            .map_err(|e| SourceError::caused(Failure::Decode, "a row read is not JSON", e))?;
        let mut rules: Option<(&TableOptions, Option<&Expr>)> = None;
        let mut table: Option<TableRef> = None;
        let mut dropped = 0;
        let items = std::mem::take(&mut chunk.items);
        for mut item in items {
            match &mut item {
                Item::Table(t) => {
                    rules = self.of(Some(t));
                    table = Some(t.clone());
                }
                Item::Schema { columns } => {
                    if let Some((r, _)) = rules {
                        let t = table.as_ref().map(ToString::to_string).unwrap_or_default();
                        declare(r, &t, columns)?;
                    }
                }
                Item::Record(rec) => {
                    if let Some((r, filter)) = rules {
                        let pass = filter.is_none_or(|f| f.keeps(&rec.fields));
                        match (pass, rec.op) {
                            (true, _) | (false, Op::Delete) => {}
                            (false, Op::Update) => rec.op = Op::Delete,
                            (false, Op::Insert | Op::Read) => {
                                dropped += 1;
                                continue;
                            }
                        }
                        self.shape(r, &mut rec.fields);
                    }
                }
                Item::Truncate | Item::Marker { .. } => {}
            }
            chunk.items.push(item);
        }
        chunk.records -= dropped.min(chunk.records);
        Ok(())
    }

    fn shape(&self, r: &TableOptions, fields: &mut Map<String, Value>) {
        fields.retain(|k, _| kept(r, k));
        for (column, mask) in &r.mask {
            if let Some(v) = fields.get_mut(column) {
                *v = match (mask, &*v) {
                    (_, Value::Null) => Value::Null,
                    (Mask::Redact, _) => Value::Null,
                    (Mask::Hash, v) => Value::String(self.hash(v)),
                };
            }
        }
    }

    fn hash(&self, v: &Value) -> String {
        let mut h = Sha256::new();
        h.update(self.salt.as_ref().map_or("", Secret::expose).as_bytes());
        h.update([0u8]);
        match v {
            Value::String(s) => h.update(s.as_bytes()),
            other => h.update(other.to_string().as_bytes()),
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Whether column `k` reaches the destinations.
fn kept(r: &TableOptions, k: &str) -> bool {
    if k.starts_with("_abrq_") {
        return true;
    }
    match &r.columns {
        Some(only) => only.iter().any(|c| c == k),
        None => !r.exclude_columns.iter().any(|c| c == k),
    }
}

/// The declared columns as the destinations get them; a key column left
/// out or redacted stops the source, naming it.
fn declare(
    r: &TableOptions,
    table: &str,
    columns: &mut Map<String, Value>,
) -> Result<(), SourceError> {
    for (name, ty) in columns.iter() {
        let key = ty.get("primary_key").and_then(Value::as_bool) == Some(true);
        let why = match (kept(r, name), r.mask.get(name)) {
            (false, _) => "left out",
            (true, Some(Mask::Redact)) => "redacted",
            _ => continue,
        };
        if key {
            return Err(SourceError::new(
                Failure::Invalid,
                format!(
                    "per_table.{table:?}: column {name:?} is {why}, but it is the table's primary key \
                     (upserts and deletes find rows by it); hash it instead, or keep it"
                ),
            ));
        }
    }
    columns.retain(|k, _| kept(r, k));
    for (column, mask) in &r.mask {
        if let (Mask::Hash, Some(ty)) = (mask, columns.get_mut(column)) {
            match ty {
                Value::Object(o) => {
                    o.insert("type".into(), "text".into());
                }
                other => *other = "text".into(),
            }
        }
    }
    Ok(())
}

/// A source whose chunks the rules shape.
pub struct Shaped {
    inner: Box<dyn Source>,
    rules: PerTable,
}

impl Shaped {
    /// `inner` as is when there are no rules.
    pub fn wrap(inner: Box<dyn Source>, rules: PerTable) -> Box<dyn Source> {
        match rules.is_empty() {
            true => inner,
            false => Box::new(Shaped { inner, rules }),
        }
    }
}

#[async_trait]
impl Source for Shaped {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn pace(&self) -> Pace {
        self.inner.pace()
    }

    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let mut chunk = self.inner.read(limits).await?;
        self.rules.apply(&mut chunk)?;
        Ok(chunk)
    }

    fn staged(&mut self, cursor: &str) {
        self.inner.staged(cursor);
    }

    fn progress(&self) -> Option<Progress> {
        self.inner.progress()
    }

    fn backfill(&mut self, ask: BackfillAsk) {
        self.inner.backfill(ask);
    }

    fn asked_before(&mut self, asked: Vec<BackfillAsk>, newest: Option<i64>) {
        self.inner.asked_before(asked, newest);
    }

    async fn check(&mut self) -> Result<String, SourceError> {
        self.inner.check().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::Record;
    use serde_json::json;

    fn rules(
        table: &str,
        o: Value,
        salt: Option<&str>,
    ) -> Result<PerTable, (&'static str, String)> {
        let o: TableOptions = serde_json::from_value(o).unwrap();
        PerTable::new([(table.to_string(), o)].into(), salt.map(Secret::new))
    }

    fn obj(v: Value) -> Map<String, Value> {
        let Value::Object(m) = v else { unreachable!() };
        m
    }

    fn chunk(columns: Value, rows: &[Value]) -> Chunk {
        let mut items = vec![
            Item::Table(TableRef::new(Some("shop"), "customers")),
            Item::Schema {
                columns: obj(columns),
            },
        ];
        items.extend(
            rows.iter()
                .map(|r| Item::Record(Record::insert(obj(r.clone())))),
        );
        Chunk {
            items,
            ..Chunk::default()
        }
    }

    #[test]
    fn excluded_columns_go_from_rows_and_declarations_and_hashes_are_stable() {
        let r = rules(
            "shop.customers",
            json!({"exclude_columns": ["ssn"], "mask": {"email": "hash", "phone": "redact"}}),
            Some("pepper"),
        )
        .unwrap();
        let cols = json!({"id": {"type": "int", "primary_key": true}, "email": "text", "phone": "text", "ssn": "text"});
        let row = json!({"id": 1, "email": "a@b.c", "phone": "555", "ssn": "123", "_abrq_tx": {"index": 0}});
        let mut c = chunk(cols.clone(), &[row.clone(), row]);
        r.apply(&mut c).unwrap();
        let Item::Schema { columns } = &c.items[1] else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(columns.clone()),
            json!({"id": {"type": "int", "primary_key": true}, "email": "text", "phone": "text"})
        );
        let a = c.items[2].as_record().unwrap();
        let b = c.items[3].as_record().unwrap();
        assert_eq!(a, b, "the same value hashes the same");
        assert!(!a.fields.contains_key("ssn"));
        assert!(a.fields.contains_key("_abrq_tx"));
        assert_eq!(a.fields["phone"], Value::Null);
        let h = a.fields["email"].as_str().unwrap();
        assert_eq!(h.len(), 64);
        let other = rules(
            "customers",
            json!({"mask": {"email": "hash"}}),
            Some("salt"),
        )
        .unwrap();
        let mut c = chunk(cols, &[json!({"id": 1, "email": "a@b.c"})]);
        other.apply(&mut c).unwrap();
        let h2 = c.items[2].as_record().unwrap().fields["email"].clone();
        assert_ne!(h2, json!(h), "another salt, another hash");
    }

    #[test]
    fn a_key_column_cannot_be_left_out_or_redacted_but_can_be_hashed() {
        let cols = json!({"id": {"type": "int", "primary_key": true}, "v": "int"});
        for o in [json!({"columns": ["v"]}), json!({"mask": {"id": "redact"}})] {
            let r = rules("customers", o, None).unwrap();
            let e = r.apply(&mut chunk(cols.clone(), &[])).unwrap_err();
            assert!(e.to_string().contains("primary key"), "{e}");
        }
        let r = rules("customers", json!({"mask": {"id": "hash"}}), Some("s")).unwrap();
        let mut c = chunk(cols, &[json!({"id": 1, "v": 2})]);
        r.apply(&mut c).unwrap();
        let Item::Schema { columns } = &c.items[1] else {
            unreachable!()
        };
        assert_eq!(columns["id"], json!({"type": "text", "primary_key": true}));
    }

    #[test]
    fn a_row_filter_drops_inserts_turns_updates_into_deletes_and_passes_deletes() {
        let r = rules(
            "customers",
            json!({"where": "region = 'eu'", "exclude_columns": ["region"]}),
            None,
        )
        .unwrap();
        let mut c = chunk(
            json!({"id": {"type": "int", "primary_key": true}, "region": "text"}),
            &[],
        );
        let rec = |op, v: Value| Item::Record(Record { op, fields: obj(v) });
        c.items.extend([
            rec(Op::Insert, json!({"id": 1, "region": "eu"})),
            rec(Op::Insert, json!({"id": 2, "region": "us"})),
            rec(Op::Update, json!({"id": 3, "region": "us"})),
            rec(Op::Delete, json!({"id": 4})),
        ]);
        c.records = 4;
        r.apply(&mut c).unwrap();
        let got: Vec<(Op, Value)> = c
            .items
            .iter()
            .filter_map(Item::as_record)
            .map(|r| (r.op, Value::Object(r.fields.clone())))
            .collect();
        assert_eq!(
            got,
            [
                (Op::Insert, json!({"id": 1})),
                (Op::Delete, json!({"id": 3})),
                (Op::Delete, json!({"id": 4})),
            ]
        );
        assert_eq!(c.records, 3);
        let e = rules("t", json!({"where": "lower(x) = 'a'"}), None).unwrap_err();
        assert!(e.1.contains("where") && e.1.contains("functions"), "{e:?}");
    }

    #[test]
    fn a_hash_needs_a_salt_and_columns_excludes_exclude_columns() {
        let e = rules("t", json!({"mask": {"x": "hash"}}), None).unwrap_err();
        assert_eq!(e.0, "mask_salt");
        let e = rules(
            "t",
            json!({"columns": ["a"], "exclude_columns": ["b"]}),
            None,
        )
        .unwrap_err();
        assert!(e.1.contains("not both"), "{e:?}");
    }
}
