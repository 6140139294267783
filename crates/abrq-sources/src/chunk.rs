//! The unit a source hands to the engine.

use abrq_core::Item;

/// How much one chunk may hold: a batch's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_records: u64,
    pub max_bytes: u64,
}

/// Records read since the last chunk, and the cursor just after them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    pub items: Vec<Item>,
    pub records: u64,
    /// Encoded size of the records as read.
    pub bytes: u64,
    pub cursor: Option<String>,
    /// The source has nothing more for now (end of file).
    pub at_end: bool,
}

impl Chunk {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn is_full(&self, limits: Limits) -> bool {
        self.records >= limits.max_records || self.bytes >= limits.max_bytes
    }
}
