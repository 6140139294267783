//! An NDJSON line kept as it was read: checked to be one JSON object by
//! the same parser, with the same nesting limit, as a full parse, but
//! without building a map; then appended to the chunk's kept lines with its
//! op tag. Staging the line as read saves parsing each record into a map,
//! encoding it again and freeing it. A line that names its op (`_abrq_op`)
//! is parsed whole, as that key leaves the record.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use abrq_core::Op;
use abrq_state::payload;

use crate::ingest::record_from_object;

/// Checks `body` (one line, end of line trimmed) and appends it to `out`
/// as a kept line: op tag, the object, newline.
pub(super) fn keep_line(body: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let shape = de
        .deserialize_any(Top)
        .and_then(|shape| de.end().map(|()| shape))
        .map_err(|e| format!("invalid JSON: {e}"))?;
    match shape {
        Shape::Object { names_op: false } => {
            out.push(payload::op_tag(Op::Insert));
            out.extend_from_slice(body);
            out.push(b'\n');
        }
        Shape::Object { names_op: true } => {
            let fields = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
            let record = record_from_object(fields)?;
            payload::encode_record(out, record.op, &record.fields)
                .map_err(|e| format!("cannot encode the record: {e}"))?;
        }
        Shape::Other => return Err("expected a JSON object".into()),
    }
    Ok(())
}

enum Shape {
    Object { names_op: bool },
    Other,
}

/// The line's top value: an object (and whether `_abrq_op` is one of its
/// keys), or anything else.
struct Top;

impl<'de> Visitor<'de> for Top {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut names_op = false;
        while let Some(key) = map.next_key::<NamesOp>()? {
            names_op |= key.0;
            map.next_value::<Checked>()?;
        }
        Ok(Shape::Object { names_op })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Shape, A::Error> {
        Checked.visit_seq(seq).map(|_| Shape::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_unit<E>(self) -> Result<Shape, E> {
        Ok(Shape::Other)
    }
}

/// Whether a key is `_abrq_op`.
struct NamesOp(bool);

impl<'de> Deserialize<'de> for NamesOp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = NamesOp;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, v: &str) -> Result<NamesOp, E> {
                Ok(NamesOp(v == "_abrq_op"))
            }
        }
        d.deserialize_str(Key)
    }
}

/// Any value, walked through so the parser checks it (strings, numbers,
/// nesting) as a full parse would, with nothing kept.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kept(line: &str) -> Result<String, String> {
        let mut out = Vec::new();
        keep_line(line.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn an_object_is_kept_as_it_was_read() {
        let line = r#"{ "b": 1.0e2, "a": "\u00e9", "n": [1, {"x": null}] }"#;
        assert_eq!(kept(line).unwrap(), format!("I{line}\n"));
    }

    #[test]
    fn a_named_op_leaves_the_record() {
        assert_eq!(
            kept(r#"{"id": 1, "_abrq_op": "delete"}"#).unwrap(),
            "D{\"id\":1}\n"
        );
        let err = kept(r#"{"_abrq_op": "merge"}"#).unwrap_err();
        assert!(err.contains("merge"), "{err}");
        // nested, the key is an ordinary field
        assert!(kept(r#"{"x": {"_abrq_op": "delete"}}"#)
            .unwrap()
            .starts_with('I'));
    }

    #[test]
    fn what_a_full_parse_refuses_is_refused() {
        for bad in [
            "[1, 2]",
            "5",
            "\"s\"",
            "null",
            "{\"a\": 1",
            "{\"a\": 1} x",
            "{\"a\": tru}",
            "{\"a\": \"\\q\"}",
            "{\"a\": 1e999}",
        ] {
            let full = serde_json::from_str::<serde_json::Value>(bad)
                .ok()
                .filter(|v| v.is_object());
            assert!(full.is_none(), "{bad}");
            assert!(kept(bad).is_err(), "{bad} was kept");
        }
        assert!(keep_line(b"{\"a\": \"\xff\"}", &mut Vec::new()).is_err());
    }

    #[test]
    fn nesting_is_limited_as_in_a_full_parse() {
        let deep = |n: usize| format!("{{\"a\": {}1{}}}", "[".repeat(n), "]".repeat(n));
        for n in [10, 126, 127, 128, 200, 100_000] {
            let full = serde_json::from_str::<serde_json::Value>(&deep(n)).is_ok();
            assert_eq!(kept(&deep(n)).is_ok(), full, "depth {n}");
        }
    }

    #[test]
    fn a_kept_line_reads_back_as_the_parsed_object() {
        let line = r#"{"id": 7, "tags": ["a", "b"], "price": 1.50}"#;
        let mut c = crate::chunk::Chunk::default();
        keep_line(line.as_bytes(), &mut c.kept).unwrap();
        let items = c.kept_items().unwrap();
        let want = json!({"id": 7, "tags": ["a", "b"], "price": 1.50});
        assert_eq!(
            serde_json::Value::Object(items[0].as_record().unwrap().fields.clone()),
            want
        );
    }
}
