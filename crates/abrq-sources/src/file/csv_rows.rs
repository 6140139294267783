//! CSV with a header line. Values are typed the way a reader expects:
//! integers, decimals (also with an exponent) and booleans, padded or
//! not, become JSON numbers and booleans; an unquoted cell equal to a null
//! marker (by default an empty cell, `NA`, `NULL`, `\N`, ...) is null,
//! while a quoted one is its text, as PostgreSQL's CSV format has it;
//! anything else (including "007") stays text. Header names are trimmed;
//! an empty one is named `column_N` after its position, and a repeated
//! one is refused.
//!
//! Records are split by `csv_core` directly rather than the `csv` reader,
//! because only the core parser tells a record ended by its terminator from
//! one the end of the input cut off: a quoted field may hold newlines, so
//! the last newline is no record boundary.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use abrq_core::{Item, Record};
use csv_core::ReadRecordResult;
use serde_json::{Map, Number, Value};

use super::FileSource;
use crate::chunk::{Chunk, Limits};
use crate::error::SourceError;

impl FileSource {
    pub(super) fn read_csv(
        &mut self,
        file: &mut File,
        end: u64,
        limits: Limits,
    ) -> Result<Chunk, SourceError> {
        let mut chunk = Chunk::default();
        if self.header.is_none() {
            // The header is read from the top even when resuming mid-file.
            file.seek(SeekFrom::Start(0)).map_err(|e| self.io(e))?;
            let mut rows = Rows::new(BufReader::new((&*file).take(end)), self.follow, true);
            let Some(n) = rows.next().map_err(|e| self.io(e))? else {
                chunk.at_end = true;
                return Ok(chunk);
            };
            let names = header_names(&rows).map_err(|m| self.bad(1, m))?;
            if self.cursor.offset == 0 {
                self.cursor.offset = n;
            }
            self.header = Some(names);
        }
        let start = self.cursor.offset;
        file.seek(SeekFrom::Start(start)).map_err(|e| self.io(e))?;
        let input = BufReader::with_capacity(256 << 10, (&*file).take(end - start));
        let mut rows = Rows::new(input, self.follow, start == 0);
        let header = self.header.clone().unwrap_or_default();
        loop {
            if chunk.is_full(limits) {
                return Ok(chunk);
            }
            let line_no = self.cursor.lines + 2;
            let Some(n) = rows.next().map_err(|e| self.io(e))? else {
                chunk.at_end = true;
                return Ok(chunk);
            };
            if rows.len() != header.len() {
                return Err(self.bad(
                    line_no,
                    format!("{} fields, but the header has {}", rows.len(), header.len()),
                ));
            }
            let mut fields = Map::with_capacity(header.len());
            // found only for a record that has a null marker in it
            let mut quoting: Option<Vec<bool>> = None;
            for (i, name) in header.iter().enumerate() {
                let value = std::str::from_utf8(rows.field(i)).map_err(|e| {
                    self.bad(line_no, format!("field {name:?} is not valid UTF-8: {e}"))
                })?;
                let null = self.null_values.iter().any(|m| m == value)
                    && !quoting.get_or_insert_with(|| rows.quoting())[i];
                let value = if null { Value::Null } else { typed(value) };
                fields.insert(name.clone(), value);
            }
            chunk.items.push(Item::Record(Record::insert(fields)));
            chunk.records += 1;
            chunk.bytes += n;
            self.cursor.lines += 1;
            self.cursor.offset += n;
        }
    }
}

/// CSV records one at a time from a reader positioned at a record boundary.
struct Rows<R> {
    core: csv_core::Reader,
    input: R,
    /// While following, the end of the input is only where the writer is
    /// now: a record it cuts off is not returned.
    follow: bool,
    /// Whether the input starts the file. The core strips a UTF-8 BOM from
    /// the first bytes it is given; elsewhere those bytes are data.
    at_file_start: bool,
    fed: bool,
    fields: Vec<u8>,
    ends: Vec<usize>,
    len: usize,
    /// The input bytes of the last record, as read.
    raw: Vec<u8>,
    /// Whether the last record started the file (its bytes may open with
    /// a BOM).
    raw_at_file_start: bool,
}

impl<R: BufRead> Rows<R> {
    fn new(input: R, follow: bool, at_file_start: bool) -> Self {
        Rows {
            core: csv_core::Reader::new(),
            input,
            follow,
            at_file_start,
            fed: false,
            fields: vec![0; 1024],
            ends: vec![0; 16],
            len: 0,
            raw: Vec::new(),
            raw_at_file_start: false,
        }
    }

    /// Reads the next record; returns the bytes it took (blank lines before
    /// it and its terminator included), or None at the end of the input.
    /// A record is only consumed whole: after None nothing of a cut-off
    /// record counts as read.
    fn next(&mut self) -> std::io::Result<Option<u64>> {
        let (mut nout_total, mut nends, mut nin_total) = (0usize, 0usize, 0u64);
        self.raw.clear();
        self.raw_at_file_start = self.at_file_start && !self.fed;
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() && self.follow {
                return Ok(None);
            }
            // One byte first away from the file's start, so that data
            // which happens to begin with a BOM is not stripped as one.
            let feed = if !self.fed && !self.at_file_start && !buf.is_empty() {
                &buf[..1]
            } else {
                buf
            };
            self.fed |= !feed.is_empty();
            let (res, nin, nout, nend) = self.core.read_record(
                feed,
                &mut self.fields[nout_total..],
                &mut self.ends[nends..],
            );
            self.raw.extend_from_slice(&feed[..nin]);
            self.input.consume(nin);
            nin_total += nin as u64;
            nout_total += nout;
            nends += nend;
            match res {
                ReadRecordResult::InputEmpty => {}
                ReadRecordResult::OutputFull => {
                    let n = self.fields.len() * 2;
                    self.fields.resize(n, 0);
                }
                ReadRecordResult::OutputEndsFull => {
                    let n = self.ends.len() * 2;
                    self.ends.resize(n, 0);
                }
                ReadRecordResult::Record => {
                    self.len = nends;
                    return Ok(Some(nin_total));
                }
                ReadRecordResult::End => return Ok(None),
            }
        }
    }

    /// Fields of the last record read.
    fn len(&self) -> usize {
        self.len
    }

    fn field(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.fields[start..self.ends[i]]
    }

    /// Whether each field of the last record was quoted. The core does not
    /// say, so the record's bytes are read again field by field: a field is
    /// quoted when its first byte is a quote (for the first field, after
    /// the line ends before it).
    fn quoting(&self) -> Vec<bool> {
        let mut raw = self.raw.as_slice();
        if self.raw_at_file_start {
            raw = raw.strip_prefix(b"\xef\xbb\xbf").unwrap_or(raw);
        }
        let mut core = csv_core::Reader::new();
        let mut out = vec![0; raw.len() + 1];
        let mut quoted = Vec::with_capacity(self.len);
        let (mut pos, mut start) = (0, 0);
        loop {
            // one byte first, so that the core strips no BOM from data
            let end = if pos == 0 {
                raw.len().min(1)
            } else {
                raw.len()
            };
            let (res, nin, _) = core.read_field(&raw[pos..end], &mut out);
            pos += nin;
            match res {
                csv_core::ReadFieldResult::Field { record_end } => {
                    let mut field = &raw[start..pos];
                    if quoted.is_empty() {
                        let skip = field.iter().take_while(|b| matches!(b, b'\r' | b'\n'));
                        field = &field[skip.count()..];
                    }
                    quoted.push(field.first() == Some(&b'"'));
                    start = pos;
                    if record_end {
                        break;
                    }
                }
                csv_core::ReadFieldResult::InputEmpty if end < raw.len() || nin > 0 => {}
                csv_core::ReadFieldResult::InputEmpty => {
                    // the record ends at the end of the input: say so
                    if let (csv_core::ReadFieldResult::Field { .. }, _, _) =
                        core.read_field(&[], &mut out)
                    {
                        let field = &raw[start..];
                        quoted.push(field.first() == Some(&b'"'));
                    }
                    break;
                }
                csv_core::ReadFieldResult::OutputFull | csv_core::ReadFieldResult::End => break,
            }
        }
        // a second reading that disagrees with the first cannot tell
        // quoting: no field counts as quoted
        if quoted.len() != self.len {
            return vec![false; self.len];
        }
        quoted
    }
}

/// The header's names: trimmed, an empty one named after its position, a
/// repeated one refused naming both positions.
fn header_names<R: BufRead>(rows: &Rows<R>) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        let raw = String::from_utf8_lossy(rows.field(i));
        let name = raw.trim_matches(|c: char| c.is_ascii_whitespace());
        let name = if name.is_empty() {
            format!("column_{}", i + 1)
        } else {
            name.to_string()
        };
        if let Some(j) = names.iter().position(|n| *n == name) {
            return Err(format!(
                "header: column {} is named {name:?} like column {}; \
                 CSV column names must be unique",
                i + 1,
                j + 1
            ));
        }
        names.push(name);
    }
    Ok(names)
}

fn typed(v: &str) -> Value {
    // padding around a number or boolean ("1, 2.5") is layout, not data
    let t = v.trim_matches([' ', '\t']);
    match t {
        "true" | "TRUE" | "True" => Value::Bool(true),
        "false" | "FALSE" | "False" => Value::Bool(false),
        _ => number(t).map_or_else(|| Value::String(v.to_string()), Value::Number),
    }
}

/// A number as data files write one: an optional minus, digits, an
/// optional fraction and exponent. A leading zero ("007") makes text: it
/// is an identifier's, not a number's. An integer past 64 bits stays text,
/// every digit kept.
fn number(v: &str) -> Option<Number> {
    let unsigned = v.strip_prefix('-').unwrap_or(v).as_bytes();
    let (mantissa, exponent) = match unsigned.iter().position(|b| matches!(b, b'e' | b'E')) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let (int, frac) = match mantissa.iter().position(|b| *b == b'.') {
        Some(at) => (&mantissa[..at], Some(&mantissa[at + 1..])),
        None => (mantissa, None),
    };
    let digits = |d: &[u8]| d.iter().all(u8::is_ascii_digit);
    let shaped = digits(int)
        && frac.is_none_or(digits)
        && !(int.is_empty() && frac.is_none_or(<[u8]>::is_empty))
        && exponent.is_none_or(|e| {
            let e = e.strip_prefix(b"-").or(e.strip_prefix(b"+")).unwrap_or(e);
            !e.is_empty() && digits(e)
        });
    if !shaped || (int.len() > 1 && int[0] == b'0') {
        return None;
    }
    if frac.is_none() && exponent.is_none() {
        return match v.parse::<i64>() {
            Ok(i) => Some(i.into()),
            Err(_) => v.parse::<u64>().ok().map(Number::from),
        };
    }
    v.parse::<f64>().ok().and_then(Number::from_f64)
}

#[cfg(test)]
mod tests {
    use super::typed;
    use serde_json::json;

    #[test]
    fn types_values_conservatively() {
        assert_eq!(typed(""), json!(""));
        assert_eq!(typed("42"), json!(42));
        assert_eq!(typed("-1.5"), json!(-1.5));
        assert_eq!(typed("true"), json!(true));
        assert_eq!(typed("TRUE"), json!(true));
        assert_eq!(typed("False"), json!(false));
        assert_eq!(typed("007"), json!("007"));
        assert_eq!(typed("-007"), json!("-007"));
        assert_eq!(typed("0"), json!(0));
        assert_eq!(typed("0.5"), json!(0.5));
        assert_eq!(typed(".5"), json!(0.5));
        assert_eq!(typed("5."), json!(5.0));
        assert_eq!(typed("1e5"), json!(100000.0));
        assert_eq!(typed("1e+05"), json!(100000.0));
        assert_eq!(typed("-2.5E-3"), json!(-0.0025));
        assert_eq!(typed("18446744073709551615"), json!(u64::MAX));
        assert_eq!(
            typed("184467440737095516150"),
            json!("184467440737095516150")
        );
        assert_eq!(typed(" 42"), json!(42));
        assert_eq!(typed("2.5\t"), json!(2.5));
        assert_eq!(typed(" true "), json!(true));
        for text in [
            "abc", "-", ".", "1e", "e5", "1.2.3", "1-2", "+5", "0x1f", "NaN", "inf", " ", " a ",
        ] {
            assert_eq!(typed(text), json!(text), "{text}");
        }
    }
}
