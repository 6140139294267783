//! Staging throughput against a raw SQLite loop with the same durability.
//!
//! `cargo run --release -p abrq-state --example stage_bench [batches] [dir]`
//!
//! Both sides commit one batch of 1,000 records of ~200 bytes per
//! transaction, in WAL mode with `synchronous=FULL`. The raw loop inserts a
//! pre-encoded payload; `stage` also encodes it, which is reported apart.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use abrq_core::{Item, Record};
use abrq_state::{payload, NewBatch, SqliteStore, StateStore};
use serde_json::{json, Value};

const RECORDS: u64 = 1000;

fn items(batch: u64) -> Vec<Item> {
    (0..RECORDS)
        .map(|i| {
            let Value::Object(fields) = json!({
                "id": batch * RECORDS + i,
                "customer": "c-000123",
                "amount": 1234.5,
                "status": "shipped",
                "note": "x".repeat(120),
            }) else {
                unreachable!("a json object literal")
            };
            Item::Record(Record::insert(fields))
        })
        .collect()
}

fn new_batch(batch: u64) -> NewBatch {
    let items = items(batch);
    let bytes = items
        .iter()
        .map(|i| payload::encoded_len(i).unwrap_or(0))
        .sum();
    NewBatch {
        items,
        records: RECORDS,
        bytes,
    }
}

fn raw_loop(path: &Path, payloads: &[Vec<u8>]) -> rusqlite::Result<Duration> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE spool (stream_id INTEGER NOT NULL, seq INTEGER NOT NULL,
             idempotency_key TEXT NOT NULL, staged_at INTEGER NOT NULL, records INTEGER NOT NULL,
             bytes INTEGER NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (stream_id, seq))",
    )?;
    let start = Instant::now();
    for (seq, p) in payloads.iter().enumerate() {
        let tx = conn.transaction()?;
        tx.prepare_cached("INSERT INTO spool VALUES (1, ?1, 'k', 0, ?2, ?3, ?4)")?
            .execute(rusqlite::params![
                seq as i64 + 1,
                RECORDS,
                p.len() as i64,
                p
            ])?;
        tx.commit()?;
    }
    Ok(start.elapsed())
}

fn report(what: &str, n: u64, took: Duration) {
    let secs = took.as_secs_f64();
    println!(
        "{what:<28} {:>8.1} batches/s {:>10.0} records/s {:>7.2} ms/batch",
        n as f64 / secs,
        (n * RECORDS) as f64 / secs,
        secs * 1000.0 / n as f64
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let tmp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());

    let batches: Vec<NewBatch> = (0..n).map(new_batch).collect();
    let start = Instant::now();
    let payloads = batches
        .iter()
        .map(|b| payload::encode(&b.items))
        .collect::<Result<Vec<_>, _>>()?;
    report("encode only (no I/O)", n, start.elapsed());
    let size = payloads.iter().map(Vec::len).sum::<usize>() / payloads.len();
    println!("payload: {size} bytes per batch");

    let start = Instant::now();
    for (seq, p) in payloads.iter().enumerate() {
        payload::decode(seq as u64, p)?;
    }
    report("decode only (no I/O)", n, start.elapsed());
    let raw = raw_loop(&dir.join("raw.db"), &payloads)?;
    report("raw sqlite insert+commit", n, raw);

    let store = SqliteStore::open(&dir.join("store.db"))?;
    store.register_stream("bench").await?;
    store
        .register_destination("bench", "d", "local", true)
        .await?;
    let start = Instant::now();
    for b in batches {
        store
            .stage("bench", vec![b], Some("cursor".into()), None)
            .await?;
    }
    let staged = start.elapsed();
    report("SqliteStore::stage", n, staged);

    let start = Instant::now();
    let mut seq = 0;
    while let Some(b) = store.next_batch("bench", seq).await? {
        seq = b.meta.seq;
    }
    report("SqliteStore::next_batch", n, start.elapsed());

    let polls = 1000;
    let start = Instant::now();
    for _ in 0..polls {
        store.spool_stats("bench").await?;
    }
    println!(
        "spool_stats: {:.1} us per call with {n} batches spooled",
        start.elapsed().as_secs_f64() * 1e6 / polls as f64
    );
    Ok(())
}
