//! Builds one chunk of changes: each change after its table's scope, and
//! after its table's columns the first time the chunk holds the table (or
//! the table's shape changed), so every batch describes itself.

use std::sync::Arc;

use abrq_core::lines::op_tag;
use abrq_core::{Item, Op, Record, TableRef, TX_FIELD};

use super::protocol::Table;
use crate::chunk::{record_bytes, Chunk, Limits};

#[derive(Default)]
pub struct Builder {
    pub chunk: Chunk,
    /// The table the chunk's last scope names.
    scope: Option<TableRef>,
    /// The shape each table of the chunk was declared with.
    declared: Vec<Arc<Table>>,
    /// Tables declare `_abrq_tx` (a JSON column) beside their own.
    tx_column: bool,
}

impl Builder {
    pub fn with_tx_column(tx_column: bool) -> Self {
        Builder {
            tx_column,
            ..Builder::default()
        }
    }

    pub fn record(&mut self, table: &Arc<Table>, record: Record) {
        self.scope_to(table);
        self.declare_once(table);
        self.chunk.records += 1;
        self.chunk.bytes += record_bytes(&record.fields);
        self.chunk.items.push(Item::Record(record));
    }

    /// A transaction's marker, beside a change of `table` (in its scope,
    /// so a destination that routes by table puts it with that change).
    pub fn marker(
        &mut self,
        table: &Arc<Table>,
        fields: serde_json::Map<String, serde_json::Value>,
    ) {
        self.scope_to(table);
        self.declare_once(table);
        self.chunk.items.push(Item::Marker { fields });
    }

    pub fn truncate(&mut self, table: &Arc<Table>) {
        self.scope_to(table);
        self.declare_once(table);
        self.chunk.items.push(Item::Truncate);
    }

    /// The table's columns, declared now (they changed).
    pub fn declare(&mut self, table: &Arc<Table>) {
        self.scope_to(table);
        self.forget(&table.table);
        self.declare_once(table);
    }

    /// A page that brings its own scope and columns: the stream's next
    /// change says its own again (its columns may be newer).
    /// Its rows were read, not changed ([`read_rows`]).
    pub fn page(&mut self, mut page: Chunk) {
        read_rows(&mut page);
        for item in &page.items {
            if let Item::Table(t) = item {
                self.forget(t);
            }
        }
        self.scope = None;
        let cursor = self.chunk.cursor.take();
        self.chunk.append(page);
        if self.chunk.cursor.is_none() {
            self.chunk.cursor = cursor;
        }
    }

    pub fn is_full(&self, limits: Limits) -> bool {
        self.chunk.is_full(limits)
    }

    pub fn is_empty(&self) -> bool {
        self.chunk.is_empty()
    }

    fn scope_to(&mut self, table: &Arc<Table>) {
        if self.scope.as_ref() != Some(&table.table) {
            self.chunk.items.push(Item::Table(table.table.clone()));
            self.scope = Some(table.table.clone());
        }
    }

    fn declare_once(&mut self, table: &Arc<Table>) {
        if self.declared.iter().any(|d| Arc::ptr_eq(d, table)) {
            return;
        }
        self.forget(&table.table);
        let mut columns = table.declared.clone();
        if self.tx_column {
            columns.insert(TX_FIELD.into(), "json".into());
        }
        self.chunk.items.push(Item::Schema { columns });
        self.declared.push(table.clone());
    }

    fn forget(&mut self, table: &TableRef) {
        self.declared.retain(|d| d.table != *table);
    }
}

/// Marks a copy's or a backfill's rows as read (`Op::Read`, Debezium's
/// `r`), not inserted: an insert everywhere else.
pub fn read_rows(page: &mut Chunk) {
    for item in &mut page.items {
        if let Item::Record(r) = item {
            if r.op == abrq_core::Op::Insert {
                r.op = abrq_core::Op::Read;
            }
        }
    }
    let (insert, read) = (op_tag(Op::Insert), op_tag(Op::Read));
    let mut at = 0;
    while let Some(tag) = page.kept.get_mut(at) {
        if *tag == insert {
            *tag = read;
        }
        match memchr::memchr(b'\n', &page.kept[at..]) {
            Some(end) => at += end + 1,
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn table(name: &str, cols: Value) -> Arc<Table> {
        let Value::Object(declared) = cols else {
            unreachable!()
        };
        Arc::new(Table {
            table: TableRef::new(Some("s"), name),
            declared,
        })
    }

    fn rec(id: u64) -> Record {
        let mut m = Map::new();
        m.insert("id".into(), id.into());
        Record::insert(m)
    }

    fn kinds(b: &Builder) -> Vec<&'static str> {
        b.chunk
            .items
            .iter()
            .map(|i| match i {
                Item::Record(_) => "r",
                Item::Table(_) => "t",
                Item::Truncate => "x",
                Item::Schema { .. } => "s",
                Item::Marker { .. } => "m",
            })
            .collect()
    }

    #[test]
    fn scope_and_columns_are_said_once_until_they_change() {
        let a = table("a", json!({"id": "int"}));
        let b = table("b", json!({"id": "int"}));
        let mut out = Builder::default();
        out.record(&a, rec(1));
        out.record(&a, rec(2));
        out.record(&b, rec(3));
        out.record(&a, rec(4));
        let a2 = table("a", json!({"id": "int", "x": "text"}));
        out.record(&a2, rec(5));
        out.declare(&a2);
        out.truncate(&b);
        assert_eq!(
            kinds(&out),
            ["t", "s", "r", "r", "t", "s", "r", "t", "r", "s", "r", "s", "t", "x"]
        );
        assert_eq!(out.chunk.records, 5);
        let mut page = Builder::default();
        page.record(&a2, rec(6));
        out.page(page.chunk);
        out.record(&a2, rec(7));
        assert_eq!(kinds(&out)[14..], ["t", "s", "r", "t", "s", "r"]);
    }
}
