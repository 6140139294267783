//! What a local destination leaves on disk, read and decoded whole: a
//! consumer must never see a partial object.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{sinks, u};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    JsonlGz,
    Csv,
    CsvGz,
    Parquet,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::JsonlGz,
        Format::Jsonl,
        Format::CsvGz,
        Format::Csv,
        Format::Parquet,
    ];

    pub fn ext(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::JsonlGz => "jsonl.gz",
            Format::Csv => "csv",
            Format::CsvGz => "csv.gz",
            Format::Parquet => "parquet",
        }
    }

    fn is_csv(self) -> bool {
        matches!(self, Format::Csv | Format::CsvGz)
    }

    fn is_gz(self) -> bool {
        matches!(self, Format::JsonlGz | Format::CsvGz)
    }
}

/// One final-named object, fully decoded.
#[derive(Debug, Clone)]
pub struct Object {
    /// The key: path relative to the destination root, '/'-separated.
    pub rel: String,
    /// The 16 hex digits of `part-{p}.{ext}`.
    pub part: String,
    pub format: Format,
    /// The bytes as stored.
    pub raw: Vec<u8>,
    /// JSONL: each line's object. CSV: header -> cell, every cell a string.
    /// Parquet: column -> value, typed as its column (see `sinks`).
    pub records: Vec<Map<String, Value>>,
}

/// Everything under a destination's root: a local base directory, or a
/// bucket, container or directory `sinks` read.
#[derive(Debug, Default)]
pub struct DestOutput {
    pub objects: BTreeMap<String, Object>,
    /// Parsed manifests, keyed by the object key they sit beside.
    pub manifests: BTreeMap<String, Value>,
    /// `.{name}.tmp-*` leftovers of interrupted writes (never read).
    pub temp_files: Vec<String>,
    /// Anything that is none of the above.
    pub other: Vec<String>,
}

/// Reads a local destination's tree. Panics on any final-named file that
/// does not decode completely: a consumer must never see a partial object.
pub fn read_dest(root: &Path) -> DestOutput {
    let mut out = DestOutput::default();
    if root.is_dir() {
        walk(root, root, &mut out);
    }
    out
}

/// Whether the last segment of `rel` names an interrupted write's
/// temporary file, which a reader never needs to fetch.
pub fn is_temp_name(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.starts_with('.') && name.contains(".tmp")
}

fn walk(root: &Path, dir: &Path, out: &mut DestOutput) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("below root")
            .to_string_lossy()
            .replace('\\', "/");
        if is_temp_name(&rel) {
            out.temp_files.push(rel);
        } else {
            let raw = fs::read(&path).unwrap();
            out.add(rel, raw);
        }
    }
}

impl DestOutput {
    /// Files one stored file or object under `rel` (its key below the
    /// destination's root): temporary file, manifest, object or other.
    /// Panics on a final-named object or manifest that does not decode.
    pub fn add(&mut self, rel: String, raw: Vec<u8>) {
        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
        if is_temp_name(&rel) {
            self.temp_files.push(rel);
        } else if let Some(object) = rel.strip_suffix(".manifest.json") {
            let m: Value = serde_json::from_slice(&raw)
                .unwrap_or_else(|e| panic!("manifest {rel} is not complete JSON: {e}"));
            self.manifests.insert(object.to_string(), m);
        } else if let Some((part, format)) = object_name(&name) {
            let records = decode(&rel, format, &raw);
            self.objects.insert(
                rel.clone(),
                Object {
                    rel,
                    part,
                    format,
                    raw,
                    records,
                },
            );
        } else {
            self.other.push(rel);
        }
    }
}

/// `part-{16 hex}.{ext}` → (hex, format).
fn object_name(name: &str) -> Option<(String, Format)> {
    let rest = name.strip_prefix("part-")?;
    Format::ALL.iter().find_map(|f| {
        let part = rest.strip_suffix(&format!(".{}", f.ext()))?;
        (part.len() == 16 && part.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| (part.to_string(), *f))
    })
}

/// Decodes a whole object or panics saying why it is not complete.
pub fn decode(rel: &str, format: Format, raw: &[u8]) -> Vec<Map<String, Value>> {
    if format == Format::Parquet {
        return sinks::parquet_rows(rel, raw);
    }
    let text = if format.is_gz() {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(raw)
            .read_to_end(&mut plain)
            .unwrap_or_else(|e| panic!("{rel}: gzip does not decompress completely: {e}"));
        plain
    } else {
        raw.to_vec()
    };
    if !text.is_empty() {
        assert!(
            text.ends_with(b"\n"),
            "{rel}: does not end with a newline: partial object?"
        );
    }
    if format.is_csv() {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .from_reader(text.as_slice());
        let headers = rdr
            .headers()
            .unwrap_or_else(|e| panic!("{rel}: bad CSV header: {e}"))
            .clone();
        rdr.records()
            .map(|r| {
                let r = r.unwrap_or_else(|e| panic!("{rel}: bad CSV row: {e}"));
                headers
                    .iter()
                    .zip(r.iter())
                    .map(|(h, c)| (h.to_string(), Value::String(c.to_string())))
                    .collect()
            })
            .collect()
    } else {
        let text = std::str::from_utf8(&text).unwrap_or_else(|e| panic!("{rel}: not UTF-8: {e}"));
        text.lines()
            .enumerate()
            // any depth, as abrq delivers it
            .map(|(i, line)| match abrq_core::json::from_str(line) {
                Ok(Value::Object(m)) => m,
                other => panic!("{rel} line {}: not a JSON object: {other:?}", i + 1),
            })
            .collect()
    }
}

/// What a CSV row of `record` holds: strings raw, null as an empty cell,
/// anything else as compact JSON (the encoder's documented rules).
pub fn csv_cells(record: &Map<String, Value>) -> Map<String, Value> {
    record
        .iter()
        .map(|(k, v)| {
            let cell = match v {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), Value::String(cell))
        })
        .collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl DestOutput {
    pub fn record_count(&self) -> usize {
        self.objects.values().map(|o| o.records.len()).sum()
    }

    /// Every record, object by object (key order).
    pub fn records(&self) -> impl Iterator<Item = &Map<String, Value>> {
        self.objects.values().flat_map(|o| o.records.iter())
    }

    /// Checks every object has a manifest that describes it exactly (path,
    /// rows, bytes, sha256, format, stream, the key its name came from, and
    /// the dt= partition of its staging day); returns (seq, object key)
    /// sorted by seq.
    pub fn verify_manifests(&self, stream: &str) -> Vec<(u64, String)> {
        for key in self.manifests.keys() {
            assert!(
                self.objects.contains_key(key),
                "manifest {key}.manifest.json has no object"
            );
        }
        let mut seqs = Vec::new();
        for (key, o) in &self.objects {
            let m = self
                .manifests
                .get(key)
                .unwrap_or_else(|| panic!("object {key} has no manifest"));
            assert_eq!(m["path"], key.as_str(), "{key}: manifest path");
            assert_eq!(
                u(&m["rows"]),
                o.records.len() as u64,
                "{key}: manifest rows"
            );
            assert_eq!(u(&m["bytes"]), o.raw.len() as u64, "{key}: manifest bytes");
            assert_eq!(
                m["sha256"],
                sha256_hex(&o.raw).as_str(),
                "{key}: manifest sha256"
            );
            assert_eq!(m["format"], o.format.ext(), "{key}: manifest format");
            assert_eq!(m["stream"], stream, "{key}: manifest stream");
            let idem = m["idempotency_key"].as_str().expect("idempotency_key");
            assert_eq!(idem.len(), 32, "{key}: idempotency key {idem}");
            assert_eq!(&idem[..16], o.part, "{key}: name is not the key's prefix");
            let staged = m["staged_at"].as_str().expect("staged_at");
            if let Some(dt) = key.split('/').find_map(|p| p.strip_prefix("dt=")) {
                assert_eq!(&staged[..10], dt, "{key}: partition is not the staging day");
            }
            seqs.push((u(&m["seq"]), key.clone()));
        }
        seqs.sort();
        seqs
    }
}

/// The records of `out` keyed by `field` (a u64), asserting each appears
/// once.
pub fn by_id<'a>(out: &'a DestOutput, field: &str) -> BTreeMap<u64, &'a Map<String, Value>> {
    let mut seen = BTreeMap::new();
    for r in out.records() {
        let id = match &r[field] {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("record without a numeric {field}: {r:?}"));
        assert!(seen.insert(id, r).is_none(), "{field} {id} appears twice");
    }
    seen
}

/// A change record's operation (`_abrq_op`; an insert carries none).
pub fn op_of(record: &Map<String, Value>) -> &str {
    record
        .get("_abrq_op")
        .and_then(Value::as_str)
        .unwrap_or("insert")
}
