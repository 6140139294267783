//! One transaction of a million rows through the `postgres` cdc source.
//! The reader stages a transaction in batches as it arrives (the cursor
//! counts the changes of it staged already), so abrq's memory stays
//! bounded whatever a transaction's size: the process's peak RSS
//! (`VmHWM`) stays under `PEAK_MIB` while the transaction alone is over
//! 100 MB of row data. Every row arrives once, checked against the
//! source's own count and sum. `ABRQ_BIG_TX_ROWS` sets the size.

use std::io::BufRead;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

const PEAK_MIB: u64 = 160;

fn rows() -> i64 {
    std::env::var("ABRQ_BIG_TX_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// (lines, sum of their ids) of every JSON lines file under `dir`.
fn count_and_sum(dir: &std::path::Path) -> (i64, i64) {
    let (mut n, mut sum) = (0, 0);
    for entry in walk(dir) {
        if !entry.to_string_lossy().ends_with(".jsonl") {
            continue;
        }
        let file = std::io::BufReader::new(std::fs::File::open(&entry).unwrap());
        for line in file.lines() {
            let line = line.unwrap();
            let at = line.find("\"id\":").expect("an id") + 5;
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            sum += digits.parse::<i64>().unwrap();
            n += 1;
        }
    }
    (n, sum)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_million_row_transaction_streams_in_bounded_memory() {
    let n = rows();
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("big_tx_{tag}"), format!("abrq_big_{tag}"));
    let table = format!("\"{schema}\".items");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, pad text)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "big",
            Source::postgres("cdc")
                .connection(&pg::cdc_url())
                .table(&format!("{schema}.items"))
                .slot(&slot)
                .publication(&slot)
                .snapshot("never"),
        )
        .destination(Destination::local("out", abrq.p("out")).format("jsonl")),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("big", "the slot made and read", |st| {
        !st["source"]["position"]["read_lsn"].is_null()
    })
    .await;
    let pid = abrq.pid().expect("pid");
    let before = memory_kib(pid, "VmHWM:");

    let started = std::time::Instant::now();
    sqlx::query(&format!(
        "INSERT INTO {table} SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, {n}) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
    let inserted = started.elapsed();
    let st = abrq
        .wait_status("big", "every row delivered", |st| {
            u(&dest_of(st, "out")["delivered_records"]) >= n as u64
                && dest_of(st, "out")["high_water_mark"] == st["spool"]["last_seq"]
        })
        .await;
    let delivered = started.elapsed();
    let peak = memory_kib(pid, "VmHWM:");
    let (want_n, want_sum): (i64, i64) =
        sqlx::query_as(&format!("SELECT count(*), sum(id)::bigint FROM {table}"))
            .fetch_one(&src)
            .await
            .unwrap();
    let (got_n, got_sum) = count_and_sum(&abrq.path("out"));
    println!(
        "one transaction of {n} rows: inserted in {inserted:?}, delivered {delivered:?} after \
         the insert began, {} batches; abrq peak RSS {} MiB (before {} MiB)",
        st["spool"]["last_seq"],
        peak / 1024,
        before / 1024
    );
    assert_eq!((got_n, got_sum), (want_n, want_sum), "every row once");
    assert!(
        peak <= PEAK_MIB * 1024,
        "peak RSS {} MiB over {PEAK_MIB} MiB for one transaction of {n} rows",
        peak / 1024
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
