//! CSV with a header line. Values are typed the way a reader expects:
//! integers, decimals and booleans become JSON numbers and booleans, an
//! empty field is null, and anything else (including "007") stays text.
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
use crate::file::SourceError;

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
            let names = (0..rows.len())
                .map(|i| String::from_utf8_lossy(rows.field(i)).into_owned())
                .collect::<Vec<_>>();
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
            for (i, name) in header.iter().enumerate() {
                let value = std::str::from_utf8(rows.field(i)).map_err(|e| {
                    self.bad(line_no, format!("field {name:?} is not valid UTF-8: {e}"))
                })?;
                fields.insert(name.clone(), typed(value));
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
        }
    }

    /// Reads the next record; returns the bytes it took (blank lines before
    /// it and its terminator included), or None at the end of the input.
    /// A record is only consumed whole: after None nothing of a cut-off
    /// record counts as read.
    fn next(&mut self) -> std::io::Result<Option<u64>> {
        let (mut nout_total, mut nends, mut nin_total) = (0usize, 0usize, 0u64);
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
}

fn typed(v: &str) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    match v {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let leading_zero = v.len() > 1 && v.starts_with('0') && !v.starts_with("0.");
    if !leading_zero {
        if let Ok(i) = v.parse::<i64>() {
            return Value::Number(i.into());
        }
        if v.contains('.')
            && v.bytes()
                .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            if let Some(n) = v.parse::<f64>().ok().and_then(Number::from_f64) {
                return Value::Number(n);
            }
        }
    }
    Value::String(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::typed;
    use serde_json::json;

    #[test]
    fn types_values_conservatively() {
        assert_eq!(typed(""), json!(null));
        assert_eq!(typed("42"), json!(42));
        assert_eq!(typed("-1.5"), json!(-1.5));
        assert_eq!(typed("true"), json!(true));
        assert_eq!(typed("007"), json!("007"));
        assert_eq!(typed("0.5"), json!(0.5));
        assert_eq!(typed("1e5"), json!("1e5"));
        assert_eq!(typed("abc"), json!("abc"));
    }
}
