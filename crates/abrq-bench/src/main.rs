//! `abrq-bench`: throughput figures as ratios against the physical limit
//! measured in the same run (a raw loop doing only the unavoidable work).
//! Its own binary, so the product carries none of the test-service
//! endpoints, temp-file handling or raw SQLite client the raw loops need.

mod cdc;
mod fanout;
mod file_local;
mod file_postgres;
mod ftp;
mod kafka;
mod latency;
mod memory;
mod mysql_cdc;
mod objects;
mod proc_stat;
mod relational;
mod scale_out;
mod staging;
mod staging_postgres;
mod verify;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use serde_json::{json, Map, Value};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "abrq-bench",
    version,
    about = "abrq throughput and memory benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: BenchCmd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("ABRQ_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.cmd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The sinks crate's factory, as the engine wants it.
pub fn destination_factory(
    stream: &str,
    cfg: &abrq_core::config::DestinationConfig,
) -> Result<Arc<dyn abrq_core::Destination>, String> {
    abrq_sinks::build(stream, cfg).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Spool staging (durable commits) against a raw SQLite insert loop.
    Staging {
        #[arg(long, default_value_t = 200_000)]
        records: u64,
        #[arg(long, default_value_t = 3)]
        rounds: u32,
    },
    /// Spool staging on PostgreSQL state against a raw insert loop of the
    /// same rows into the same server.
    StagingPostgres(staging_postgres::StagingPostgresArgs),
    /// File source to a local jsonl.gz destination against a raw
    /// gzip-and-write of the same records.
    FileLocal {
        #[arg(long, default_value_t = 300_000)]
        records: u64,
        #[arg(long, default_value_t = 3)]
        rounds: u32,
    },
    /// Batches through the ftp and ftps destinations (jsonl.gz) against a
    /// raw gzip + upload + rename loop on the same client and server.
    Ftp(ftp::FtpArgs),
    /// Batches through the object-store destinations (local, s3,
    /// azure_blob, gcs; jsonl.gz) against a raw serialize + gzip + PUT loop
    /// on the same client and server.
    Objects(objects::ObjectsArgs),
    /// Rows/s through the postgres and mysql destinations against raw
    /// unnest-INSERT and COPY loops (PostgreSQL) and a raw multi-row
    /// INSERT loop (MySQL) on the same server.
    Relational(relational::RelationalArgs),
    /// abrq verify on a million-row table against COUNT(*) plus a full
    /// md5 of both sides.
    Verify(verify::VerifyArgs),
    /// Changes/s through the postgres cdc source into the spool and a
    /// local destination, against pg_recvlogical on the same WAL.
    Cdc(cdc::CdcArgs),
    /// Changes/s through the mysql cdc source against mysqlbinlog reading
    /// the same binlog; snapshot rows/s against SELECT ... INTO OUTFILE.
    MysqlCdc(mysql_cdc::MysqlCdcArgs),
    /// Records/s through the kafka destination (200 B and 1 KiB records)
    /// against a raw rdkafka producer with the same settings, same broker.
    Kafka(kafka::KafkaArgs),
    /// An NDJSON file into PostgreSQL end to end (spool included, durable
    /// at both ends) against `psql \copy` of the same rows as CSV.
    FilePostgres(file_postgres::FilePostgresArgs),
    /// One file to local, postgres, kafka and s3 at once against each of
    /// them alone.
    Fanout(fanout::FanoutArgs),
    /// Staged-to-delivered latency at a steady ingest rate to a local
    /// destination, from the engine's histogram.
    Latency(latency::LatencyArgs),
    /// Records/s of one `abrq run` against three with the same config on
    /// one PostgreSQL state (leases), nine postgres destinations behind a
    /// proxy that delays each request 20 ms (`--no-delay`: CPU-bound).
    ScaleOut(scale_out::ScaleOutArgs),
    /// Resident memory while a paused destination's backlog grows.
    Memory {
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
    },
}

async fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Staging { records, rounds } => staging::run(records, rounds).await,
        BenchCmd::StagingPostgres(args) => staging_postgres::run(args).await,
        BenchCmd::FileLocal { records, rounds } => file_local::run(records, rounds).await,
        BenchCmd::FilePostgres(args) => file_postgres::run(args).await,
        BenchCmd::Fanout(args) => fanout::run(args).await,
        BenchCmd::Latency(args) => latency::run(args).await,
        BenchCmd::Ftp(args) => ftp::run(args).await,
        BenchCmd::Kafka(args) => kafka::run(args).await,
        BenchCmd::Memory { records } => memory::run(records).await,
        BenchCmd::Objects(args) => objects::run(args).await,
        BenchCmd::Relational(args) => relational::run(args).await,
        BenchCmd::Verify(args) => verify::run(args).await,
        BenchCmd::Cdc(args) => cdc::run(args).await,
        BenchCmd::MysqlCdc(args) => mysql_cdc::run(args).await,
        BenchCmd::ScaleOut(args) => scale_out::run(args).await,
    }
}

const WORDS: [&str; 32] = [
    "order",
    "paid",
    "shipped",
    "customer",
    "warehouse",
    "berlin",
    "lisbon",
    "invoice",
    "refund",
    "pending",
    "express",
    "standard",
    "parcel",
    "retry",
    "timeout",
    "accepted",
    "card",
    "bank",
    "wallet",
    "eur",
    "usd",
    "gbp",
    "basket",
    "coupon",
    "priority",
    "north",
    "south",
    "east",
    "west",
    "returned",
    "cancelled",
    "delivered",
];

/// Record `i` as a JSON object of exactly `size` bytes when serialized,
/// with text varied like real events (it compresses about 4:1, not 100:1).
pub fn record(i: u64, size: usize) -> Map<String, Value> {
    let mut h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let head = json!({"id": i, "kind": "bench", "text": ""})
        .to_string()
        .len();
    let want = size.saturating_sub(head);
    let mut text = String::with_capacity(want + 16);
    while text.len() < want {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        text.push_str(WORDS[(h % 32) as usize]);
        text.push(' ');
        if h.is_multiple_of(5) {
            text.push_str(&(h % 10_000).to_string());
            text.push(' ');
        }
    }
    text.truncate(want);
    match json!({"id": i, "kind": "bench", "text": text}) {
        Value::Object(m) => m,
        _ => unreachable!("object literal"),
    }
}

/// A batch of 200-byte insert records as the drain loop hands it to a
/// destination. The key starts with the seq, so the first 16 hex digits (an
/// object's name) differ per batch.
pub fn batch_of(seq: u64, fields: Vec<Map<String, Value>>) -> abrq_core::Batch {
    let records = fields.len() as u64;
    abrq_core::Batch {
        meta: abrq_core::BatchMeta {
            stream: "bench".into(),
            seq,
            idempotency_key: format!("{seq:016x}{:016x}", 0),
            staged_at: chrono::Utc::now(),
            records,
            bytes: 200 * records,
        },
        items: fields
            .into_iter()
            .map(|f| abrq_core::Item::Record(abrq_core::Record::insert(f)))
            .collect(),
        lines: None,
    }
}

/// `records` generated records starting at `seq * records`, as one batch.
pub fn generated_batch(seq: u64, records: u64) -> abrq_core::Batch {
    batch_of(
        seq,
        (0..records)
            .map(|i| record(seq * records + i, 200))
            .collect(),
    )
}

/// Megabytes of the batches' records as JSON lines (what a raw loop writes).
pub fn json_lines_mb(batches: &[abrq_core::Batch]) -> f64 {
    let bytes: usize = batches
        .iter()
        .flat_map(|b| b.records())
        .map(|r| {
            serde_json::to_vec(&r.fields)
                .map(|v| v.len() + 1)
                .unwrap_or(0)
        })
        .sum();
    bytes as f64 / 1e6
}

/// The config of one stream named `bench` with its state under `work` and
/// `source` (the keys of `[streams.source]`); sections for the stream's
/// batch and destinations follow.
pub fn stream_config(work: &std::path::Path, source: &str) -> String {
    format!(
        "data_dir = \"{}\"\n[server]\nlisten = \"127.0.0.1:0\"\n\
         [[streams]]\nname = \"bench\"\n[streams.source]\n{source}\n",
        work.join("data").display()
    )
}

/// [`stream_config`] for a stream that reads the NDJSON file `input`.
pub fn file_stream_config(work: &std::path::Path, input: &std::path::Path) -> String {
    let source = format!("engine = \"file\"\npath = \"{}\"", input.display());
    stream_config(work, &source)
}

/// Seconds for the engine in process, with the config `text` (its
/// `data_dir` under `work`), from start until every destination drained.
pub async fn run_until_drained(text: &str, work: &std::path::Path) -> anyhow::Result<f64> {
    let config = abrq_core::config::Config::parse(text, "bench")?;
    let store = Arc::new(abrq_state::SqliteStore::open(&work.join("data/state.db"))?);
    let start = std::time::Instant::now();
    let engine = abrq_engine::Engine::start(
        &config,
        store,
        Arc::new(abrq_engine::Metrics::new()),
        &destination_factory,
    )
    .await?;
    engine
        .wait_drained()
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let secs = start.elapsed().as_secs_f64();
    engine.shutdown().await;
    Ok(secs)
}

/// Median of a few measurements.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    xs[xs.len() / 2]
}

/// A snapshot run's table: each round's times, then the medians and
/// their ratio (the peer's over abrq's: 1.0 is as fast).
pub fn snapshot_table(rows: u64, peer: &str, peers: &[f64], ours_is: &str, ours: &[f64]) {
    let n = rows as f64;
    println!();
    println!("| snapshot of {rows} existing rows | s | rows/s |");
    println!("|---|---|---|");
    if peers.len() > 1 {
        let each = |xs: &[f64]| xs.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>();
        println!("| rounds, {peer} | {} | |", each(peers).join(", "));
        println!("| rounds, abrq | {} | |", each(ours).join(", "));
    }
    let (peer_s, ours_s) = (median(peers.to_vec()), median(ours.to_vec()));
    println!("| {peer} | {peer_s:.2} | {:.0} |", n / peer_s);
    println!("| {ours_is} | {ours_s:.2} | {:.0} |", n / ours_s);
    println!("| ratio | {:.2} | |", peer_s / ours_s);
}

#[cfg(test)]
mod tests {
    #[test]
    fn record_has_the_asked_size() {
        for i in [0, 7, 123_456] {
            assert_eq!(
                serde_json::to_vec(&super::record(i, 200)).unwrap().len(),
                200
            );
        }
    }
}
