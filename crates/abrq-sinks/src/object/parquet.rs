//! Batch → Parquet: one row group, one nullable column per field name in
//! first-seen order (as the CSV header), each typed from its values:
//!
//! | values in the column                     | column                |
//! |------------------------------------------|-----------------------|
//! | booleans                                 | boolean               |
//! | integers that fit i64                    | int64                 |
//! | floats, or floats and integers ≤ 2^53    | float64               |
//! | `YYYY-MM-DD` strings                     | date32                |
//! | those and timestamp strings (RFC 3339,   | timestamp(µs, UTC)    |
//! | `YYYY-MM-DD[T ]HH:MM:SS[.f]` as UTC)     |                       |
//! | anything else: strings, objects, arrays, | utf8                  |
//! | u64 past i64, or a mix of kinds          |                       |
//! | nothing but null                         | utf8                  |
//!
//! Dates and timestamps are recognised as the relational destinations
//! recognise them. In a utf8 column strings are stored raw and every other
//! value as compact JSON text, exactly as a CSV cell. `_abrq_op` is added
//! on the same rule as for CSV: only when some record is not an insert.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use abrq_core::{Batch, Op, Record};
use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Date32Builder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use serde_json::Value;

use super::encode::OP_FIELD;
use crate::relational::types::{parse_date, parse_timestamp};

/// Integers up to this magnitude convert to f64 exactly, so a column of
/// such integers and floats can be float64 without losing a digit.
const F64_EXACT: u64 = 1 << 53;

/// Encodes `batch`'s records. Deterministic: no timestamps are written, so
/// a replay stores identical bytes.
pub fn write(batch: &Batch) -> Result<Vec<u8>, ParquetError> {
    let records: Vec<&Record> = batch.records().collect();
    let any_change = records.iter().any(|r| !r.op.is_insert());
    let (names, kinds) = infer(&records, any_change);
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let op_col = index.get(OP_FIELD).copied();

    let mut cols: Vec<Column> = kinds
        .iter()
        .map(|k| Column::new(k.data_type(), records.len()))
        .collect();
    for (row, r) in records.iter().enumerate() {
        for (k, v) in &r.fields {
            cols[index[k.as_str()]].push(row, v);
        }
        if let Some(c) = op_col {
            // a changed row never has its own _abrq_op (refused in encode)
            if !r.op.is_insert() {
                cols[c].push_str(row, r.op.as_str());
            } else if !r.fields.contains_key(OP_FIELD) && any_change {
                cols[c].push_str(row, Op::Insert.as_str());
            }
        }
    }
    let fields: Vec<Field> = names
        .iter()
        .zip(&kinds)
        .map(|(n, k)| Field::new(*n, k.data_type(), true))
        .collect();
    let arrays: Vec<ArrayRef> = cols.into_iter().map(|c| c.finish(records.len())).collect();
    let schema = Arc::new(Schema::new(fields));
    let rb = if arrays.is_empty() {
        // A batch of records without fields (or no records at all).
        RecordBatch::try_new_with_options(
            schema.clone(),
            arrays,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(records.len())),
        )?
    } else {
        RecordBatch::try_new(schema.clone(), arrays)?
    };
    let props = WriterProperties::builder()
        // snappy: what most readers default to, and cheap next to gzip
        .set_compression(Compression::SNAPPY)
        .build();
    let mut out = Vec::with_capacity(usize::try_from(batch.meta.bytes).unwrap_or(0) / 2 + 1024);
    let mut w = ArrowWriter::try_new(&mut out, schema, Some(props))?;
    w.write(&rb)?;
    w.close()?;
    Ok(out)
}

/// Column names in first-seen order and the type each one's values allow.
fn infer<'a>(records: &[&'a Record], any_change: bool) -> (Vec<&'a str>, Vec<Kind>) {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    let mut kinds: Vec<Kind> = Vec::new();
    for r in records {
        for (k, v) in &r.fields {
            let i = *index.entry(k.as_str()).or_insert_with(|| {
                names.push(k.as_str());
                kinds.push(Kind::default());
                names.len() - 1
            });
            kinds[i].see(v);
        }
    }
    if any_change {
        let i = match index.get(OP_FIELD) {
            Some(i) => *i,
            None => {
                names.push(OP_FIELD);
                kinds.push(Kind::default());
                names.len() - 1
            }
        };
        kinds[i].text = true;
    }
    (names, kinds)
}

/// The zone timestamps are written in: instants, as the relational
/// destinations store them.
const UTC: &str = "UTC";

fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
}

/// What kinds of value a column has seen.
#[derive(Debug, Default, Clone, Copy)]
struct Kind {
    bool: bool,
    int: bool,
    float: bool,
    /// `YYYY-MM-DD` strings
    date: bool,
    /// timestamp strings
    ts: bool,
    /// other strings, objects, arrays, or integers too big for i64
    text: bool,
    /// an integer that f64 cannot hold exactly
    big_int: bool,
}

impl Kind {
    fn see(&mut self, v: &Value) {
        match v {
            Value::Null => {}
            Value::Bool(_) => self.bool = true,
            Value::Number(n) => match n.as_i64() {
                Some(i) => {
                    self.int = true;
                    self.big_int |= i.unsigned_abs() > F64_EXACT;
                }
                None if n.is_u64() => self.text = true,
                None => self.float = true,
            },
            // a column of other strings is text whatever these are: no
            // need to parse them once it is
            Value::String(_) if self.text => {}
            Value::String(s) if parse_date(s).is_some() => self.date = true,
            Value::String(s) if parse_timestamp(s).is_some() => self.ts = true,
            Value::String(_) | Value::Array(_) | Value::Object(_) => self.text = true,
        }
    }

    fn data_type(self) -> DataType {
        let numeric = self.int || self.float;
        let time = self.date || self.ts;
        match (self.text, self.bool, numeric, time) {
            (false, true, false, false) => DataType::Boolean,
            (false, false, true, false) if !self.float => DataType::Int64,
            (false, false, true, false) if !self.big_int => DataType::Float64,
            (false, false, false, true) if !self.ts => DataType::Date32,
            (false, false, false, true) => timestamp_type(),
            _ => DataType::Utf8,
        }
    }
}

/// One column's builder; `push` pads with nulls for rows that lacked the
/// field, so rows are visited once, in order, field by field.
enum Column {
    Bool(BooleanBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Date(Date32Builder),
    Ts(TimestampMicrosecondBuilder),
    Text(StringBuilder),
}

/// Days since 1970-01-01, as date32 counts them.
fn days(d: NaiveDate) -> Option<i32> {
    i32::try_from((d - DateTime::UNIX_EPOCH.date_naive()).num_days()).ok()
}

/// Microseconds since the epoch of a timestamp or of a day's first instant.
fn micros(s: &str) -> Option<i64> {
    let t: DateTime<Utc> =
        parse_timestamp(s).or_else(|| Some(parse_date(s)?.and_time(NaiveTime::MIN).and_utc()))?;
    Some(t.timestamp_micros())
}

impl Column {
    fn new(t: DataType, rows: usize) -> Self {
        match t {
            DataType::Boolean => Column::Bool(BooleanBuilder::with_capacity(rows)),
            DataType::Int64 => Column::Int(Int64Builder::with_capacity(rows)),
            DataType::Float64 => Column::Float(Float64Builder::with_capacity(rows)),
            DataType::Date32 => Column::Date(Date32Builder::with_capacity(rows)),
            DataType::Timestamp(..) => {
                Column::Ts(TimestampMicrosecondBuilder::with_capacity(rows).with_timezone(UTC))
            }
            _ => Column::Text(StringBuilder::with_capacity(rows, rows * 16)),
        }
    }

    fn len(&self) -> usize {
        match self {
            Column::Bool(b) => b.len(),
            Column::Int(b) => b.len(),
            Column::Float(b) => b.len(),
            Column::Date(b) => b.len(),
            Column::Ts(b) => b.len(),
            Column::Text(b) => b.len(),
        }
    }

    fn pad_to(&mut self, row: usize) {
        for _ in self.len()..row {
            match self {
                Column::Bool(b) => b.append_null(),
                Column::Int(b) => b.append_null(),
                Column::Float(b) => b.append_null(),
                Column::Date(b) => b.append_null(),
                Column::Ts(b) => b.append_null(),
                Column::Text(b) => b.append_null(),
            }
        }
    }

    fn push_str(&mut self, row: usize, s: &str) {
        self.pad_to(row);
        if let Column::Text(b) = self {
            b.append_value(s);
        }
    }

    /// Appends `v` as row `row`. The column's type was inferred from every
    /// value, so each value fits it.
    fn push(&mut self, row: usize, v: &Value) {
        self.pad_to(row);
        match (self, v) {
            (Column::Bool(b), Value::Bool(x)) => b.append_value(*x),
            (Column::Int(b), Value::Number(n)) => b.append_option(n.as_i64()),
            (Column::Float(b), Value::Number(n)) => b.append_option(n.as_f64()),
            (Column::Date(b), Value::String(s)) => b.append_option(parse_date(s).and_then(days)),
            (Column::Ts(b), Value::String(s)) => b.append_option(micros(s)),
            (Column::Text(b), Value::String(s)) => b.append_value(s),
            (Column::Text(b), other) if !other.is_null() => {
                // JSON text straight into the builder's buffer, then end
                // the value; formatting a Value cannot fail
                let _ = write!(b, "{other}");
                b.append_value("");
            }
            (c, _) => c.pad_to(row + 1),
        }
    }

    fn finish(mut self, rows: usize) -> ArrayRef {
        self.pad_to(rows);
        match self {
            Column::Bool(mut b) => Arc::new(b.finish()),
            Column::Int(mut b) => Arc::new(b.finish()),
            Column::Float(mut b) => Arc::new(b.finish()),
            Column::Date(mut b) => Arc::new(b.finish()),
            Column::Ts(mut b) => Arc::new(b.finish()),
            Column::Text(mut b) => Arc::new(b.finish()),
        }
    }
}

/// Reads a Parquet object back: column names with types, and each row's
/// values as JSON (null, bool, number or string), for tests.
#[cfg(test)]
pub(crate) fn read(data: &[u8]) -> (Vec<(String, DataType)>, Vec<Vec<Value>>) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, Float64Type, Int64Type, TimestampMicrosecondType};
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::copy_from_slice(data))
        .unwrap()
        .build()
        .unwrap();
    let mut header = Vec::new();
    let mut rows = Vec::new();
    for rb in reader {
        let rb = rb.unwrap();
        header = rb
            .schema()
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().clone()))
            .collect();
        for i in 0..rb.num_rows() {
            let row = rb
                .columns()
                .iter()
                .map(|c| match c.data_type() {
                    _ if c.is_null(i) => Value::Null,
                    DataType::Boolean => Value::Bool(c.as_boolean().value(i)),
                    DataType::Int64 => c.as_primitive::<Int64Type>().value(i).into(),
                    DataType::Float64 => c.as_primitive::<Float64Type>().value(i).into(),
                    // days and microseconds since the epoch
                    DataType::Date32 => c.as_primitive::<Date32Type>().value(i).into(),
                    DataType::Timestamp(..) => {
                        c.as_primitive::<TimestampMicrosecondType>().value(i).into()
                    }
                    DataType::Utf8 => c.as_string::<i32>().value(i).into(),
                    t => panic!("unexpected column type {t}"),
                })
                .collect();
            rows.push(row);
        }
    }
    (header, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::conformance::{batch_of, sample_batch};
    use abrq_core::Item;
    use serde_json::json;

    fn types(data: &[u8]) -> Vec<(String, DataType)> {
        read(data).0
    }

    fn rec(v: Value) -> Item {
        Item::Record(Record::insert(v.as_object().unwrap().clone()))
    }

    #[test]
    fn columns_are_typed_from_their_values() {
        let data = write(&sample_batch(1)).unwrap();
        let t: Vec<(String, DataType)> = types(&data);
        let want = [
            ("id", DataType::Int64),
            ("name", DataType::Utf8),
            ("price", DataType::Float64),
            ("ok", DataType::Boolean),
            ("tags", DataType::Utf8),
            ("meta", DataType::Utf8),
            ("note", DataType::Utf8),
            ("extra", DataType::Utf8),
            ("big", DataType::Utf8),
            ("neg", DataType::Int64),
            (OP_FIELD, DataType::Utf8),
        ];
        let want: Vec<(String, DataType)> = want
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        assert_eq!(t, want);
        let rows = read(&data).1;
        assert_eq!(rows[0][4], json!(r#"["a","b"]"#));
        assert_eq!(rows[0][10], json!("insert"));
        assert_eq!(rows[2][10], json!("delete"));
        assert_eq!(rows[3][8], json!(u64::MAX.to_string()));
    }

    #[test]
    fn mixed_kinds_widen_or_fall_back_to_text() {
        let b = batch_of(
            1,
            vec![
                rec(json!({"f": 1, "c": true, "x": 1, "n": null})),
                rec(json!({"f": 2.5, "c": "yes", "x": 1.5})),
                rec(json!({"x": 9007199254740993_i64})),
            ],
        );
        let data = write(&b).unwrap();
        let (t, rows) = read(&data);
        assert_eq!(t[0], ("f".into(), DataType::Float64));
        assert_eq!(t[1], ("c".into(), DataType::Utf8));
        // 2^53 + 1 has no exact f64: text keeps every digit
        assert_eq!(t[2], ("x".into(), DataType::Utf8));
        assert_eq!(t[3], ("n".into(), DataType::Utf8));
        assert_eq!(t.len(), 4, "all inserts: no op column");
        assert_eq!(
            rows[0],
            [json!(1.0), json!("true"), json!("1"), Value::Null]
        );
        assert_eq!(
            rows[2],
            [
                Value::Null,
                Value::Null,
                json!("9007199254740993"),
                Value::Null
            ]
        );
    }

    #[test]
    fn dates_and_timestamps_are_typed() {
        let b = batch_of(
            1,
            vec![
                rec(
                    json!({"day": "1970-01-02", "at": "1970-01-01T00:00:01Z", "mix": "1970-01-02", "no": "1970-01-02"}),
                ),
                rec(
                    json!({"day": null, "at": "1970-01-01 00:00:02.5", "mix": "1970-01-01T01:00:00+01:00", "no": "soon"}),
                ),
                rec(json!({"at": "1970-01-01T00:00:03", "day": "2024-02-29"})),
            ],
        );
        let (t, rows) = read(&write(&b).unwrap());
        assert_eq!(t[0], ("day".into(), DataType::Date32));
        assert_eq!(t[1], ("at".into(), timestamp_type()));
        assert_eq!(t[2], ("mix".into(), timestamp_type()));
        assert_eq!(t[3], ("no".into(), DataType::Utf8));
        assert_eq!(
            rows[0],
            [
                json!(1),
                json!(1_000_000),
                json!(86_400_000_000i64),
                json!("1970-01-02")
            ]
        );
        // a zone-less time is UTC; an offset is honoured
        assert_eq!(
            rows[1],
            [Value::Null, json!(2_500_000), json!(0), json!("soon")]
        );
        assert_eq!(rows[2][..2], [json!(19_782), json!(3_000_000)]);
    }

    #[test]
    fn deterministic_and_empty_batches_write() {
        let b = sample_batch(3);
        assert_eq!(write(&b).unwrap(), write(&b).unwrap());
        let empty = batch_of(1, vec![Item::Truncate]);
        let (t, rows) = read(&write(&empty).unwrap());
        assert!(t.is_empty() && rows.is_empty());
        let no_fields = batch_of(1, vec![rec(json!({})), rec(json!({}))]);
        assert!(!write(&no_fields).unwrap().is_empty());
    }
}
