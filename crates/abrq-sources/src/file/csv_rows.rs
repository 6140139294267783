//! CSV with a header line. Values are typed the way a reader expects:
//! integers, decimals and booleans become JSON numbers and booleans, an
//! empty field is null, and anything else (including "007") stays text.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};

use abrq_core::{Item, Record};
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
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(false)
                .from_reader(BufReader::new((&*file).take(end)));
            let mut rec = csv::ByteRecord::new();
            let got = rdr
                .read_byte_record(&mut rec)
                .map_err(|e| self.bad(1, e.to_string()))?;
            if !got {
                chunk.at_end = true;
                return Ok(chunk);
            }
            let names = rec
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect::<Vec<_>>();
            if self.cursor.offset == 0 {
                self.cursor.offset = rdr.position().byte();
            }
            self.header = Some(names);
        }
        let start = self.cursor.offset;
        file.seek(SeekFrom::Start(start)).map_err(|e| self.io(e))?;
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(false)
            .from_reader(BufReader::with_capacity(
                256 << 10,
                (&*file).take(end - start),
            ));
        let header = self.header.clone().unwrap_or_default();
        let mut rec = csv::StringRecord::new();
        loop {
            if chunk.is_full(limits) {
                return Ok(chunk);
            }
            let before = rdr.position().byte();
            let line_no = self.cursor.lines + 2;
            let got = rdr
                .read_record(&mut rec)
                .map_err(|e| self.bad(line_no, e.to_string()))?;
            if !got {
                chunk.at_end = true;
                return Ok(chunk);
            }
            let after = rdr.position().byte();
            if rec.len() != header.len() {
                return Err(self.bad(
                    line_no,
                    format!("{} fields, but the header has {}", rec.len(), header.len()),
                ));
            }
            let mut fields = Map::with_capacity(header.len());
            for (name, value) in header.iter().zip(rec.iter()) {
                fields.insert(name.clone(), typed(value));
            }
            chunk.items.push(Item::Record(Record::insert(fields)));
            chunk.records += 1;
            chunk.bytes += after - before;
            self.cursor.lines += 1;
            self.cursor.offset = start + after;
        }
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
