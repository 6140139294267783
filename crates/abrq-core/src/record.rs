//! Records and the instructions that can travel beside them in a batch.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a record does to its row at a destination that understands rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    #[default]
    Insert,
    Update,
    Delete,
    /// A row as a database source's copy or backfill read it, not a
    /// change: an insert everywhere, but Debezium's envelope says `r`.
    Read,
}

impl Op {
    /// The operation's name; a row read is an insert.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert | Op::Read => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }

    /// Writes a new row: an insert, or a row read by a copy.
    pub fn is_insert(self) -> bool {
        matches!(self, Op::Insert | Op::Read)
    }
}

/// The field a database source's change carries its transaction in
/// (`transaction_metadata = true`), and a transaction marker's too.
pub const TX_FIELD: &str = "_abrq_tx";
/// A transaction marker's field saying `begin` or `commit`.
pub const MARKER_FIELD: &str = "_abrq_marker";

/// A JSON object plus its operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default, skip_serializing_if = "is_plain_insert")]
    pub op: Op,
    pub fields: Map<String, Value>,
}

fn is_plain_insert(op: &Op) -> bool {
    *op == Op::Insert
}

impl Record {
    pub fn insert(fields: Map<String, Value>) -> Self {
        Record {
            op: Op::Insert,
            fields,
        }
    }

    /// A row a copy or a backfill read.
    pub fn read(fields: Map<String, Value>) -> Self {
        Record {
            op: Op::Read,
            fields,
        }
    }
}

/// A table of a database source: its schema (when the database has
/// schemas) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TableRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub name: String,
}

impl TableRef {
    pub fn new(schema: Option<&str>, name: &str) -> Self {
        TableRef {
            schema: schema.map(str::to_string),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for TableRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One entry of a batch: a record or an instruction about the source table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Item {
    Record(Record),
    /// The items after this one, up to the next `Table`, belong to this
    /// source table. Database sources open every chunk with one, so each
    /// batch says its tables; a batch without one (files, HTTP ingest) is
    /// about the stream's single, unnamed table.
    Table(TableRef),
    /// The source table was emptied at this point of the stream.
    Truncate,
    /// The source's columns changed; `columns` maps name to declared type.
    Schema {
        columns: Map<String, Value>,
    },
    /// Where a source transaction begins or commits
    /// (`transaction_markers = true`): `{"_abrq_marker": "begin" |
    /// "commit", "_abrq_tx": {...}}`. Destinations that write events
    /// (Kafka, JSON lines objects) write it; the others leave it out.
    Marker {
        fields: Map<String, Value>,
    },
}

impl Item {
    pub fn as_record(&self) -> Option<&Record> {
        match self {
            Item::Record(r) => Some(r),
            Item::Table(_) | Item::Truncate | Item::Schema { .. } | Item::Marker { .. } => None,
        }
    }
}

/// The key of a declared column's object that names the column in the
/// source (PostgreSQL's `attnum`): it stays when the column is renamed, so
/// a destination follows a rename instead of adding a column.
pub const SOURCE_COLUMN: &str = "source_column";

/// The key of a declared column's object that names the column it was
/// until a rename the source saw (MySQL's `ALTER TABLE ... RENAME COLUMN`
/// or `CHANGE`).
pub const RENAMED_FROM: &str = "renamed_from";

/// Each declared column's source column, when the declaration gives one
/// for every column (abrq's own `_abrq_*` fields aside); None otherwise.
pub fn source_columns(columns: &Map<String, Value>) -> Option<Vec<(String, i64)>> {
    columns
        .iter()
        .filter(|(k, _)| !k.starts_with("_abrq_"))
        .map(|(k, v)| {
            v.get(SOURCE_COLUMN)
                .and_then(Value::as_i64)
                .map(|n| (k.clone(), n))
        })
        .collect()
}

/// The columns a schema instruction marks `primary_key`, in its order.
pub fn key_columns(columns: &Map<String, Value>) -> Vec<String> {
    columns
        .iter()
        .filter(|(_, v)| v.get("primary_key").and_then(Value::as_bool) == Some(true))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Each item of a batch (table scopes left out) with its index and the
/// source table it belongs to (`None` before any scope).
pub fn scoped(items: &[Item]) -> impl Iterator<Item = (usize, Option<&TableRef>, &Item)> {
    let mut table: Option<&TableRef> = None;
    items
        .iter()
        .enumerate()
        .filter_map(move |(i, item)| match item {
            Item::Table(t) => {
                table = Some(t);
                None
            }
            other => Some((i, table, other)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_follow_table_items() {
        let a = TableRef::new(Some("public"), "a");
        let b = TableRef::new(None, "b");
        let items = vec![
            Item::Truncate,
            Item::Table(a.clone()),
            Item::Record(Record::insert(Map::new())),
            Item::Table(b.clone()),
            Item::Truncate,
        ];
        let seen: Vec<(usize, Option<String>)> = scoped(&items)
            .map(|(i, t, _)| (i, t.map(ToString::to_string)))
            .collect();
        assert_eq!(
            seen,
            vec![
                (0, None),
                (2, Some("public.a".into())),
                (4, Some("b".into()))
            ]
        );
        let json = serde_json::to_string(&Item::Table(a)).unwrap();
        assert_eq!(json, r#"{"kind":"table","schema":"public","name":"a"}"#);
    }
}
