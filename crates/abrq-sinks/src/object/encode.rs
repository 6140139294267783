//! Batch → object bytes. Records only: truncate and schema instructions have
//! no meaning in a file of rows, so they are counted and skipped.
//!
//! Hot path (benchmarked against a plain gzip of the same records): text is
//! serialized straight into one growing buffer sized from the batch, and
//! for gzip handed to the compressor in large chunks rather than one call
//! per JSON token.

use std::collections::HashSet;
use std::io::{self, Write};

use crate::object::ObjectFormat;
use abrq_core::{Batch, DeliveryError, Item, Op, Record, TableRef};
use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;

use crate::failure::Failure;

/// The field (JSONL) or column (CSV) that carries a non-insert operation.
pub const OP_FIELD: &str = "_abrq_op";

/// The field (JSONL, Parquet) or column (CSV) that names a record's source
/// table, in batches from database sources (`schema.name`).
pub const TABLE_FIELD: &str = "_abrq_table";

/// zlib's own default: the usual size/speed balance, and what readers of
/// `.gz` files expect.
pub const GZIP_LEVEL: u32 = 6;

/// Plain text handed to the compressor per call.
const GZ_CHUNK: usize = 256 * 1024;

/// An encoded batch and what was left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub data: Bytes,
    pub rows: u64,
    pub ignored_truncates: u64,
    pub ignored_schemas: u64,
}

/// Encodes the batch's records in `format`. Deterministic: the same batch
/// always yields the same bytes (the gzip header carries no timestamp), so
/// a replay stores an identical object.
pub fn encode(format: ObjectFormat, batch: &Batch) -> Result<Encoded, DeliveryError> {
    if let Some(bytes) = &batch.lines {
        if reads_lines(format) {
            if let Some(encoded) = encode_lines(format, batch, bytes)? {
                return Ok(encoded);
            }
        }
        return encode(format, &crate::spooled::decoded(batch, bytes)?);
    }
    if reads_lines(format) {
        // JSON lines write each record's table as they go: no copy
        check_table_fields(batch)?;
        return encode_flat(format, batch);
    }
    match with_tables(batch)? {
        Some(flat) => encode_flat(format, &flat),
        None => encode_flat(format, batch),
    }
}

/// Whether `format` is written from a spooled batch's lines as they are
/// (JSON lines), so the batch need not be decoded.
pub fn reads_lines(format: ObjectFormat) -> bool {
    matches!(format, ObjectFormat::Jsonl | ObjectFormat::JsonlGz)
}

/// The batch written from its lines; None when a line is of the first
/// format, which is decoded instead.
fn encode_lines(
    format: ObjectFormat,
    batch: &Batch,
    bytes: &[u8],
) -> Result<Option<Encoded>, DeliveryError> {
    let hint = bytes.len() + bytes.len() / 8;
    let mut out = match format {
        ObjectFormat::JsonlGz => Out::gzip(hint),
        _ => Out::plain(hint),
    };
    let Some(counts) = super::lines::write_jsonl(&mut out, batch.meta.seq, bytes)? else {
        return Ok(None);
    };
    let data = out
        .finish()
        .map_err(|e| Failure::Encoding { record: None }.error(e))?;
    debug_assert!(batch.items.is_empty(), "a batch of lines holds no items");
    Ok(Some(Encoded {
        data: Bytes::from(data),
        rows: counts.rows,
        ignored_truncates: counts.ignored_truncates,
        ignored_schemas: counts.ignored_schemas,
    }))
}

/// A record in a table's scope that has a field named [`TABLE_FIELD`]
/// would say two tables: an `encoding` error naming it.
fn check_table_fields(batch: &Batch) -> Result<(), DeliveryError> {
    let mut table: Option<&TableRef> = None;
    for (i, item) in batch.items.iter().enumerate() {
        match item {
            Item::Table(t) => table = Some(t),
            Item::Record(r) if table.is_some() && r.fields.contains_key(TABLE_FIELD) => {
                let t = table.expect("checked");
                return Err(Failure::Encoding { record: Some(i) }.error(format!(
                    "a record of table {t} has a field named {TABLE_FIELD}"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A batch whose items carry table scopes, as a batch whose records each
/// say their table in [`TABLE_FIELD`] (one object per batch still holds
/// every table's rows); `None` when the batch has no scope.
fn with_tables(batch: &Batch) -> Result<Option<Batch>, DeliveryError> {
    if !batch.items.iter().any(|i| matches!(i, Item::Table(_))) {
        return Ok(None);
    }
    // the scopes stay (encoding skips them) so item indices still name
    // the batch's own items in errors
    let mut items = batch.items.clone();
    let mut table: Option<String> = None;
    for (i, item) in items.iter_mut().enumerate() {
        match item {
            Item::Table(t) => table = Some(t.to_string()),
            Item::Record(r) => {
                let Some(t) = &table else { continue };
                if r.fields.contains_key(TABLE_FIELD) {
                    return Err(Failure::Encoding { record: Some(i) }.error(format!(
                        "a record of table {t} has a field named {TABLE_FIELD}"
                    )));
                }
                r.fields
                    .insert(TABLE_FIELD.into(), Value::String(t.clone()));
            }
            Item::Truncate | Item::Schema { .. } | Item::Marker { .. } => {}
        }
    }
    Ok(Some(Batch {
        meta: batch.meta.clone(),
        items,
        lines: None,
    }))
}

fn encode_flat(format: ObjectFormat, batch: &Batch) -> Result<Encoded, DeliveryError> {
    let mut enc = Encoded {
        data: Bytes::new(),
        rows: 0,
        ignored_truncates: 0,
        ignored_schemas: 0,
    };
    for (i, item) in batch.items.iter().enumerate() {
        match item {
            Item::Record(r) => {
                check_op_field(r, i)?;
                enc.rows += 1;
            }
            Item::Truncate => enc.ignored_truncates += 1,
            Item::Schema { .. } => enc.ignored_schemas += 1,
            // a JSON lines object writes a transaction's markers as lines;
            // CSV and Parquet hold rows only
            Item::Marker { .. }
                if matches!(format, ObjectFormat::Jsonl | ObjectFormat::JsonlGz) =>
            {
                enc.rows += 1
            }
            Item::Marker { .. } | Item::Table(_) => {}
        }
    }
    // The staged size is the records as JSON: close to the encoded size.
    let hint = usize::try_from(batch.meta.bytes)
        .unwrap_or(0)
        .max(enc.rows as usize * 64);
    let written = match format {
        ObjectFormat::Jsonl => write_jsonl(Out::plain(hint), batch),
        ObjectFormat::JsonlGz => write_jsonl(Out::gzip(hint), batch),
        ObjectFormat::Csv => write_csv(Out::plain(hint), batch),
        ObjectFormat::CsvGz => write_csv(Out::gzip(hint), batch),
        ObjectFormat::Parquet => super::parquet::write(batch).map_err(io::Error::other),
    };
    enc.data = written
        .map(Bytes::from)
        .map_err(|e| Failure::Encoding { record: None }.error(e))?;
    Ok(enc)
}

/// One JSON object per line: the record's fields, plus `_abrq_op` when the
/// record is not an insert (so consumers of append-only files can see
/// updates and deletes); a transaction marker as its own line.
fn write_jsonl(mut out: Out, batch: &Batch) -> io::Result<Vec<u8>> {
    let mut table = None;
    for item in &batch.items {
        match item {
            Item::Record(record) => {
                let table = table.as_deref();
                serde_json::to_writer(&mut out, &JsonLine { record, table })?
            }
            Item::Marker { fields } => serde_json::to_writer(&mut out, fields)?,
            Item::Table(t) => {
                table = Some(t.to_string());
                continue;
            }
            Item::Truncate | Item::Schema { .. } => continue,
        }
        out.write_all(b"\n")?;
    }
    out.finish()
}

/// A record as a JSON line: its fields, its table when the batch names
/// tables, and `_abrq_op` when it is not an insert (the order a record
/// with [`TABLE_FIELD`] inserted would serialize in).
struct JsonLine<'a> {
    record: &'a Record,
    table: Option<&'a str>,
}

impl Serialize for JsonLine<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.record;
        let op = (!r.op.is_insert()).then(|| r.op.as_str());
        let extra = usize::from(op.is_some()) + usize::from(self.table.is_some());
        let mut m = s.serialize_map(Some(r.fields.len() + extra))?;
        for (k, v) in &r.fields {
            m.serialize_entry(k, v)?;
        }
        if let Some(t) = self.table {
            m.serialize_entry(TABLE_FIELD, t)?;
        }
        if let Some(op) = op {
            m.serialize_entry(OP_FIELD, op)?;
        }
        m.end()
    }
}

/// A changed row that also has its own `_abrq_op` field would carry two
/// operations; refuse it (as an `encoding` dead letter naming item
/// `index`) rather than pick one.
pub fn check_op_field(r: &Record, index: usize) -> Result<(), DeliveryError> {
    if !r.op.is_insert() && r.fields.contains_key(OP_FIELD) {
        return Err(Failure::Encoding {
            record: Some(index),
        }
        .error(op_field_taken(r.op)));
    }
    Ok(())
}

/// Why a changed row with its own `_abrq_op` is refused.
pub fn op_field_taken(op: Op) -> String {
    format!("a {} record has a field named {OP_FIELD}", op.as_str())
}

/// A record as one flat JSON object (a JSON line, a Kafka value): its
/// fields, plus `_abrq_op` when it is not an insert. Check
/// [`check_op_field`] first.
pub struct FlatJson<'a>(pub &'a Record);

impl Serialize for FlatJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let line = JsonLine {
            record: self.0,
            table: None,
        };
        line.serialize(s)
    }
}

/// Header = every field name in first-seen order, plus `_abrq_op` only when
/// some record is not an insert. Strings are written raw, null and missing
/// fields as empty cells, everything else as compact JSON text.
fn write_csv(mut out: Out, batch: &Batch) -> io::Result<Vec<u8>> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut columns: Vec<&str> = Vec::new();
    let mut any_change = false;
    // Per record: are its keys the header's first columns, in order? Then
    // its row is its values in order, padded: no lookups, and the keys
    // (each its own allocation, so a cache miss apiece) are read only once.
    let mut in_order: Vec<bool> = Vec::with_capacity(batch.items.len());
    for r in batch.records() {
        any_change |= !r.op.is_insert();
        let mut ordered = true;
        for (j, k) in r.fields.keys().enumerate() {
            if ordered && columns.get(j).is_some_and(|c| c == k) {
                continue;
            }
            if ordered && j == columns.len() {
                // keys are unique and the earlier ones matched: k is new
                columns.push(k);
                continue;
            }
            ordered = false;
            // The set is only needed once a record strays from the header
            // order; catch it up with the columns pushed meanwhile.
            seen.extend(columns[seen.len()..].iter().copied());
            if seen.insert(k) {
                columns.push(k);
            }
        }
        in_order.push(ordered);
    }
    if columns.is_empty() && !any_change {
        // No fields at all: nothing a CSV reader could use.
        return out.finish();
    }
    // An insert may bring its own `_abrq_op` value (e.g. re-exported abrq
    // output); changed rows cannot (refused in `encode`), so the column is
    // never ambiguous. Otherwise the op column, if any, goes last.
    let op_in_data = columns.contains(&OP_FIELD);
    let data_cols = columns.len();
    if any_change && !op_in_data {
        columns.push(OP_FIELD);
    }
    let mut w = csv::WriterBuilder::new()
        .buffer_capacity(64 * 1024)
        .from_writer(&mut out);
    w.write_record(&columns)?;
    let mut scratch = Vec::with_capacity(256);
    for (r, ordered) in batch.records().zip(in_order) {
        if ordered && !op_in_data {
            for v in r.fields.values() {
                w.write_field(cell(Some(v), &mut scratch)?)?;
            }
            for _ in r.fields.len()..data_cols {
                w.write_field(b"")?;
            }
        } else {
            for col in &columns[..data_cols] {
                let v = r.fields.get(*col);
                if *col == OP_FIELD && !r.op.is_insert() {
                    w.write_field(r.op.as_str())?;
                } else if *col == OP_FIELD && v.is_none() && any_change {
                    w.write_field(Op::Insert.as_str())?;
                } else {
                    w.write_field(cell(v, &mut scratch)?)?;
                }
            }
        }
        if any_change && !op_in_data {
            w.write_field(r.op.as_str())?;
        }
        // ends the row begun by write_field
        w.write_record(None::<&[u8]>)?;
    }
    w.flush()?;
    drop(w);
    out.finish()
}

fn cell<'a>(v: Option<&'a Value>, scratch: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
    Ok(match v {
        None | Some(Value::Null) => b"",
        Some(Value::String(s)) => s.as_bytes(),
        Some(other) => {
            scratch.clear();
            serde_json::to_writer(&mut *scratch, other)?;
            scratch
        }
    })
}

/// The destination buffer: plain text grows in place; for gzip it is a
/// staging buffer drained into the compressor every `GZ_CHUNK` bytes.
struct Out {
    buf: Vec<u8>,
    gz: Option<GzEncoder<Vec<u8>>>,
}

impl Out {
    fn plain(hint: usize) -> Self {
        Out {
            buf: Vec::with_capacity(hint + hint / 8),
            gz: None,
        }
    }

    fn gzip(hint: usize) -> Self {
        Out {
            buf: Vec::with_capacity(GZ_CHUNK + 64 * 1024),
            // JSON and CSV of real records typically compress 4-10x.
            gz: Some(GzEncoder::new(
                Vec::with_capacity(hint / 4 + 64),
                Compression::new(GZIP_LEVEL),
            )),
        }
    }

    fn finish(self) -> io::Result<Vec<u8>> {
        match self.gz {
            Some(mut gz) => {
                gz.write_all(&self.buf)?;
                gz.finish()
            }
            None => Ok(self.buf),
        }
    }
}

impl Write for Out {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.write_all(b)?;
        Ok(b.len())
    }

    fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(b);
        if let Some(gz) = self.gz.as_mut() {
            if self.buf.len() >= GZ_CHUNK {
                gz.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::conformance::{assert_holds, batch_of, gunzip, sample_batch, FORMATS};
    use abrq_core::{Disposition, ReasonClass};
    use serde_json::json;

    #[test]
    fn every_format_reads_back_and_counts_instructions() {
        let batch = sample_batch(1);
        for format in FORMATS {
            let enc = encode(format, &batch).unwrap();
            assert_eq!(
                (enc.rows, enc.ignored_truncates, enc.ignored_schemas),
                (4, 2, 2)
            );
            assert_holds(format, &enc.data, &batch);
        }
    }

    #[test]
    fn jsonl_marks_only_non_inserts() {
        let text = String::from_utf8(
            encode(ObjectFormat::Jsonl, &sample_batch(1))
                .unwrap()
                .data
                .to_vec(),
        )
        .unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(!lines[0].contains(OP_FIELD) && !lines[3].contains(OP_FIELD));
        assert!(
            lines[1].ends_with(r#","_abrq_op":"update"}"#),
            "{}",
            lines[1]
        );
        assert_eq!(lines[2], r#"{"id":3,"_abrq_op":"delete"}"#);
    }

    #[test]
    fn csv_header_is_first_seen_union_and_cells_are_as_documented() {
        let text = String::from_utf8(
            encode(ObjectFormat::Csv, &sample_batch(1))
                .unwrap()
                .data
                .to_vec(),
        )
        .unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "id,name,price,ok,tags,meta,note,extra,big,neg,_abrq_op"
        );
        assert_eq!(
            lines.next().unwrap(),
            r#"1,plain,9.5,true,"[""a"",""b""]","{""k"":{""n"":1}}",,,,,insert"#
        );
        // all inserts: no op column
        let b = batch_of(
            1,
            vec![Item::Record(Record::insert(
                json!({"a": "x"}).as_object().unwrap().clone(),
            ))],
        );
        let enc = encode(ObjectFormat::Csv, &b).unwrap();
        assert_eq!(enc.data, &b"a\nx\n"[..]);
    }

    #[test]
    fn csv_op_column_taken_from_re_exported_data_stays_single() {
        let rec = |op, v: serde_json::Value| {
            Item::Record(Record {
                op,
                fields: v.as_object().unwrap().clone(),
            })
        };
        let b = batch_of(
            1,
            vec![
                rec(Op::Insert, json!({"_abrq_op": "delete", "a": 1})),
                rec(Op::Delete, json!({"a": 2})),
                rec(Op::Insert, json!({"a": 3})),
            ],
        );
        let enc = encode(ObjectFormat::Csv, &b).unwrap();
        assert_eq!(
            String::from_utf8(enc.data.to_vec()).unwrap(),
            "_abrq_op,a\ndelete,1\ndelete,2\ninsert,3\n"
        );
    }

    #[test]
    fn gzip_is_deterministic_level_6() {
        let batch = sample_batch(1);
        let a = encode(ObjectFormat::JsonlGz, &batch).unwrap().data;
        assert_eq!(a, encode(ObjectFormat::JsonlGz, &batch).unwrap().data);
        // a large batch crosses the chunk size and still decompresses whole
        let items = (0..20_000)
            .map(|i| {
                Item::Record(Record::insert(
                    json!({"i": i, "s": "x".repeat(20)})
                        .as_object()
                        .unwrap()
                        .clone(),
                ))
            })
            .collect();
        let big = batch_of(2, items);
        let plain = encode(ObjectFormat::Jsonl, &big).unwrap().data;
        assert!(plain.len() > 2 * GZ_CHUNK);
        assert_eq!(
            gunzip(&encode(ObjectFormat::JsonlGz, &big).unwrap().data),
            plain
        );
        let csv = encode(ObjectFormat::Csv, &big).unwrap().data;
        assert_eq!(
            gunzip(&encode(ObjectFormat::CsvGz, &big).unwrap().data),
            csv
        );
    }

    #[test]
    fn instructions_only_make_an_empty_object() {
        let b = batch_of(
            1,
            vec![
                Item::Truncate,
                Item::Truncate,
                Item::Schema {
                    columns: Default::default(),
                },
            ],
        );
        for format in FORMATS {
            let enc = encode(format, &b).unwrap();
            assert_eq!(
                (enc.rows, enc.ignored_truncates, enc.ignored_schemas),
                (0, 2, 1)
            );
            assert_holds(format, &enc.data, &b);
        }
    }

    #[test]
    fn a_changed_row_with_its_own_op_field_is_refused_by_index() {
        let mut fields = json!({"_abrq_op": "insert"}).as_object().unwrap().clone();
        let ok = Item::Record(Record::insert(fields.clone()));
        fields.insert("id".into(), json!(1));
        let bad = Item::Record(Record {
            op: Op::Delete,
            fields,
        });
        let e = encode(
            ObjectFormat::Jsonl,
            &batch_of(1, vec![Item::Truncate, ok, bad]),
        )
        .unwrap_err();
        assert_eq!(
            e.disposition,
            Disposition::DeadLetter(ReasonClass::Encoding)
        );
        assert_eq!(e.record_index, Some(2));
    }

    #[test]
    fn each_record_says_its_table_when_the_batch_has_tables() {
        let rec = |op, v: Value| {
            Item::Record(Record {
                op,
                fields: v.as_object().unwrap().clone(),
            })
        };
        let b = batch_of(
            1,
            vec![
                Item::Table(abrq_core::TableRef::new(Some("public"), "a")),
                rec(Op::Insert, json!({"id": 1})),
                Item::Table(abrq_core::TableRef::new(Some("public"), "b")),
                Item::Truncate,
                rec(Op::Delete, json!({"id": 2})),
            ],
        );
        let enc = encode(ObjectFormat::Jsonl, &b).unwrap();
        assert_eq!(
            String::from_utf8(enc.data.to_vec()).unwrap(),
            "{\"id\":1,\"_abrq_table\":\"public.a\"}\n\
             {\"id\":2,\"_abrq_table\":\"public.b\",\"_abrq_op\":\"delete\"}\n"
        );
        assert_eq!((enc.rows, enc.ignored_truncates), (2, 1));
        let csv = encode(ObjectFormat::Csv, &b).unwrap().data.to_vec();
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "id,_abrq_table,_abrq_op\n1,public.a,insert\n2,public.b,delete\n"
        );
        let clash = batch_of(
            1,
            vec![
                Item::Table(abrq_core::TableRef::new(None, "a")),
                rec(Op::Insert, json!({"_abrq_table": 1})),
            ],
        );
        let e = encode(ObjectFormat::Jsonl, &clash).unwrap_err();
        assert_eq!(e.record_index, Some(1));
    }
}
