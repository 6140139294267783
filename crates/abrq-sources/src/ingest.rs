//! Parsing an HTTP ingest body: NDJSON or one JSON array of objects. Any bad
//! line rejects the whole body, naming the line, so nothing half-arrives.

use abrq_core::{Item, Op, Record};
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

/// Parses a body into items and their encoded byte sizes. A body that
/// starts with `[` is one JSON array; anything else is NDJSON (blank lines
/// allowed).
pub fn parse_body(body: &[u8]) -> Result<Vec<(Item, u64)>, IngestError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        let line = body[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        IngestError::Line {
            line,
            message: "not valid UTF-8".into(),
        }
    })?;
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return parse_array(text);
    }
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let item = parse_object(line).map_err(|message| IngestError::Line {
            line: i + 1,
            message,
        })?;
        out.push((item, line.len() as u64));
    }
    Ok(out)
}

fn parse_object(text: &str) -> Result<Item, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => record_from_object(m).map(Item::Record),
        Ok(other) => Err(format!("expected a JSON object, got {}", kind(&other))),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

fn parse_array(text: &str) -> Result<Vec<(Item, u64)>, IngestError> {
    let values: Vec<Value> = serde_json::from_str(text).map_err(|e| IngestError::Line {
        line: e.line(),
        message: format!("invalid JSON: {e}"),
    })?;
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Object(m) => {
                let size = serde_json::to_vec(&m).map(|b| b.len()).unwrap_or(0) as u64;
                record_from_object(m)
                    .map(|r| (Item::Record(r), size))
                    .map_err(|message| IngestError::Body(format!("element {i}: {message}")))
            }
            other => Err(IngestError::Body(format!(
                "element {i}: expected a JSON object, got {}",
                kind(&other)
            ))),
        })
        .collect()
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
    }

    #[test]
    fn json_array() {
        let items = parse_body(b" [{\"a\":1},{\"b\":2}]").unwrap();
        assert_eq!(items.len(), 2);
        assert!(parse_body(b"[{\"a\":1},2]").is_err());
        assert!(parse_body(b"[{\"a\":1},").is_err());
    }
}
