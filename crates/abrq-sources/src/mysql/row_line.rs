//! A queried row written straight as its record line, with no JSON map
//! built: the snapshot copy's hot path. Each value is written as
//! `values::value` gives it (the unit test holds the two equal); the
//! common ones (null, integers, text, binary, dates) are written here,
//! any other through `values::value`.

use mysql_async::Value as V;

use super::catalog::Column;
use super::values;
use crate::error::SourceError;

/// The record line of an inserted row starts with this tag.
const TAG: u8 = b'I';

/// How a column's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Signed,
    /// Read back from its two's complement when negative.
    Unsigned,
    /// `tinyint(1)`.
    Bool,
    /// `\x` and hex.
    Binary,
    /// A `date` (no time of day).
    Date,
    /// Parsed, as `values::value` does.
    Json,
    /// As `values::value` writes it (text, times, floats).
    Other,
}

/// A table's columns, ready to write its rows.
pub struct RowLine {
    columns: Vec<Column>,
    /// Each column's `"name":`.
    names: Vec<Vec<u8>>,
    forms: Vec<Form>,
}

impl RowLine {
    pub fn new(columns: &[Column]) -> RowLine {
        let names = columns
            .iter()
            .map(|c| {
                let mut name = Vec::new();
                serde_json::to_writer(&mut name, &c.name).expect("a string serializes");
                name.push(b':');
                name
            })
            .collect();
        let forms = columns.iter().map(form_of).collect();
        RowLine {
            columns: columns.to_vec(),
            names,
            forms,
        }
    }

    /// `vals` (one row, in the columns' order) as a record line at the
    /// end of `out`; nothing is left of it there on an error.
    pub fn write(&self, vals: &[V], out: &mut Vec<u8>) -> Result<(), SourceError> {
        let start = out.len();
        out.extend_from_slice(&[TAG, b'{']);
        for (i, v) in vals.iter().enumerate().take(self.columns.len()) {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.names[i]);
            if let Err(e) = self.value(i, v, out) {
                out.truncate(start);
                return Err(e);
            }
        }
        out.extend_from_slice(b"}\n");
        Ok(())
    }

    fn value(&self, i: usize, v: &V, out: &mut Vec<u8>) -> Result<(), SourceError> {
        let col = &self.columns[i];
        let mut int = itoa::Buffer::new();
        match (self.forms[i], v) {
            (_, V::NULL) => out.extend_from_slice(b"null"),
            (Form::Json, _) => json(col, v, out)?,
            (Form::Bool, V::Int(n)) => out.extend_from_slice(match n {
                0 => b"false",
                _ => b"true",
            }),
            (Form::Unsigned, V::Int(n)) if *n < 0 => {
                out.extend_from_slice(int.format(values::unsigned_of(col, *n)).as_bytes())
            }
            (Form::Signed | Form::Unsigned, V::Int(n)) => {
                out.extend_from_slice(int.format(*n).as_bytes())
            }
            (_, V::UInt(n)) => out.extend_from_slice(int.format(*n).as_bytes()),
            (Form::Binary, V::Bytes(b)) => {
                out.extend_from_slice(b"\"\\\\x");
                let at = out.len();
                out.resize(at + 2 * b.len(), 0);
                hex::encode_to_slice(b, &mut out[at..]).expect("twice the length");
                out.push(b'"');
            }
            (_, V::Bytes(b)) => {
                let text = values::text(col, b, None)?;
                serde_json::to_writer(&mut *out, &*text).expect("a vec takes it");
            }
            (Form::Date, V::Date(y, mo, d, ..)) => {
                out.push(b'"');
                date(out, *y, *mo, *d);
                out.push(b'"');
            }
            // a date and time: `T` between, microseconds when not zero
            (_, V::Date(y, mo, d, h, mi, s, us)) => {
                out.push(b'"');
                date(out, *y, *mo, *d);
                out.push(b'T');
                padded(out, u32::from(*h), 2);
                out.push(b':');
                padded(out, u32::from(*mi), 2);
                out.push(b':');
                padded(out, u32::from(*s), 2);
                if *us != 0 {
                    out.push(b'.');
                    padded(out, *us, 6);
                }
                out.push(b'"');
            }
            _ => json(col, v, out)?,
        }
        Ok(())
    }
}

/// `YYYY-MM-DD`.
fn date(out: &mut Vec<u8>, y: u16, mo: u8, d: u8) {
    padded(out, u32::from(y), 4);
    out.push(b'-');
    padded(out, u32::from(mo), 2);
    out.push(b'-');
    padded(out, u32::from(d), 2);
}

/// `n` in at least `width` digits, zeros in front (as `{n:0width$}`).
fn padded(out: &mut Vec<u8>, n: u32, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
    out.extend(std::iter::repeat_n(
        b'0',
        width.saturating_sub(digits.len()),
    ));
    out.extend_from_slice(digits);
}

/// `v` as `values::value` gives it.
fn json(col: &Column, v: &V, out: &mut Vec<u8>) -> Result<(), SourceError> {
    serde_json::to_writer(&mut *out, &values::value(col, v)?).expect("a vec takes it");
    Ok(())
}

fn form_of(col: &Column) -> Form {
    if values::is_binary(col) {
        return Form::Binary;
    }
    let unsigned = col.column_type.contains("unsigned");
    match col.data_type.as_str() {
        "date" => Form::Date,
        "json" => Form::Json,
        // `values::value` reads it as a number when negative, else a bool
        "tinyint" if unsigned && col.column_type.starts_with("tinyint(1)") => Form::Other,
        "tinyint" if col.column_type.starts_with("tinyint(1)") => Form::Bool,
        _ if unsigned => Form::Unsigned,
        "tinyint" | "smallint" | "mediumint" | "int" | "bigint" | "year" => Form::Signed,
        _ => Form::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, column_type: &str, charset: Option<&str>) -> Column {
        Column {
            name: name.into(),
            column_type: column_type.into(),
            data_type: column_type
                .split(['(', ' '])
                .next()
                .unwrap_or_default()
                .into(),
            key: false,
            charset: charset.map(Into::into),
        }
    }

    /// The line as the map the paged copy built would encode it.
    fn by_map(columns: &[Column], vals: &[V]) -> String {
        let fields = values::row(columns, vals).unwrap();
        let mut out = Vec::new();
        abrq_state::payload::encode_record(&mut out, abrq_core::Op::Insert, &fields).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_value_as_the_map_would_encode_it() {
        let utf8 = Some("utf8mb4");
        let columns = [
            col("id", "bigint(20)", None),
            col("u8", "tinyint(3) unsigned", None),
            col("u64", "bigint(20) unsigned", None),
            col("flag", "tinyint(1)", None),
            col("uflag", "tinyint(1) unsigned", None),
            col("price", "decimal(10,2)", None),
            col("name \"q\"", "varchar(32)", utf8),
            col("raw", "varbinary(8)", None),
            col("day", "date", None),
            col("at", "datetime(6)", None),
            col("at0", "datetime", None),
            col("span", "time(6)", None),
            col("f", "double", None),
            col("doc", "json", utf8),
            col("bits", "bit(12)", None),
        ];
        let rows = [
            vec![
                V::Int(-5),
                V::Int(-1),
                V::UInt(u64::MAX),
                V::Int(1),
                V::Int(-1),
                V::Bytes(b"-12.50".to_vec()),
                V::Bytes("é \"x\"\n\u{1}\\".as_bytes().to_vec()),
                V::Bytes(vec![0, 0xff, 0x10]),
                V::Date(2026, 12, 6, 0, 0, 0, 0),
                V::Date(2026, 12, 6, 3, 4, 5, 600),
                V::Date(1, 1, 1, 23, 59, 59, 0),
                V::Time(true, 1, 2, 3, 4, 5),
                V::Double(0.1),
                V::Bytes(br#"{"a": [1, 2.50]}"#.to_vec()),
                V::Bytes(vec![0x0f, 0xff]),
            ],
            vec![
                V::Int(i64::MIN),
                V::Int(200),
                V::Int(-1),
                V::Int(0),
                V::Int(1),
                V::NULL,
                V::Bytes(Vec::new()),
                V::Bytes(Vec::new()),
                V::NULL,
                V::NULL,
                V::NULL,
                V::Time(false, 0, 0, 0, 0, 0),
                V::Double(f64::NAN),
                V::Bytes(b"not json".to_vec()),
                V::NULL,
            ],
            vec![V::NULL; 15],
        ];
        let line = RowLine::new(&columns);
        for vals in rows {
            let mut out = b"before".to_vec();
            line.write(&vals, &mut out).unwrap();
            assert_eq!(
                String::from_utf8(out[6..].to_vec()).unwrap(),
                by_map(&columns, &vals)
            );
        }
        // fewer values than columns, and no columns, as the map does
        let short = [V::Int(1)];
        let mut out = Vec::new();
        line.write(&short, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), by_map(&columns, &short));
        let mut out = Vec::new();
        RowLine::new(&[]).write(&[], &mut out).unwrap();
        assert_eq!(out, b"I{}\n");
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_and_leaves_nothing() {
        let line = RowLine::new(&[col("id", "int(11)", None), col("t", "text", None)]);
        let mut out = b"kept".to_vec();
        let e = line
            .write(&[V::Int(1), V::Bytes(vec![0xff, 0xfe])], &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("column t"), "{e}");
        assert_eq!(out, b"kept");
    }
}
