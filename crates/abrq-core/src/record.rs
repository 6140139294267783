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
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// A JSON object plus its operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default, skip_serializing_if = "is_insert")]
    pub op: Op,
    pub fields: Map<String, Value>,
}

fn is_insert(op: &Op) -> bool {
    *op == Op::Insert
}

impl Record {
    pub fn insert(fields: Map<String, Value>) -> Self {
        Record {
            op: Op::Insert,
            fields,
        }
    }
}

/// One entry of a batch: a record or an instruction about the source table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Item {
    Record(Record),
    /// The source table was emptied at this point of the stream.
    Truncate,
    /// The source's columns changed; `columns` maps name to declared type.
    Schema {
        columns: Map<String, Value>,
    },
}

impl Item {
    pub fn as_record(&self) -> Option<&Record> {
        match self {
            Item::Record(r) => Some(r),
            Item::Truncate | Item::Schema { .. } => None,
        }
    }
}
