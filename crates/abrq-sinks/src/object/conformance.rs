//! One test suite for the object path, written once against
//! [`ObjectTransport`] and run against every engine's transport (each
//! engine's `tests.rs` calls these cases), plus the sample batch and the
//! readers that turn stored objects back into records.

use std::io::Read;

use crate::object::ObjectFormat;
use abrq_core::{idempotency_key, Batch, BatchMeta, Destination, Item, Op, Record};
use chrono::{TimeZone, Utc};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::encode::OP_FIELD;
use super::manifest::Manifest;
use super::{naming, ObjectDestination, ObjectSettings, ObjectTransport};

pub const FORMATS: [ObjectFormat; 5] = [
    ObjectFormat::Jsonl,
    ObjectFormat::JsonlGz,
    ObjectFormat::Csv,
    ObjectFormat::CsvGz,
    ObjectFormat::Parquet,
];

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("sample fields are objects"),
    }
}

/// Every kind of value, awkward strings, fields that come and go, all three
/// operations, and two of each instruction between the records.
pub fn sample_batch(seq: u64) -> Batch {
    let rec = |op, v| Item::Record(Record { op, fields: obj(v) });
    let items = vec![
        rec(
            Op::Insert,
            json!({"id": 1, "name": "plain", "price": 9.5, "ok": true,
            "tags": ["a", "b"], "meta": {"k": {"n": 1}}, "note": null}),
        ),
        Item::Truncate,
        rec(
            Op::Update,
            json!({"id": 2, "name": "comma, \"quote\"\nnew line", "price": 0.1,
            "ok": false}),
        ),
        Item::Schema {
            columns: obj(json!({"id": "int"})),
        },
        rec(Op::Delete, json!({"id": 3})),
        rec(
            Op::Insert,
            json!({"id": 4, "extra": "ünïcødé ✓", "name": "",
            "big": u64::MAX, "neg": i64::MIN}),
        ),
        Item::Truncate,
        Item::Schema {
            columns: Map::new(),
        },
    ];
    batch_of(seq, items)
}

pub fn batch_of(seq: u64, items: Vec<Item>) -> Batch {
    let records: Vec<&Record> = items.iter().filter_map(Item::as_record).collect();
    let bytes = records
        .iter()
        .map(|r| serde_json::to_vec(&r.fields).unwrap().len() as u64)
        .sum();
    Batch {
        meta: BatchMeta {
            stream: "orders".into(),
            seq,
            idempotency_key: idempotency_key(Uuid::from_u128(0xab), seq, uuid::Uuid::nil()),
            // a past day, late in UTC: "now" or local time would differ
            staged_at: Utc.with_ymd_and_hms(2021, 3, 4, 23, 30, 0).unwrap(),
            records: records.len() as u64,
            bytes,
        },
        items,
        lines: None,
    }
}

pub fn settings(prefix: &str, format: ObjectFormat, manifest: bool) -> ObjectSettings {
    ObjectSettings {
        stream: "orders".into(),
        destination: "lake".into(),
        prefix: naming::normalize_prefix(prefix).into(),
        format,
        date_partitioning: true,
        manifest,
    }
}

pub fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// JSONL back to records: `_abrq_op` becomes the op again.
pub fn read_jsonl(text: &[u8]) -> Vec<Record> {
    text.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut fields: Map<String, Value> = serde_json::from_slice(line).unwrap();
            let op = match fields.remove(OP_FIELD) {
                None => Op::Insert,
                Some(v) => serde_json::from_value(v).unwrap(),
            };
            Record { op, fields }
        })
        .collect()
}

/// Asserts that the CSV holds `expected` cell by cell, the way a CSV
/// consumer sees it: strings raw, null and missing empty, other values as
/// JSON text that parses back to the same value.
pub fn assert_csv_holds(text: &[u8], expected: &[Record]) {
    let mut r = csv::Reader::from_reader(text);
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), expected.len());
    let any_change = expected.iter().any(|r| !r.op.is_insert());
    assert_eq!(
        header.iter().any(|h| h == OP_FIELD),
        any_change,
        "{header:?}"
    );
    for (row, rec) in rows.iter().zip(expected) {
        for (col, cell) in header.iter().zip(row.iter()) {
            if col == OP_FIELD {
                assert_eq!(cell, rec.op.as_str());
                continue;
            }
            match rec.fields.get(col) {
                None | Some(Value::Null) => assert_eq!(cell, "", "{col}"),
                Some(Value::String(s)) => assert_eq!(cell, s, "{col}"),
                Some(v) => assert_eq!(&serde_json::from_str::<Value>(cell).unwrap(), v, "{col}"),
            }
        }
        for k in rec.fields.keys() {
            assert!(header.contains(k), "column {k} missing from {header:?}");
        }
    }
}

/// Asserts that `data`, stored in `format`, holds exactly `batch`'s records.
pub fn assert_holds(format: ObjectFormat, data: &[u8], batch: &Batch) {
    let expected: Vec<Record> = batch.records().cloned().collect();
    match format {
        ObjectFormat::Jsonl => assert_eq!(read_jsonl(data), expected),
        ObjectFormat::JsonlGz => assert_eq!(read_jsonl(&gunzip(data)), expected),
        ObjectFormat::Csv => assert_csv_holds(data, &expected),
        ObjectFormat::CsvGz => assert_csv_holds(&gunzip(data), &expected),
        ObjectFormat::Parquet => assert_parquet_holds(data, &expected),
    }
}

/// Asserts that the Parquet object holds `expected` the way a Parquet
/// reader sees it: typed columns hold the values themselves (integers in a
/// float64 column as floats), utf8 columns hold them as CSV cells do.
pub fn assert_parquet_holds(data: &[u8], expected: &[Record]) {
    use arrow_schema::DataType;
    let (header, rows) = super::parquet::read(data);
    assert_eq!(rows.len(), expected.len());
    let any_change = expected.iter().any(|r| !r.op.is_insert());
    assert_eq!(header.iter().any(|(h, _)| h == OP_FIELD), any_change);
    for (row, rec) in rows.iter().zip(expected) {
        for ((col, ty), cell) in header.iter().zip(row) {
            if col == OP_FIELD {
                assert_eq!(cell, rec.op.as_str());
                continue;
            }
            match (rec.fields.get(col), ty) {
                (None | Some(Value::Null), _) => assert_eq!(cell, &Value::Null, "{col}"),
                (Some(Value::String(s)), DataType::Utf8) => assert_eq!(cell, s, "{col}"),
                (Some(v), DataType::Utf8) => {
                    let text = cell.as_str().unwrap_or_else(|| panic!("{col}: {cell}"));
                    assert_eq!(&serde_json::from_str::<Value>(text).unwrap(), v, "{col}");
                }
                (Some(v), DataType::Float64) => assert_eq!(cell.as_f64(), v.as_f64(), "{col}"),
                (Some(v), _) => assert_eq!(cell, v, "{col}"),
            }
        }
        for k in rec.fields.keys() {
            assert!(header.iter().any(|(h, _)| h == k), "column {k} missing");
        }
    }
}

// ---- the suite ----

/// put replaces, get returns what was put, delete is idempotent.
pub async fn transport_basics<T: ObjectTransport>(t: &T) {
    let key = "basics/a/b/obj.bin";
    t.put(key, "one".into()).await.unwrap();
    t.put(key, "two".into()).await.unwrap();
    assert_eq!(t.get(key).await.unwrap(), "two");
    t.delete(key).await.unwrap();
    t.delete(key).await.unwrap();
    assert!(t.get(key).await.is_err());
}

/// Each format stores a readable object whose records are the batch's,
/// reports its size, and counts the instructions it skipped.
pub async fn every_format_round_trips<T: ObjectTransport + Clone + 'static>(t: &T) {
    for format in FORMATS {
        let dest = ObjectDestination::new(t.clone(), settings("rt", format, false));
        let batch = sample_batch(1);
        let report = dest.deliver(&batch).await.unwrap();
        let key = dest.object_key(&batch).unwrap();
        let p = &batch.meta.idempotency_key[..16];
        assert_eq!(key, format!("rt/dt=2021-03-04/part-{p}.{}", format.ext()));
        let data = t.get(&key).await.unwrap();
        assert_eq!(report.bytes, data.len() as u64, "{format:?}");
        assert_eq!((report.ignored_truncates, report.ignored_schemas), (2, 2));
        assert_holds(format, &data, &batch);
        assert!(
            t.get(&naming::manifest_key(&key)).await.is_err(),
            "manifest off"
        );
    }
}

/// The manifest describes the object exactly as stored.
pub async fn manifest_matches_object<T: ObjectTransport + Clone + 'static>(t: &T) {
    for format in FORMATS {
        let dest = ObjectDestination::new(t.clone(), settings("/mf/", format, true));
        let batch = sample_batch(2);
        dest.deliver(&batch).await.unwrap();
        let key = dest.object_key(&batch).unwrap();
        let data = t.get(&key).await.unwrap();
        let m: Manifest =
            serde_json::from_slice(&t.get(&naming::manifest_key(&key)).await.unwrap()).unwrap();
        assert_eq!(m.path, key);
        assert_eq!(m.bytes, data.len() as u64);
        assert_eq!(m.sha256, hex::encode(Sha256::digest(&data)));
        assert_eq!(m.rows, 4);
        assert_eq!(m.idempotency_key, batch.meta.idempotency_key);
        assert_eq!((m.stream.as_str(), m.seq), ("orders", 2));
        assert_eq!(m.staged_at, "2021-03-04T23:30:00Z");
        assert_eq!(m.format, format.ext());
    }
}

/// Delivering the same batch again stores the identical object under the
/// identical name.
pub async fn replay_overwrites<T: ObjectTransport + Clone + 'static>(t: &T) -> String {
    let dest = ObjectDestination::new(t.clone(), settings("replay", ObjectFormat::JsonlGz, true));
    let batch = sample_batch(3);
    dest.deliver(&batch).await.unwrap();
    let key = dest.object_key(&batch).unwrap();
    let first = t.get(&key).await.unwrap();
    let manifest = t.get(&naming::manifest_key(&key)).await.unwrap();
    dest.deliver(&batch).await.unwrap();
    assert_eq!(dest.object_key(&batch).unwrap(), key);
    assert_eq!(t.get(&key).await.unwrap(), first);
    assert_eq!(t.get(&naming::manifest_key(&key)).await.unwrap(), manifest);
    key
}

/// A group stores each batch exactly as delivering it alone would: the
/// same names, the same bytes, each manifest beside its object.
pub async fn group_matches_singles<T: ObjectTransport + Clone + 'static>(t: &T) {
    let alone = ObjectDestination::new(t.clone(), settings("single", ObjectFormat::JsonlGz, true));
    let grouped = ObjectDestination::new(t.clone(), settings("group", ObjectFormat::JsonlGz, true));
    let batches: Vec<Batch> = (10..10 + 2 * grouped.group_limit() as u64)
        .map(sample_batch)
        .collect();
    let mut expected = Vec::new();
    for b in &batches {
        expected.push(alone.deliver(b).await.unwrap());
    }
    let mut reports = Vec::new();
    for group in batches.chunks(grouped.group_limit()) {
        reports.extend(grouped.deliver_group(group).await.unwrap());
    }
    assert_eq!(reports, expected);
    for b in &batches {
        let (one, many) = (alone.object_key(b).unwrap(), grouped.object_key(b).unwrap());
        assert_eq!(many.strip_prefix("group"), one.strip_prefix("single"));
        assert_eq!(t.get(&many).await.unwrap(), t.get(&one).await.unwrap());
        let m: Manifest =
            serde_json::from_slice(&t.get(&naming::manifest_key(&many)).await.unwrap()).unwrap();
        assert_eq!((m.path.as_str(), m.seq), (many.as_str(), b.meta.seq));
    }
}

/// `check` succeeds and names the engine.
pub async fn check_succeeds<T: ObjectTransport + Clone + 'static>(t: &T) {
    let dest = ObjectDestination::new(t.clone(), settings("probe", ObjectFormat::Csv, false));
    let report = dest.check().await.unwrap();
    assert!(report.detail.starts_with(t.kind()), "{}", report.detail);
}

// ---- an in-memory transport: runs the suite on itself, and records the
// order of puts, which a real store cannot show ----

#[derive(Clone, Default)]
pub struct MemoryTransport {
    state: std::sync::Arc<std::sync::Mutex<MemoryState>>,
}

#[derive(Default)]
struct MemoryState {
    objects: std::collections::BTreeMap<String, bytes::Bytes>,
    puts: Vec<String>,
    fail_suffix: Option<&'static str>,
}

#[async_trait::async_trait]
impl ObjectTransport for MemoryTransport {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn put(&self, key: &str, data: bytes::Bytes) -> Result<(), abrq_core::DeliveryError> {
        let mut s = self.state.lock().unwrap();
        if s.fail_suffix.is_some_and(|x| key.ends_with(x)) {
            return Err(abrq_core::DeliveryError::transient("injected failure"));
        }
        s.puts.push(key.to_string());
        s.objects.insert(key.to_string(), data);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), abrq_core::DeliveryError> {
        self.state.lock().unwrap().objects.remove(key);
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<bytes::Bytes, abrq_core::DeliveryError> {
        let s = self.state.lock().unwrap();
        s.objects
            .get(key)
            .cloned()
            .ok_or_else(|| abrq_core::DeliveryError::transient(format!("no object {key}")))
    }
}

mod tests {
    use super::*;

    // on two workers, so a group is encoded on two threads
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn suite_passes_on_memory() {
        let t = MemoryTransport::default();
        transport_basics(&t).await;
        group_matches_singles(&t).await;
        every_format_round_trips(&t).await;
        manifest_matches_object(&t).await;
        replay_overwrites(&t).await;
        check_succeeds(&t).await;
        // the probe was removed
        assert!(!t
            .state
            .lock()
            .unwrap()
            .objects
            .keys()
            .any(|k| k.contains("abrq-probe")));
    }

    #[tokio::test]
    async fn manifest_is_put_after_its_object() {
        let t = MemoryTransport::default();
        let dest = ObjectDestination::new(t.clone(), settings("o", ObjectFormat::Jsonl, true));
        let batch = sample_batch(5);
        dest.deliver(&batch).await.unwrap();
        let key = dest.object_key(&batch).unwrap();
        assert_eq!(
            t.state.lock().unwrap().puts,
            [key.clone(), naming::manifest_key(&key)]
        );
    }

    #[tokio::test]
    async fn a_failed_put_fails_the_group() {
        let t = MemoryTransport::default();
        let dest = ObjectDestination::new(t.clone(), settings("o", ObjectFormat::Jsonl, false));
        let batches: Vec<Batch> = (1..=4).map(sample_batch).collect();
        let failing = dest.object_key(&batches[2]).unwrap();
        t.state.lock().unwrap().fail_suffix = Some(failing.leak());
        let e = dest.deliver_group(&batches).await.unwrap_err();
        assert!(e.is_transient());
    }

    #[tokio::test]
    async fn failed_object_put_writes_no_manifest() {
        let t = MemoryTransport::default();
        t.state.lock().unwrap().fail_suffix = Some(".jsonl");
        let dest = ObjectDestination::new(t.clone(), settings("o", ObjectFormat::Jsonl, true));
        let e = dest.deliver(&sample_batch(6)).await.unwrap_err();
        assert!(e.is_transient());
        assert!(t.state.lock().unwrap().puts.is_empty());
    }
}
