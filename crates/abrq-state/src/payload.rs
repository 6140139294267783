//! The spool's payload format: one JSON document per item, each ending in a
//! newline (NDJSON). JSON escapes newlines inside strings, so a raw `\n` only
//! ever separates items, and a serde_json error's line number is the 1-based
//! index of the offending item.
//!
//! The items use [`Item`]'s own serde form (`{"kind":"record",...}`), so
//! the spool format follows abrq-core without a second definition to keep in
//! step. (A hand-written flat decoder measured within noise of the derived
//! one: the cost is in building the field maps, not in the tag.)

use std::io;

use abrq_core::Item;

use crate::store::{StoreError, StoreResult};

/// Encodes a batch's items for the spool.
pub fn encode(items: &[Item]) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(items.len().saturating_mul(64));
    encode_into(&mut out, items)?;
    Ok(out)
}

/// Appends the encoded items to `out` (lets a caller reuse one buffer).
pub fn encode_into(out: &mut Vec<u8>, items: &[Item]) -> Result<(), serde_json::Error> {
    for item in items {
        serde_json::to_writer(&mut *out, item)?;
        out.push(b'\n');
    }
    Ok(())
}

/// The number of bytes `item` takes in a payload, newline included, without
/// building the encoding. Sources use it to close a batch at `max_bytes`.
pub fn encoded_len(item: &Item) -> Result<u64, serde_json::Error> {
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, item)?;
    Ok(counter.0 + 1)
}

/// Decodes a spooled payload; `seq` only names the batch in the error.
/// Blank lines and a missing final newline are tolerated.
pub fn decode(seq: u64, bytes: &[u8]) -> StoreResult<Vec<Item>> {
    let payload_err = |source| StoreError::Payload { seq, source };
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    let mut items = Vec::with_capacity(lines + 1);
    for item in serde_json::Deserializer::from_slice(bytes).into_iter::<Item>() {
        items.push(item.map_err(payload_err)?);
    }
    Ok(items)
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
            Item::Schema {
                columns: obj(json!({"id": "bigint", "note": "text"})),
            },
            Item::Record(Record::insert(Map::new())),
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
    fn matches_the_items_own_serde_form() {
        for item in sample() {
            let line = serde_json::to_string(&item).unwrap();
            let back: Item = serde_json::from_str(&line).unwrap();
            assert_eq!(decode(1, line.as_bytes()).unwrap(), vec![back]);
        }
    }

    #[test]
    fn encoded_len_counts_the_line() {
        let items = sample();
        let total: u64 = items.iter().map(|i| encoded_len(i).unwrap()).sum();
        assert_eq!(total, encode(&items).unwrap().len() as u64);
    }

    #[test]
    fn tolerates_blank_lines_and_missing_final_newline() {
        let bytes = b"\n{\"kind\":\"truncate\"}\n\n{\"kind\":\"record\",\"fields\":{\"a\":1}}";
        let items = decode(1, bytes).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], Item::Truncate);
        assert!(decode(1, b"").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_seq_and_the_item_line() {
        let bytes = b"{\"kind\":\"truncate\"}\n{\"kind\":\"record\"}\n";
        let err = decode(7, bytes).unwrap_err();
        assert!(matches!(err, StoreError::Payload { seq: 7, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("seq 7") && msg.contains("fields"), "{msg}");

        let torn = encode(&sample()).unwrap();
        let err = decode(3, &torn[..torn.len() - 5]).unwrap_err();
        assert!(err.to_string().contains("line 6"), "{err}");

        let err = decode(3, b"{\"kind\":\"nope\"}").unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
