//! Property tests of the file source, read as the engine reads it: chunk by
//! chunk under batch limits, sometimes reopened from the last cursor (a
//! restart), and, when following, while the file is still being written.
//!
//! - Any bytes, as NDJSON or CSV, followed or not: no panic, and every
//!   chunk that is not at the end holds a record (a source that returns
//!   nothing without being at the end would spin the engine).
//! - Valid NDJSON and CSV, with quotes, newlines in quoted fields, CR LF,
//!   a BOM and multibyte text: every record comes out exactly once and in
//!   order, whatever the limits and wherever the writer's appends cut it.
//!
//! Small by default, so CI stays fast; `PROPTEST_CASES=100000` goes further.

use std::io::Write;
use std::path::Path;

use abrq_sources::file::FileFormat;
use abrq_sources::{FileSource, Limits, ReadChunk};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value};

fn config() -> ProptestConfig {
    let mut c = ProptestConfig {
        // a failure is kept as a named test beside the code it found
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 128;
    }
    c
}

/// How one read is done: its limits, and whether the source is reopened
/// from the cursor before it.
#[derive(Debug, Clone, Copy)]
struct Step {
    max_records: u64,
    max_bytes: u64,
    restart: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (1u64..8, 1u64..600, prop::bool::weighted(0.2)).prop_map(
            |(max_records, max_bytes, restart)| Step {
                max_records,
                max_bytes,
                restart,
            },
        ),
        1..6,
    )
}

/// A source being read the way the engine reads it.
struct Reader<'a> {
    path: &'a Path,
    format: FileFormat,
    follow: bool,
    src: FileSource,
    cursor: Option<String>,
    steps: &'a [Step],
    n: usize,
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, format: FileFormat, follow: bool, steps: &'a [Step]) -> Self {
        let src = FileSource::open(path, format, follow, None).expect("open");
        Reader {
            path,
            format,
            follow,
            src,
            cursor: None,
            steps,
            n: 0,
        }
    }

    /// Reads until the source is at the end (for now), or fails. Returns
    /// the records read, or the error.
    fn drain(&mut self) -> Result<Vec<Map<String, Value>>, String> {
        let len = std::fs::metadata(self.path).map(|m| m.len()).unwrap_or(0);
        let mut out = Vec::new();
        // each read that is not at the end consumes at least one byte
        for _ in 0..len + 2 {
            let step = self.steps[self.n % self.steps.len()];
            self.n += 1;
            if step.restart {
                self.src =
                    FileSource::open(self.path, self.format, self.follow, self.cursor.as_deref())
                        .map_err(|e| e.to_string())?;
            }
            let chunk = self
                .src
                .read_chunk(Limits {
                    max_records: step.max_records,
                    max_bytes: step.max_bytes,
                })
                .map_err(|e| e.to_string())?;
            // CSV records come parsed, NDJSON lines kept as read
            let mut items = chunk.items.clone();
            items.extend(chunk.kept_items().map_err(|e| e.to_string())?);
            assert_eq!(chunk.records as usize, items.len());
            assert!(
                chunk.at_end || !items.is_empty(),
                "an empty chunk that is not at the end"
            );
            if chunk.cursor.is_some() {
                self.cursor = chunk.cursor;
            }
            out.extend(
                items
                    .iter()
                    .map(|i| i.as_record().expect("a record").fields.clone()),
            );
            if chunk.at_end {
                return Ok(out);
            }
        }
        panic!("the source never reached the end of {len} bytes");
    }
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for append");
    f.write_all(bytes).expect("append");
}

/// Writes `bytes` in pieces cut at `cuts`, draining after each, as a
/// followed file is read while its writer appends.
fn follow_in_pieces(
    path: &Path,
    format: FileFormat,
    bytes: &[u8],
    cuts: &[Index],
    steps: &[Step],
) -> Result<Vec<Map<String, Value>>, String> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.push(bytes.len());
    at.sort_unstable();
    append(path, b"");
    let mut r = Reader::new(path, format, true, steps);
    let mut out = Vec::new();
    let mut done = 0;
    for end in at {
        append(path, &bytes[done..end]);
        done = end;
        out.extend(r.drain()?);
    }
    Ok(out)
}

fn read_whole(
    path: &Path,
    format: FileFormat,
    steps: &[Step],
) -> Result<Vec<Map<String, Value>>, String> {
    Reader::new(path, format, false, steps).drain()
}

/// Bytes near the formats: the characters that decide how they split.
fn near_valid() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop::sample::select(vec![
        &b"\""[..],
        b"\"\"",
        b",",
        b"\n",
        b"\r",
        b"\r\n",
        b"\xef\xbb\xbf",
        "é".as_bytes(),
        "☕".as_bytes(),
        b"\xe2\x98",
        b"\xff",
        b"\0",
        b"{",
        b"}",
        b"[",
        b"]",
        b":",
        b"\"a\"",
        b"\"_abrq_op\"",
        b"\"delete\"",
        b"1",
        b"-0.5e3",
        b"true",
        b"null",
        b"\\",
        b"\\u00e9",
        b"\\ud800",
        b" ",
        b"id",
        b"x",
    ]);
    prop::collection::vec(piece, 0..120).prop_map(|ps| ps.concat())
}

fn any_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(any::<u8>(), 0..600), near_valid()]
}

fn format() -> impl Strategy<Value = FileFormat> {
    prop_oneof![Just(FileFormat::Ndjson), Just(FileFormat::Csv)]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_bytes_read_whole_without_panic(
        bytes in any_input(),
        format in format(),
        steps in steps(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in");
        std::fs::write(&p, &bytes).unwrap();
        let _ = read_whole(&p, format, &steps);
    }

    #[test]
    fn any_bytes_followed_in_pieces_without_panic(
        bytes in any_input(),
        format in format(),
        cuts in prop::collection::vec(any::<Index>(), 0..6),
        steps in steps(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in");
        let _ = follow_in_pieces(&p, format, &bytes, &cuts, &steps);
    }
}

// ---- valid NDJSON ----

/// Text with what breaks naive splitting: quotes, backslashes, newlines,
/// CR, commas, a BOM, multibyte characters.
fn tricky_text() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "a", "Z", "0", " ", ",", "\"", "\\", "\n", "\r", "\r\n", "\t", "é", "☕", "𝄞", "\u{feff}",
        "'", "{", "}",
    ]);
    prop::collection::vec(piece, 0..12).prop_map(|ps| ps.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        tricky_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((tricky_text(), inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn json_record() -> impl Strategy<Value = Map<String, Value>> {
    // `_abrq_op` is an operation, not data: keep keys clear of it
    prop::collection::vec(("[a-z]{1,3}|k[ é\"\n☕]{0,3}", json_value()), 0..5)
        .prop_map(|kv| kv.into_iter().collect())
}

/// NDJSON for `records`: LF or CR LF endings, blank lines between.
fn ndjson(records: &[Map<String, Value>], crlf: &[bool], blank: &[bool]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if blank[i % blank.len()] {
            out.extend_from_slice(b"  \n");
        }
        out.extend(serde_json::to_vec(r).unwrap());
        out.extend_from_slice(if crlf[i % crlf.len()] { b"\r\n" } else { b"\n" });
    }
    out
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn valid_ndjson_comes_out_once_in_order(
        records in prop::collection::vec(json_record(), 0..25),
        crlf in prop::collection::vec(any::<bool>(), 1..4),
        blank in prop::collection::vec(prop::bool::weighted(0.1), 1..4),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
        steps in steps(),
    ) {
        let bytes = ndjson(&records, &crlf, &blank);
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.ndjson");
        std::fs::write(&whole, &bytes).unwrap();
        prop_assert_eq!(&read_whole(&whole, FileFormat::Ndjson, &steps).unwrap(), &records);
        let followed = dir.path().join("followed.ndjson");
        let got = follow_in_pieces(&followed, FileFormat::Ndjson, &bytes, &cuts, &steps).unwrap();
        prop_assert_eq!(&got, &records);
    }
}

// ---- valid CSV ----

/// A CSV cell and the value the source makes of it unquoted: empty and
/// null markers are null, canonical integers and booleans are typed, text
/// stays text.
fn cell() -> impl Strategy<Value = (String, Value)> {
    prop_oneof![
        Just((String::new(), Value::Null)),
        prop::sample::select(vec!["NA", "\\N", "NULL"]).prop_map(|m| (m.to_string(), Value::Null)),
        any::<i64>().prop_map(|i| (i.to_string(), Value::from(i))),
        any::<bool>().prop_map(|b| (b.to_string(), Value::Bool(b))),
        // a leading letter keeps text from reading as a number
        tricky_text().prop_map(|t| {
            let s = format!("s{t}");
            (s.clone(), Value::String(s))
        }),
    ]
}

#[derive(Debug, Clone)]
struct Csv {
    bytes: Vec<u8>,
    records: Vec<Map<String, Value>>,
}

fn csv_file() -> impl Strategy<Value = Csv> {
    (1usize..5)
        .prop_flat_map(|cols| {
            (
                prop::collection::vec(tricky_text(), cols),
                prop::collection::vec(prop::collection::vec(cell(), cols), 0..20),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(names, rows, crlf, quote_all, bom)| {
            // unique names that do not start with a BOM
            let names: Vec<String> = names
                .into_iter()
                .enumerate()
                .map(|(i, n)| format!("c{i}{n}"))
                .collect();
            let mut w = csv::WriterBuilder::new()
                .terminator(if crlf {
                    csv::Terminator::CRLF
                } else {
                    csv::Terminator::Any(b'\n')
                })
                .quote_style(if quote_all {
                    csv::QuoteStyle::Always
                } else {
                    csv::QuoteStyle::Necessary
                })
                .from_writer(Vec::new());
            w.write_record(&names).unwrap();
            // names come out trimmed
            let keys: Vec<String> = names
                .iter()
                .map(|n| {
                    n.trim_matches(|c: char| c.is_ascii_whitespace())
                        .to_string()
                })
                .collect();
            let mut records = Vec::new();
            for row in &rows {
                w.write_record(row.iter().map(|(text, _)| text)).unwrap();
                // a quoted marker is text; the writer quotes every cell, or
                // the lone empty cell of a one-column record
                let value = |(text, v): &(String, Value)| {
                    let quoted = quote_all || (text.is_empty() && names.len() == 1);
                    if v.is_null() && quoted {
                        Value::String(text.clone())
                    } else {
                        v.clone()
                    }
                };
                records.push(keys.iter().cloned().zip(row.iter().map(value)).collect());
            }
            let mut bytes = if bom {
                b"\xef\xbb\xbf".to_vec()
            } else {
                Vec::new()
            };
            bytes.extend(w.into_inner().unwrap());
            Csv { bytes, records }
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn valid_csv_comes_out_once_in_order(
        file in csv_file(),
        cuts in prop::collection::vec(any::<Index>(), 0..8),
        steps in steps(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let whole = dir.path().join("whole.csv");
        std::fs::write(&whole, &file.bytes).unwrap();
        prop_assert_eq!(&read_whole(&whole, FileFormat::Csv, &steps).unwrap(), &file.records);
        let followed = dir.path().join("followed.csv");
        let got = follow_in_pieces(&followed, FileFormat::Csv, &file.bytes, &cuts, &steps).unwrap();
        prop_assert_eq!(&got, &file.records);
    }
}
