//! Staging throughput: the state store's `stage` (payload encoding, one
//! durable transaction per 1,000-record batch with its cursor) against a
//! raw loop inserting the same rows into SQLite with the same durability.

use std::time::Instant;

use abrq_core::{Item, Record};
use abrq_state::{NewBatch, SpoolWrite, SqliteStore};
use rusqlite::params;

const BATCH: u64 = 1000;

pub async fn run(records: u64, rounds: u32) -> anyhow::Result<()> {
    let lines: Vec<String> = (0..records)
        .map(|i| serde_json::to_string(&super::record(i, 200)).expect("json"))
        .collect();
    let mut raw = Vec::new();
    let mut ours = Vec::new();
    for round in 0..rounds {
        let dir = tempfile::tempdir()?;
        let r = raw_loop(&dir.path().join("raw.db"), &lines)?;
        let o = abrq_stage(&dir.path().join("state.db"), &lines).await?;
        println!("round {round}: raw {r:.0} records/s, abrq {o:.0} records/s");
        raw.push(r);
        ours.push(o);
    }
    let (r, o) = (super::median(raw), super::median(ours));
    println!();
    println!("| staging, 200-byte records, batches of 1,000, durable commits | records/s |");
    println!("|---|---|");
    println!("| raw SQLite insert loop (WAL, synchronous=FULL) | {r:.0} |");
    println!("| abrq spool staging | {o:.0} |");
    println!("| ratio | {:.2} |", o / r);
    Ok(())
}

fn raw_loop(path: &std::path::Path, lines: &[String]) -> anyhow::Result<f64> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE rows (seq INTEGER, idx INTEGER, body TEXT, PRIMARY KEY (seq, idx))",
    )?;
    let start = Instant::now();
    for (seq, chunk) in lines.chunks(BATCH as usize).enumerate() {
        let tx = conn.transaction()?;
        {
            let mut stmt =
                tx.prepare_cached("INSERT INTO rows (seq, idx, body) VALUES (?1, ?2, ?3)")?;
            for (idx, line) in chunk.iter().enumerate() {
                stmt.execute(params![seq as i64, idx as i64, line])?;
            }
        }
        tx.commit()?;
    }
    Ok(lines.len() as f64 / start.elapsed().as_secs_f64())
}

async fn abrq_stage(path: &std::path::Path, lines: &[String]) -> anyhow::Result<f64> {
    let store = SqliteStore::open(path)?;
    store.register_stream("bench").await?;
    let batches = parsed_batches(lines, BATCH as usize);
    let start = Instant::now();
    for (i, (items, bytes)) in batches.into_iter().enumerate() {
        let b = NewBatch::from_items(&items, bytes)?;
        store
            .stage(
                "bench",
                vec![b],
                Some(format!("{}", (i as u64 + 1) * BATCH)),
                None,
            )
            .await?;
    }
    Ok(lines.len() as f64 / start.elapsed().as_secs_f64())
}

/// The lines as parsed records in batches of `size`, with their bytes.
/// Records arrive parsed, as a source hands them over; encoding them for
/// the spool is part of staging, so the benches time it and not this.
pub(super) fn parsed_batches(lines: &[String], size: usize) -> Vec<(Vec<Item>, u64)> {
    lines
        .chunks(size)
        .map(|chunk| {
            let items = chunk
                .iter()
                .map(|l| match serde_json::from_str(l) {
                    Ok(serde_json::Value::Object(m)) => Item::Record(Record::insert(m)),
                    _ => unreachable!("bench records are objects"),
                })
                .collect();
            (items, chunk.iter().map(|l| l.len() as u64).sum())
        })
        .collect()
}
