//! `json` messages written straight from a spooled batch's lines
//! (`Batch::lines`): a record's object is checked (JSON of any depth, its
//! top-level names read, and only its `partition_key` field built) and
//! sent as the source gave it, with `_abrq_op` added before its closing
//! brace when it is not an insert, as `message::value` writes it from a
//! decoded record. An insert's value is the spool's own bytes, not
//! copied.
//!
//! Only what needs no decoding is taken this way: a batch with a schema
//! line (a database source's keys become message keys), a transaction
//! marker, or a line of the first format is decoded instead.

use std::borrow::Cow;
use std::sync::Arc;

use abrq_core::lines::{self, Line};
use abrq_core::{DeliveryError, TableRef};

use super::destination::Encoded;
use super::topic::Topic;
use crate::object::encode::{op_field_taken, OP_FIELD};
use crate::spooled;

/// The top-level name a changed row must not have.
const ADDED: &[&str] = &[OP_FIELD];

/// The batch's messages, and how many truncates were left out; None when a
/// line asks for the batch to be decoded. A line that cannot be read
/// (worded as the spool words it, naming batch `seq`) or a changed row
/// with its own `_abrq_op` is an `encoding` failure naming its item.
pub(super) fn encoded<'a>(
    topic: &Topic,
    partition_key: Option<&str>,
    seq: u64,
    bytes: &'a [u8],
) -> Result<Option<(Vec<Encoded<'a>>, u64)>, DeliveryError> {
    let mut out = Vec::with_capacity(bytes.len() / 64);
    let mut truncates = 0;
    // the current scope's topic and table name
    let mut scope: Option<(Arc<str>, Option<Arc<str>>)> = None;
    let mut table: Option<TableRef> = None;
    for (at, line) in spooled::lines(seq, bytes) {
        let json = |e| at.json(e);
        let (op, object) = match line? {
            Line::Record { op, object } => (op, object.trim_ascii()),
            Line::Table(j) => {
                table = Some(lines::table(j).map_err(json)?);
                scope = None;
                continue;
            }
            Line::Truncate => {
                truncates += 1;
                continue;
            }
            Line::Schema(_) | Line::Marker(_) | Line::Item(_) => return Ok(None),
        };
        let (names, key) = lines::names_and_field(object, ADDED, partition_key).map_err(json)?;
        if !op.is_insert() && names.has(0) {
            return Err(at.fail(op_field_taken(op)));
        }
        if scope.is_none() {
            let name = topic
                .render(table.as_ref())
                .map_err(|e| at.fail(e.to_string()))?;
            let t = table.as_ref().map(|t| Arc::<str>::from(t.to_string()));
            scope = Some((Arc::from(name), t));
        }
        let (name, table_name) = scope.clone().expect("set above");
        let value = match spooled::op_value(op) {
            None => Cow::Borrowed(object),
            Some(v) => {
                let mut added = Vec::with_capacity(object.len() + 24);
                spooled::object_with(&mut added, object, names.len > 0, &[Some((OP_FIELD, v))])
                    .expect("a Vec takes every write");
                Cow::Owned(added)
            }
        };
        out.push(Encoded {
            index: at.index,
            op: op.as_str(),
            topic: name,
            table: table_name,
            key: key.as_ref().and_then(super::message::key_text),
            value: Some(value),
            part: "",
            extra: Vec::new(),
        });
    }
    Ok(Some((out, truncates)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Op, Record};
    use serde_json::json;

    fn topic(template: &str) -> Topic {
        Topic::parse(template).unwrap()
    }

    fn values(bytes: &[u8]) -> Vec<(usize, String, String)> {
        let (out, _) = encoded(&topic("t_{table}"), None, 3, bytes)
            .unwrap()
            .unwrap();
        out.iter()
            .map(|m| {
                let v = String::from_utf8(m.value.clone().unwrap().into_owned()).unwrap();
                (m.index, m.topic.to_string(), v)
            })
            .collect()
    }

    #[test]
    fn values_are_what_a_decoded_record_gives() {
        let text = b"N{\"schema\":\"s\",\"name\":\"a\"}\nI{\"id\":1,\"n\":{\"x\":[1,2]}}\nU{\"id\":2}\nD{}\nT\n";
        let got = values(text);
        let decoded = |op, fields: serde_json::Value| {
            let fields = serde_json::from_value(fields).unwrap();
            let r = Record { op, fields };
            String::from_utf8(super::super::message::value(&r, 0).unwrap()).unwrap()
        };
        assert_eq!(
            got,
            vec![
                (
                    1,
                    "t_a".into(),
                    decoded(Op::Insert, json!({"id":1,"n":{"x":[1,2]}}))
                ),
                (2, "t_a".into(), decoded(Op::Update, json!({"id":2}))),
                (3, "t_a".into(), decoded(Op::Delete, json!({}))),
            ]
        );
        let (out, truncates) = encoded(&topic("t"), None, 3, text).unwrap().unwrap();
        assert_eq!(truncates, 1);
        assert_eq!(out[0].table.as_deref(), Some("s.a"));
    }

    #[test]
    fn an_inserts_value_is_the_spools_bytes() {
        let text = b"I{\"id\": 1}\n";
        let (out, _) = encoded(&topic("t"), None, 3, text).unwrap().unwrap();
        assert!(matches!(out[0].value, Some(Cow::Borrowed(b"{\"id\": 1}"))));
        assert_eq!(out[0].table, None);
    }

    #[test]
    fn keys_are_the_partition_key_fields_as_a_decoded_record_gives_them() {
        let text = b"I{\"c\":\"x\\u0041\",\"n\":{\"c\":1}}\nI{\"c\":7.5}\nI{\"c\":null}\nI{}\n";
        let (out, _) = encoded(&topic("t"), Some("c"), 3, text).unwrap().unwrap();
        let keys: Vec<Option<&str>> = out.iter().map(|m| m.key.as_deref()).collect();
        assert_eq!(keys, vec![Some("xA"), Some("7.5"), None, None]);
        for (m, line) in out.iter().zip(text.split(|&b| b == b'\n')) {
            let fields = serde_json::from_slice(&line[1..]).unwrap();
            let r = Record {
                op: Op::Insert,
                fields,
            };
            assert_eq!(m.key, super::super::message::key(&r, "c"));
        }
    }

    #[test]
    fn schemas_markers_and_first_format_lines_are_decoded_instead() {
        for line in [
            "S{\"id\":{\"type\":\"int\"}}",
            "M{\"_abrq_marker\":\"commit\"}",
            "{\"Record\":{}}",
        ] {
            let text = format!("I{{\"id\":1}}\n{line}\n");
            assert!(
                encoded(&topic("t"), None, 3, text.as_bytes())
                    .unwrap()
                    .is_none(),
                "{line}"
            );
        }
    }

    #[test]
    fn bad_lines_are_refused_naming_the_item_and_seq() {
        let e = encoded(&topic("t"), None, 9, b"I{\"id\":1}\nI{\"id\":\n")
            .err()
            .unwrap();
        let said = e.to_string();
        assert!(said.contains("spool payload of seq 9"), "{said}");
        assert!(said.contains("line 2"), "{said}");
        let e = encoded(&topic("t"), None, 9, b"U{\"_abrq_op\":\"x\"}\n")
            .err()
            .unwrap();
        assert!(e
            .to_string()
            .contains("a update record has a field named _abrq_op"));
    }
}
