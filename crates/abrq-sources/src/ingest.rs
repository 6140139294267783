//! Parsing an HTTP ingest body: NDJSON or one JSON array of objects. Any bad
//! line rejects the whole body, naming the line, so nothing half-arrives.
//!
//! Records are handed to a callback one at a time as they are parsed, so a
//! caller can encode each and drop it: a body of many small records never
//! exists as a second, much larger, tree of parsed values.

use std::fmt;

use abrq_core::{Item, Op, Record};
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IngestError {
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("body: {0}")]
    Body(String),
}

/// Turns a JSON object into a record; an `_abrq_op` field sets the
/// operation (`insert`, `update`, `delete`) and is removed from the data.
pub fn record_from_object(mut fields: Map<String, Value>) -> Result<Record, String> {
    let op = match fields.remove("_abrq_op") {
        None => Op::Insert,
        Some(Value::String(s)) => match s.as_str() {
            "insert" => Op::Insert,
            "update" => Op::Update,
            "delete" => Op::Delete,
            other => return Err(format!("unknown _abrq_op {other:?}")),
        },
        Some(other) => return Err(format!("_abrq_op must be a string, got {other}")),
    };
    Ok(Record { op, fields })
}

/// Parses a body and hands each record, with its size in the body, to
/// `each`. A body that starts with `[` is one JSON array; anything else is
/// NDJSON (blank lines allowed). An error from `each` stops the parse and
/// is reported for that record. Returns the number of records.
pub fn for_each_record(
    body: &[u8],
    mut each: impl FnMut(Record, u64) -> Result<(), String>,
) -> Result<u64, IngestError> {
    let text = std::str::from_utf8(body).map_err(|e| IngestError::Line {
        line: line_at(body, e.valid_up_to()),
        message: "not valid UTF-8".into(),
    })?;
    if text.trim_start().starts_with('[') {
        return parse_array(text, &mut each);
    }
    let mut n = 0;
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let fail = |message| IngestError::Line {
            line: i + 1,
            message,
        };
        let record = parse_object(line).map_err(fail)?;
        each(record, line.len() as u64).map_err(fail)?;
        n += 1;
    }
    Ok(n)
}

/// Parses a whole body into items and their sizes (tests and tools; the
/// server streams through [`for_each_record`]).
pub fn parse_body(body: &[u8]) -> Result<Vec<(Item, u64)>, IngestError> {
    let mut out = Vec::new();
    for_each_record(body, |r, size| {
        out.push((Item::Record(r), size));
        Ok(())
    })?;
    Ok(out)
}

fn line_at(body: &[u8], offset: usize) -> usize {
    body[..offset].iter().filter(|b| **b == b'\n').count() + 1
}

fn parse_object(text: &str) -> Result<Record, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => record_from_object(m),
        Ok(other) => Err(format!("expected a JSON object, got {}", kind(&other))),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

/// Walks the array element by element: each object becomes a record and is
/// handed on before the next is parsed.
fn parse_array(
    text: &str,
    each: &mut dyn FnMut(Record, u64) -> Result<(), String>,
) -> Result<u64, IngestError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut walker = ArrayWalker {
        each,
        n: 0,
        failed: None,
    };
    let walked = (&mut walker).deserialize(&mut de).and_then(|()| de.end());
    if let Some(e) = walker.failed {
        return Err(e);
    }
    walked.map_err(|e| IngestError::Line {
        line: e.line(),
        message: format!("invalid JSON: {e}"),
    })?;
    Ok(walker.n)
}

struct ArrayWalker<'a> {
    each: &'a mut dyn FnMut(Record, u64) -> Result<(), String>,
    n: u64,
    /// A record the callback or the shape check refused; serde's own error
    /// type cannot carry it, so it waits here.
    failed: Option<IngestError>,
}

impl<'de> DeserializeSeed<'de> for &mut ArrayWalker<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for &mut ArrayWalker<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error as _;
        while let Some(v) = seq.next_element::<Value>()? {
            let i = self.n;
            let refuse = |message: String| IngestError::Body(format!("element {i}: {message}"));
            let outcome = match v {
                Value::Object(m) => {
                    let size = estimated_size(&m);
                    record_from_object(m)
                        .and_then(|r| (self.each)(r, size))
                        .map_err(refuse)
                }
                other => Err(refuse(format!(
                    "expected a JSON object, got {}",
                    kind(&other)
                ))),
            };
            if let Err(e) = outcome {
                self.failed = Some(e);
                return Err(A::Error::custom("record refused"));
            }
            self.n += 1;
        }
        Ok(())
    }
}

/// The size of an array element as compact JSON, without writing it out.
fn estimated_size(m: &Map<String, Value>) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, m);
    c.0
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndjson_with_blank_lines_and_ops() {
        let body = b"{\"a\":1}\n\n{\"a\":2,\"_abrq_op\":\"delete\"}\r\n";
        let items = parse_body(body).unwrap();
        assert_eq!(items.len(), 2);
        let Item::Record(r) = &items[1].0 else {
            panic!()
        };
        assert_eq!(r.op, Op::Delete);
        assert!(!r.fields.contains_key("_abrq_op"));
    }

    #[test]
    fn bad_line_is_named() {
        let e = parse_body(b"{\"a\":1}\n{\"a\":\n{\"a\":3}\n").unwrap_err();
        assert!(matches!(e, IngestError::Line { line: 2, .. }), "{e}");
        let e = parse_body(b"{\"a\":1}\n[1]\n").unwrap_err();
        assert!(matches!(e, IngestError::Line { line: 2, .. }), "{e}");
        let e = parse_body(b"{\"a\":1}\n\"x\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: expected a JSON object, got a string"
        );
        let e = parse_body(b"{\"a\":1}\n\xff\n").unwrap_err();
        assert_eq!(e.to_string(), "line 2: not valid UTF-8");
    }

    #[test]
    fn json_array() {
        let items = parse_body(b" [{\"a\":1},{\"b\":2}] ").unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].1, 7);
        let e = parse_body(b"[{\"a\":1},2]").unwrap_err();
        assert_eq!(
            e.to_string(),
            "body: element 1: expected a JSON object, got a number"
        );
        assert!(parse_body(b"[{\"a\":1},").is_err());
        assert!(parse_body(b"[{\"a\":1}] x").is_err());
        let e = parse_body(b"[{\"a\":1},{\"_abrq_op\":\"nope\"},{\"b\":1}]").unwrap_err();
        assert!(e.to_string().contains("element 1"), "{e}");
    }

    #[test]
    fn a_refusing_callback_names_the_record() {
        let mut seen = 0;
        let e = for_each_record(b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n", |_, _| {
            seen += 1;
            if seen == 2 {
                Err("too big".into())
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "line 2: too big");
    }

    #[test]
    fn records_nested_past_the_parser_limit_are_refused() {
        let deep = |d: usize| format!("{}1{}", "{\"a\":".repeat(d), "}".repeat(d));
        assert!(parse_body(deep(100).as_bytes()).is_ok());
        let e = parse_body(format!("{{}}\n{}", deep(300)).as_bytes()).unwrap_err();
        assert!(matches!(e, IngestError::Line { line: 2, .. }), "{e}");
        assert!(e.to_string().contains("recursion limit"), "{e}");
    }
}
