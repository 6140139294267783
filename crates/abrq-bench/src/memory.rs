//! Resident memory while one paused destination's backlog grows: the spool
//! lives on disk, so memory must stay flat however far a sink falls behind.

use std::sync::Arc;
use std::time::Duration;

use abrq_core::config::Config;
use abrq_engine::{Engine, Metrics};
use abrq_state::{MarksWrite, SpoolRead, SpoolWrite, SqliteStore};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub async fn run(records: u64) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let text = format!(
        r#"
data_dir = "{data}"
[spool]
max_bytes = "100GiB"
[[streams]]
name = "bench"
[streams.source]
engine = "generate"
records = {records}
[[streams.destinations]]
name = "live"
engine = "local"
database = "{out}"
format = "jsonl"
[[streams.destinations]]
name = "held"
engine = "local"
database = "{out}-held"
"#,
        data = work.path().join("data").display(),
        out = work.path().join("out").display(),
    );
    let config = Config::parse(&text, "bench")?;
    let store = Arc::new(SqliteStore::open(&work.path().join("data/state.db"))?);
    // Pause `held` before anything runs, as an operator would.
    store.register_stream("bench").await?;
    store
        .register_destination("bench", "held", "local", true)
        .await?;
    store.set_paused("bench", "held", true).await?;
    let metrics = Arc::new(Metrics::new());
    let engine = Engine::start(
        &config,
        store.clone(),
        metrics.clone(),
        &crate::destination_factory,
    )
    .await?;
    let step = (records / 10).max(1);
    let mut next = step;
    let mut samples = Vec::new();
    loop {
        let staged = metrics.records_staged.with_label_values(&["bench"]).get();
        let live = engine
            .stream("bench")
            .and_then(|s| s.destination("live").map(|d| d.mark().durable()));
        let last = engine.stream("bench").map(|s| s.last_seq()).unwrap_or(0);
        if staged >= next {
            samples.push((staged, rss_kib()));
            next += step;
        }
        if staged >= records && live == Some(last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let backlog = store.spool_stats("bench").await?;
    engine.shutdown().await;
    println!("| backlog of the paused destination (records) | resident memory (MiB) |");
    println!("|---|---|");
    for (n, kib) in &samples {
        println!("| {n} | {:.1} |", *kib as f64 / 1024.0);
    }
    let first = samples.first().map(|s| s.1).unwrap_or(0) as f64 / 1024.0;
    let last = samples.last().map(|s| s.1).unwrap_or(0) as f64 / 1024.0;
    println!();
    println!(
        "spool held {} batches ({} records, {:.0} MB); memory grew {:.1} MiB from the first to the last sample",
        backlog.batches,
        backlog.records,
        backlog.bytes as f64 / 1e6,
        last - first
    );
    Ok(())
}
