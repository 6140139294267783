//! JSON lines written straight from a spooled batch's lines
//! (`Batch::lines`): each record's object is checked (JSON of any depth,
//! its top-level names read) and copied as the source gave it, with its
//! table and operation added before its closing brace. Nothing is decoded
//! into maps. The lines say what `encode::write_jsonl` says from items; only
//! a source's own spacing inside an object stays.

use std::io::Write;

use abrq_core::lines::{self, Line};
use abrq_core::DeliveryError;

use super::encode::{op_field_taken, OP_FIELD, TABLE_FIELD};
use crate::failure::Failure;
use crate::spooled;

/// The top-level names a record must not have when they are added.
const ADDED: &[&str] = &[TABLE_FIELD, OP_FIELD];

/// What a batch's lines held besides the rows written.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub rows: u64,
    pub ignored_truncates: u64,
    pub ignored_schemas: u64,
}

/// Writes the batch's records and markers to `out`, one JSON line each;
/// a line that cannot be read (worded as the spool words a payload it
/// cannot decode, naming batch `seq`) or a record that already names an
/// added field is an `encoding` failure naming its item. None when a line
/// is of the first format (an item's serde form): such a batch is decoded
/// instead, and what was written is dropped.
pub(super) fn write_jsonl(
    out: &mut impl Write,
    seq: u64,
    bytes: &[u8],
) -> Result<Option<Counts>, DeliveryError> {
    let mut counts = Counts::default();
    // the current table's name, and as a JSON string ready to write
    let mut table: Option<(String, String)> = None;
    for (at, line) in spooled::lines(seq, bytes) {
        let json = |e| at.json(e);
        let written = match line? {
            Line::Record { op, object } => {
                let names = lines::names(object, ADDED).map_err(json)?;
                if let Some((name, _)) = table.as_ref().filter(|_| names.has(0)) {
                    return Err(at.refuse(format!(
                        "a record of table {name} has a field named {TABLE_FIELD}"
                    )));
                }
                if !op.is_insert() && names.has(1) {
                    return Err(at.refuse(op_field_taken(op)));
                }
                let table = table
                    .as_ref()
                    .map(|(_, quoted)| (TABLE_FIELD, quoted.as_str()));
                let op = spooled::op_value(op).map(|v| (OP_FIELD, v));
                counts.rows += 1;
                spooled::object_with(out, object.trim_ascii(), names.len > 0, &[table, op])
            }
            Line::Marker(object) => {
                lines::names(object, &[]).map_err(json)?;
                counts.rows += 1;
                out.write_all(object.trim_ascii())
            }
            Line::Table(j) => {
                let name = lines::table(j).map_err(json)?.to_string();
                let quoted = serde_json::to_string(&name).expect("a string serializes");
                table = Some((name, quoted));
                continue;
            }
            Line::Schema(j) => {
                lines::names(j, &[]).map_err(json)?;
                counts.ignored_schemas += 1;
                continue;
            }
            Line::Truncate => {
                counts.ignored_truncates += 1;
                continue;
            }
            Line::Item(_) => return Ok(None),
        };
        written
            .and_then(|()| out.write_all(b"\n"))
            .map_err(|e| Failure::Encoding { record: None }.error(e))?;
    }
    Ok(Some(counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jsonl(bytes: &[u8]) -> Result<(String, Counts), DeliveryError> {
        let mut out = Vec::new();
        let counts = write_jsonl(&mut out, 7, bytes)?.expect("no first-format line");
        Ok((String::from_utf8(out).unwrap(), counts))
    }

    #[test]
    fn records_are_copied_with_their_table_and_op() {
        let text = concat!(
            "I{\"id\": 1}\n",
            "N{\"schema\":\"s\",\"name\":\"t\\\"q\"}\n",
            "S{\"id\":{\"type\":\"int\"}}\n",
            "R{\"id\":2}\n",
            "U{ }\n",
            "T\n",
            "M{\"_abrq_marker\":\"commit\"}\n",
            "D{\"id\":3, \"n\":[{\"_abrq_op\":1}]}  \n",
        );
        let (out, counts) = jsonl(text.as_bytes()).unwrap();
        assert_eq!(
            out,
            concat!(
                "{\"id\": 1}\n",
                "{\"id\":2,\"_abrq_table\":\"s.t\\\"q\"}\n",
                "{ \"_abrq_table\":\"s.t\\\"q\",\"_abrq_op\":\"update\"}\n",
                "{\"_abrq_marker\":\"commit\"}\n",
                "{\"id\":3, \"n\":[{\"_abrq_op\":1}],\"_abrq_table\":\"s.t\\\"q\",\"_abrq_op\":\"delete\"}\n",
            )
        );
        for line in out.lines() {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        let expected = Counts {
            rows: 5,
            ignored_truncates: 1,
            ignored_schemas: 1,
        };
        assert_eq!(counts, expected);
    }

    #[test]
    fn a_record_naming_an_added_field_or_bad_json_is_refused_by_item() {
        let cases: [(&[u8], usize, &str); 4] = [
            (
                b"N{\"name\":\"t\"}\nI{\"_abrq_table\":1}\n",
                1,
                "_abrq_table",
            ),
            (
                b"I{\"_abrq_op\":1}\nU{\"_abrq_op\":1}\n",
                1,
                "update record",
            ),
            (b"I{}\n\nI{\"a\":}\n", 1, "seq 7 cannot be decoded: line 3"),
            (b"I{}\nX{}\n", 1, "unknown item tag"),
        ];
        for (text, index, says) in cases {
            let e = jsonl(text).unwrap_err();
            let said = e.describe();
            assert_eq!(e.record_index, Some(index), "{said}");
            assert!(said.contains(says), "{said}");
        }
    }
}
