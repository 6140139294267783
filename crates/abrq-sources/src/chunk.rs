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
/// A source gives its records as parsed `items`, or, when they were JSON
/// objects already (NDJSON files, rows PostgreSQL rendered with
/// `row_to_json`), as `kept`: the lines as they were read, in the spool's
/// own line form (`abrq_state::payload`: tag, JSON, newline), so the
/// engine stages them without parsing them into maps and encoding them
/// again. The chunk's order is its items, then its kept lines.
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

    /// Parses the kept lines into items after the others, for a step that
    /// works on items (per-table rules, a backfill's window).
    pub fn parse_kept(&mut self) -> Result<(), payload::LineError> {
        if !self.kept.is_empty() {
            let parsed = payload::decode_lines(&self.kept)?;
            self.items.extend(parsed);
            self.kept = Vec::new();
        }
        Ok(())
    }

    /// Takes `next`'s records after these, with its cursor when it has one.
    pub fn append(&mut self, next: Chunk) {
        if self.kept.is_empty() {
            self.items.extend(next.items);
            self.kept = next.kept;
        } else {
            // items after kept lines: they become lines too, in order
            payload::encode_into(&mut self.kept, &next.items)
                .expect("items read from a source encode");
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

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Op, Record};

    fn page(table: &str, kept: &[u8]) -> Chunk {
        let mut c = Chunk {
            kept: kept.to_vec(),
            records: 1,
            ..Chunk::default()
        };
        c.close_page(TableRef::new(None, table), Map::new(), &table);
        c
    }

    fn tables_and_ids(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Table(t) => Some(t.name.clone()),
                Item::Record(r) => Some(format!("{:?} {}", r.op, r.fields["id"])),
                _ => None,
            })
            .collect()
    }

    /// Pages of kept lines after one another, then a chunk of items: every
    /// record stays after its own table's scope, in the order read.
    #[test]
    fn appended_pages_keep_their_order_and_scopes() {
        let mut c = page("a", b"I{\"id\":1}\n");
        c.append(page("b", b"I{\"id\":2}\n"));
        let mut fields = Map::new();
        fields.insert("id".into(), 3.into());
        c.append(Chunk {
            items: vec![
                Item::Table(TableRef::new(None, "a")),
                Item::Record(Record {
                    op: Op::Update,
                    fields,
                }),
            ],
            records: 1,
            ..Chunk::default()
        });
        assert_eq!(c.records, 3);
        assert_eq!(payload::record_lines(&c.kept), 3);
        c.parse_kept().unwrap();
        assert!(c.kept.is_empty());
        assert_eq!(
            tables_and_ids(&c.items),
            ["a", "Insert 1", "b", "Insert 2", "a", "Update 3"]
        );
    }

    #[test]
    fn copied_rows_read_as_read_in_kept_lines_too() {
        let mut c = page("a", b"I{\"id\":1,\"s\":\"I\"}\nD{\"id\":2}\nI{\"id\":3}\n");
        crate::cdc::builder::read_rows(&mut c);
        c.parse_kept().unwrap();
        assert_eq!(
            tables_and_ids(&c.items),
            ["a", "Read 1", "Delete 2", "Read 3"]
        );
    }
}
