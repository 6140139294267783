//! The unit a source hands to the engine.

use abrq_core::{Item, TableRef};
use abrq_state::payload;
use serde_json::{Map, Value};

/// What a database source's record counts against a batch's `max_bytes`:
/// about its JSON length, without encoding it (the spool encodes it once).
pub fn record_bytes(fields: &Map<String, Value>) -> u64 {
    fields
        .iter()
        .map(|(k, v)| {
            k.len() as u64
                + 4
                + match v {
                    Value::String(s) => s.len() as u64 + 2,
                    Value::Null => 4,
                    Value::Bool(b) => 4 + u64::from(!*b),
                    Value::Number(n) => n.to_string().len() as u64,
                    Value::Array(_) | Value::Object(_) => v.to_string().len() as u64,
                }
        })
        .sum::<u64>()
        + 2
}

/// How much one chunk may hold: a batch's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_records: u64,
    pub max_bytes: u64,
}

/// Records read since the last chunk, and the cursor just after them.
///
/// A source gives its records either as parsed `items` or, when they were
/// JSON objects already (NDJSON files), as `kept`: the lines as they were
/// read, checked, in the spool's own line form (`abrq_state::payload`: op
/// tag, the object, newline), so the engine stages them
/// without parsing them into maps and encoding them again. One source uses
/// one of the two, so their order never needs to be merged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    pub items: Vec<Item>,
    pub kept: Vec<u8>,
    pub records: u64,
    /// Encoded size of the records as read.
    pub bytes: u64,
    pub cursor: Option<String>,
    /// The source has nothing more for now (end of file).
    pub at_end: bool,
}

impl Chunk {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.kept.is_empty()
    }

    /// The records in `kept`, parsed (for tests and tools; the engine
    /// stages `kept` as it is).
    pub fn kept_items(&self) -> Result<Vec<Item>, payload::LineError> {
        payload::decode_lines(&self.kept)
    }

    /// Takes `next`'s records after these, with its cursor when it has one.
    pub fn append(&mut self, next: Chunk) {
        self.items.extend(next.items);
        if self.kept.is_empty() {
            self.kept = next.kept;
        } else {
            self.kept.extend_from_slice(&next.kept);
        }
        self.records += next.records;
        self.bytes += next.bytes;
        if next.cursor.is_some() {
            self.cursor = next.cursor;
        }
    }

    /// Makes the records read a page of `table`: its scope and columns go
    /// first (every batch describes itself), and the cursor is the last
    /// row's `position`.
    pub fn close_page(
        &mut self,
        table: TableRef,
        columns: Map<String, Value>,
        position: &impl serde::Serialize,
    ) {
        let scope = Item::Table(table);
        self.items.splice(0..0, [scope, Item::Schema { columns }]);
        self.cursor = Some(serde_json::to_string(position).expect("a position serializes"));
    }

    pub fn is_full(&self, limits: Limits) -> bool {
        self.records >= limits.max_records || self.bytes >= limits.max_bytes
    }
}
