//! The unit a source hands to the engine.

use abrq_core::{Item, Op, Record};

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
/// read, checked, each prefixed by its op tag (`I`, `U` or `D`) and ended
/// by a newline, the spool's own line form, so the engine stages them
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
    pub fn kept_items(&self) -> Result<Vec<Item>, serde_json::Error> {
        let mut out = Vec::new();
        for line in self.kept.split(|&b| b == b'\n') {
            let Some((&tag, json)) = line.split_first() else {
                continue;
            };
            let op = match tag {
                b'U' => Op::Update,
                b'D' => Op::Delete,
                _ => Op::Insert,
            };
            let fields = serde_json::from_slice(json)?;
            out.push(Item::Record(Record { op, fields }));
        }
        Ok(out)
    }

    pub fn is_full(&self, limits: Limits) -> bool {
        self.records >= limits.max_records || self.bytes >= limits.max_bytes
    }
}
