//! The spool's payload format: one line per item, each ending in a newline.
//! JSON escapes newlines inside strings, so a raw `\n` only ever separates
//! items, and an error's line number is the 1-based index of the item.
//!
//! A line is one tag byte and then JSON (format 2):
//!
//! | line          | item                     |
//! |---------------|--------------------------|
//! | `I{fields}`   | insert record            |
//! | `U{fields}`   | update record            |
//! | `D{fields}`   | delete record            |
//! | `T`           | truncate instruction     |
//! | `S{columns}`  | schema instruction       |
//! | `N{table}`    | the source table of the items after it (`{"schema":..,"name":..}`) |
//!
//! A record's fields are written as the object they are, not wrapped in
//! another one, so a payload nests exactly as deep as the records it holds;
//! a record line is read back at any depth (`abrq_core::json`): a database
//! source's value nested thousands of levels deep is read as it was staged. Lines that start with `{` are the
//! first format ([`Item`]'s own serde form, `{"kind":"record",...}`), which
//! spools written by earlier versions still hold; they decode as before.

use std::io;

pub use abrq_core::lines::{decode as decode_lines, op_tag, LineError};
use abrq_core::{Item, Op};
use serde_json::{Map, Value};

use crate::store::{StoreError, StoreResult};

/// Encodes a batch's items for the spool.
pub fn encode(items: &[Item]) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(items.len().saturating_mul(64));
    encode_into(&mut out, items)?;
    Ok(out)
}

/// A batch's payload: its lines as read from the spool, else its items
/// encoded.
pub fn of_batch(batch: &abrq_core::Batch) -> Result<Vec<u8>, serde_json::Error> {
    match &batch.lines {
        Some(lines) => Ok(lines.to_vec()),
        None => encode(&batch.items),
    }
}

/// Appends the encoded items to `out` (lets a caller reuse one buffer).
pub fn encode_into(out: &mut Vec<u8>, items: &[Item]) -> Result<(), serde_json::Error> {
    for item in items {
        write_item(&mut *out, item)?;
    }
    Ok(())
}

/// Appends one encoded item, newline included.
pub fn encode_item(out: &mut Vec<u8>, item: &Item) -> Result<(), serde_json::Error> {
    write_item(out, item)
}

/// Appends one insert, update or delete record given as its parts, without
/// building an [`Item`] (HTTP ingest encodes straight from the parsed map).
pub fn encode_record(
    out: &mut Vec<u8>,
    op: Op,
    fields: &Map<String, Value>,
) -> Result<(), serde_json::Error> {
    out.push(op_tag(op));
    serde_json::to_writer(&mut *out, fields)?;
    out.push(b'\n');
    Ok(())
}

/// The number of bytes `item` takes in a payload, newline included, without
/// building the encoding. Sources use it to close a batch at `max_bytes`.
pub fn encoded_len(item: &Item) -> Result<u64, serde_json::Error> {
    let mut counter = ByteCounter(0);
    write_item(&mut counter, item)?;
    Ok(counter.0)
}

/// How many of a payload's lines are records (the others are a table's
/// scope, columns, a truncate or a marker).
pub fn record_lines(bytes: &[u8]) -> u64 {
    let records = abrq_core::lines::split_lines(bytes).filter(|line| {
        line.first()
            .is_some_and(|&b| abrq_core::lines::tag_op(b).is_some())
    });
    records.count() as u64
}

fn write_item<W: io::Write>(mut w: W, item: &Item) -> Result<(), serde_json::Error> {
    let io_err = serde_json::Error::io;
    match item {
        Item::Record(r) => {
            w.write_all(&[op_tag(r.op)]).map_err(io_err)?;
            serde_json::to_writer(&mut w, &r.fields)?;
        }
        Item::Truncate => w.write_all(b"T").map_err(io_err)?,
        Item::Table(t) => {
            w.write_all(b"N").map_err(io_err)?;
            serde_json::to_writer(&mut w, t)?;
        }
        Item::Schema { columns } => {
            w.write_all(b"S").map_err(io_err)?;
            serde_json::to_writer(&mut w, columns)?;
        }
        Item::Marker { fields } => {
            w.write_all(b"M").map_err(io_err)?;
            serde_json::to_writer(&mut w, fields)?;
        }
    }
    w.write_all(b"\n").map_err(io_err)
}

/// Decodes a spooled payload; `seq` only names the batch in the error.
/// Blank lines and a missing final newline are tolerated.
pub fn decode(seq: u64, bytes: &[u8]) -> StoreResult<Vec<Item>> {
    decode_lines(bytes).map_err(|source| StoreError::Payload { seq, source })
}

struct ByteCounter(u64);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Op, Record};
    use serde_json::{json, Map, Value};

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn record_lines_count_only_records() {
        let text = b"N{\"name\":\"t\"}\nS{}\nI{\"a\":\"I\\nD\"}\nR{}\nT\nU{}\nD{}\nM{}\n";
        assert_eq!(record_lines(text), 4);
        assert_eq!(record_lines(b""), 0);
    }

    fn sample() -> Vec<Item> {
        vec![
            Item::Record(Record::insert(obj(json!({"id": 1, "note": "a\nb \"q\""})))),
            Item::Record(Record {
                op: Op::Update,
                fields: obj(json!({"id": 1, "nested": {"x": [1, 2.5, null]}})),
            }),
            Item::Record(Record {
                op: Op::Delete,
                fields: obj(json!({"id": 2})),
            }),
            Item::Truncate,
            Item::Table(abrq_core::TableRef::new(Some("public"), "orders")),
            Item::Schema {
                columns: obj(json!({"id": "bigint", "note": "text"})),
            },
            Item::Record(Record::insert(Map::new())),
            Item::Record(Record::read(obj(json!({"id": 3})))),
        ]
    }

    #[test]
    fn round_trips_records_and_instructions() {
        let items = sample();
        let bytes = encode(&items).unwrap();
        assert_eq!(decode(1, &bytes).unwrap(), items);
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), items.len());
    }

    #[test]
    fn reads_the_first_format_too() {
        // What spools written before format 2 hold: Item's serde form.
        let mut old = Vec::new();
        for item in sample() {
            serde_json::to_writer(&mut old, &item).unwrap();
            old.push(b'\n');
        }
        assert_eq!(decode(1, &old).unwrap(), sample());
    }

    #[test]
    fn a_record_nests_no_deeper_than_it_came() {
        // The deepest object serde_json parses is the deepest the spool
        // decodes: nothing wraps the record.
        let mut deepest = 0;
        for depth in 1..200 {
            let text = format!(
                "{}{}",
                "{\"a\":".repeat(depth),
                "1".to_owned() + &"}".repeat(depth)
            );
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => {
                    deepest = depth;
                    let items = vec![Item::Record(Record::insert(m))];
                    assert_eq!(decode(1, &encode(&items).unwrap()).unwrap(), items);
                }
                _ => break,
            }
        }
        assert!(deepest >= 100, "{deepest}");
    }

    #[test]
    fn encoded_len_counts_the_line() {
        let items = sample();
        let total: u64 = items.iter().map(|i| encoded_len(i).unwrap()).sum();
        assert_eq!(total, encode(&items).unwrap().len() as u64);
    }

    #[test]
    fn encode_record_matches_encode_item() {
        let fields = obj(json!({"id": 7, "x": [1, {"y": null}]}));
        let mut a = Vec::new();
        encode_record(&mut a, Op::Update, &fields).unwrap();
        let b = encode(&[Item::Record(Record {
            op: Op::Update,
            fields,
        })])
        .unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn tolerates_blank_lines_and_missing_final_newline() {
        let bytes = b"\nT\n\nI{\"a\":1}";
        let items = decode(1, bytes).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], Item::Truncate);
        assert!(decode(1, b"").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_seq_and_the_item_line() {
        let bytes = b"T\n{\"kind\":\"record\"}\n";
        let err = decode(7, bytes).unwrap_err();
        assert!(matches!(err, StoreError::Payload { seq: 7, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("seq 7") && msg.contains("fields"), "{msg}");

        let torn = encode(&sample()).unwrap();
        let err = decode(3, &torn[..torn.len() - 3]).unwrap_err();
        assert!(err.to_string().contains("line 8"), "{err}");

        let err = decode(3, b"T\nX{}").unwrap_err();
        assert!(
            err.to_string().contains("line 2") && err.to_string().contains('X'),
            "{err}"
        );
    }
}
