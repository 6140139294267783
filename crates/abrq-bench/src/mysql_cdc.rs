//! The mysql cdc source against the server's own limit, in the same run:
//! `changes` single-row INSERT transactions go into the binlog, then
//! `mysqlbinlog --read-from-remote-server --raw` copies the same binlog
//! (from the same position) to files, and abrq reads it as a replica
//! into its spool and delivers every change to a local `jsonl`
//! destination. Then the snapshot: `SELECT ... INTO OUTFILE` of a table
//! against abrq's consistent-snapshot copy of it to the same destination.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::config::Config;
use abrq_engine::{Engine, Metrics};
use abrq_sinks::relational::sqlx::{self, mysql::MySqlPool};
use abrq_state::{SpoolWrite, SqliteStore};
use clap::Args;

#[derive(Args)]
pub struct MysqlCdcArgs {
    #[arg(long, default_value_t = 200_000)]
    changes: u64,
    /// A server with a row-based binlog (`scripts/services.sh` mysqlcdc).
    #[arg(
        long,
        env = "ABRQ_TEST_MYSQLCDC_URL",
        default_value = "mysql://root@127.0.0.1:3316/test"
    )]
    url: String,
    /// Rows of the snapshot run (0: none).
    #[arg(long, default_value_t = 1_000_000)]
    snapshot_rows: u64,
    /// Snapshot runs, the server's and abrq's alternating; medians are shown.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// The latency run: single-row transactions at this rate...
    #[arg(long, default_value_t = 5_000)]
    latency_rate: u64,
    /// ...for this long (0: no latency run).
    #[arg(long, default_value_t = 10)]
    latency_secs: u64,
}

/// Writer sessions of the latency run.
const WRITERS: u64 = 8;

const TABLE: &str = "abrq_bench_mycdc";

pub async fn run(args: MysqlCdcArgs) -> anyhow::Result<()> {
    let pool = MySqlPool::connect(&args.url).await?;
    let u = reqwest::Url::parse(&args.url)?;
    let (host, port, user) = (
        u.host_str().unwrap_or("127.0.0.1").to_string(),
        u.port().unwrap_or(3306),
        u.username().to_string(),
    );
    sqlx::query(&format!("DROP TABLE IF EXISTS {TABLE}"))
        .execute(&pool)
        .await?;
    sqlx::query(&format!(
        "CREATE TABLE {TABLE} (id bigint PRIMARY KEY, customer varchar(32), \
         total decimal(10,2), placed datetime(6), note varchar(200))"
    ))
    .execute(&pool)
    .await?;
    if args.changes > 0 {
        let (file, pos): (String, u64) = {
            let r: (String, u64, String, String) = sqlx::query_as("SHOW MASTER STATUS")
                .fetch_one(&pool)
                .await?;
            (r.0, r.1)
        };
        // single-row transactions, as fast as the server commits them (its
        // redo log flushed once a second while loading)
        sqlx::query("SET GLOBAL innodb_flush_log_at_trx_commit = 2")
            .execute(&pool)
            .await?;
        sqlx::query("DROP PROCEDURE IF EXISTS abrq_bench_fill")
            .execute(&pool)
            .await?;
        sqlx::query(&format!(
            "CREATE PROCEDURE abrq_bench_fill(n BIGINT) BEGIN DECLARE i BIGINT DEFAULT 1; \
             WHILE i <= n DO INSERT INTO {TABLE} VALUES (i, CONCAT('customer-', i % 997), \
             (i % 100000) / 100.0, NOW(6), REPEAT('x', 120)); SET i = i + 1; END WHILE; END"
        ))
        .execute(&pool)
        .await?;
        let t = Instant::now();
        sqlx::query("CALL abrq_bench_fill(?)")
            .bind(args.changes as i64)
            .execute(&pool)
            .await?;
        println!(
            "wrote {} transactions in {:.1} s",
            args.changes,
            t.elapsed().as_secs_f64()
        );
        sqlx::query("SET GLOBAL innodb_flush_log_at_trx_commit = 1")
            .execute(&pool)
            .await?;

        let dir = tempfile::tempdir()?;
        let t = Instant::now();
        let status = Command::new("mysqlbinlog")
            .args(["--no-defaults", "--read-from-remote-server", "--raw"])
            .args([
                "--host",
                &host,
                "--port",
                &port.to_string(),
                "--user",
                &user,
            ])
            .arg(format!("--start-position={pos}"))
            .arg(format!("--result-file={}/", dir.path().display()))
            .arg(&file)
            .status()?;
        anyhow::ensure!(status.success(), "mysqlbinlog failed: {status}");
        let raw = t.elapsed().as_secs_f64();

        let work = tempfile::tempdir()?;
        let engine = {
            // the stream starts where the inserts start
            std::fs::create_dir_all(work.path().join("data"))?;
            let store = SqliteStore::open(&work.path().join("data/state.db"))?;
            store.register_stream("bench").await?;
            let cursor = serde_json::json!({"file": file, "pos": pos}).to_string();
            store.stage("bench", Vec::new(), Some(cursor), None).await?;
            drop(store);
            let t = Instant::now();
            let engine = start_engine(&args.url, work.path(), "never", 1000, "50ms").await?;
            wait_delivered(&engine, args.changes).await?;
            let ours = t.elapsed().as_secs_f64();
            let n = args.changes as f64;
            println!();
            println!(
                "| {} single-row transactions | s | changes/s |",
                args.changes
            );
            println!("|---|---|---|");
            println!(
                "| mysqlbinlog --read-from-remote-server --raw | {raw:.2} | {:.0} |",
                n / raw
            );
            println!(
                "| abrq: binlog, spool, local jsonl | {ours:.2} | {:.0} |",
                n / ours
            );
            println!("| ratio | {:.2} | |", raw / ours);
            engine
        };
        engine.shutdown().await;
    }
    if args.latency_secs > 0 {
        latency(&args, &pool).await?;
    }
    if args.snapshot_rows > 0 {
        snapshot(&args, &pool).await?;
    }
    Ok(())
}

/// Commit on the source to delivered at a local destination, at a fixed
/// rate of durable single-row transactions from several sessions.
async fn latency(args: &MysqlCdcArgs, pool: &MySqlPool) -> anyhow::Result<()> {
    sqlx::query(&format!("TRUNCATE {TABLE}"))
        .execute(pool)
        .await?;
    let work = tempfile::tempdir()?;
    let engine = start_engine(&args.url, work.path(), "never", 1000, "10ms").await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = engine.status().await?;
        let reading = st[0]
            .source
            .position
            .as_ref()
            .is_some_and(|p| !p["binlog"].is_null());
        if reading {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the source did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = args.latency_rate * args.latency_secs;
    let rate = args.latency_rate;
    let start = Instant::now() + Duration::from_millis(100);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let pool = pool.clone();
        writers.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            let mut committed = Vec::new();
            for i in (w..total).step_by(WRITERS as usize) {
                let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
                tokio::time::sleep_until(due.into()).await;
                sqlx::query(&format!(
                    "INSERT INTO {TABLE} VALUES (?, 'c', 1, NOW(6), 'latency')"
                ))
                .bind(i as i64 + 1)
                .execute(&mut *conn)
                .await?;
                committed.push(Instant::now());
            }
            anyhow::Ok(committed)
        }));
    }
    let mut delivered_at: Vec<Instant> = Vec::with_capacity(total as usize);
    let deadline = Instant::now() + Duration::from_secs(args.latency_secs + 60);
    while (delivered_at.len() as u64) < total {
        anyhow::ensure!(Instant::now() < deadline, "latency run did not finish");
        let st = engine.status().await?;
        let d = st[0].destinations[0].delivered_records;
        let now = Instant::now();
        while (delivered_at.len() as u64) < d.min(total) {
            delivered_at.push(now);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut committed = Vec::with_capacity(total as usize);
    for w in writers {
        committed.extend(w.await??);
    }
    committed.sort();
    engine.shutdown().await;
    let mut ms: Vec<f64> = committed
        .iter()
        .zip(&delivered_at)
        .map(|(c, d)| d.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    println!();
    println!(
        "| commit to delivered at local jsonl, {total} changes at {rate}/s from {WRITERS} sessions, durable commits, max_wait 10ms | ms |"
    );
    println!("|---|---|");
    println!("| p50 | {:.1} |", at(0.50));
    println!("| p99 | {:.1} |", at(0.99));
    println!("| max | {:.1} |", at(1.0));
    Ok(())
}

async fn snapshot(args: &MysqlCdcArgs, pool: &MySqlPool) -> anyhow::Result<()> {
    sqlx::query(&format!("TRUNCATE {TABLE}"))
        .execute(pool)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO {TABLE} SELECT seq, CONCAT('customer-', seq % 997), (seq % 100000) / 100.0, \
         NOW(6), REPEAT('x', 120) FROM seq_1_to_{}",
        args.snapshot_rows
    ))
    .execute(pool)
    .await?;
    let out = format!("/tmp/abrq-bench-outfile-{}.tsv", std::process::id());
    let (mut outfiles, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds.max(1) {
        let _ = std::fs::remove_file(&out);
        let t = Instant::now();
        sqlx::query(&format!("SELECT * FROM {TABLE} INTO OUTFILE '{out}'"))
            .execute(pool)
            .await?;
        outfiles.push(t.elapsed().as_secs_f64());
        let _ = std::fs::remove_file(&out);
        let work = tempfile::tempdir()?;
        let t = Instant::now();
        let engine = start_engine(&args.url, work.path(), "initial", 10_000, "50ms").await?;
        wait_delivered(&engine, args.snapshot_rows).await?;
        ours.push(t.elapsed().as_secs_f64());
        engine.shutdown().await;
    }
    crate::snapshot_table(
        args.snapshot_rows,
        "SELECT * INTO OUTFILE (server side)",
        &outfiles,
        "abrq: consistent snapshot, one query streamed in pages of 10,000, spool, local jsonl",
        &ours,
    );
    Ok(())
}

async fn wait_delivered(engine: &Engine, n: u64) -> anyhow::Result<()> {
    loop {
        let st = engine.status().await?;
        if st[0].destinations[0].delivered_records >= n {
            return Ok(());
        }
        if let Some(e) = &st[0].source.error {
            anyhow::bail!("source failed: {e}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start_engine(
    url: &str,
    work: &Path,
    snapshot: &str,
    max_records: u64,
    max_wait: &str,
) -> anyhow::Result<Arc<Engine>> {
    let u = reqwest::Url::parse(url)?;
    let text = format!(
        r#"
data_dir = "{data}"
[server]
listen = "127.0.0.1:0"
[[streams]]
name = "bench"
[streams.source]
engine = "mysql"
mode = "cdc"
host = "{host}"
port = {port}
database = "{db}"
username = "{user}"
table = "{TABLE}"
snapshot = "{snapshot}"
[streams.batch]
max_records = {max_records}
max_wait = "{max_wait}"
[[streams.destinations]]
name = "lake"
engine = "local"
database = "{out}"
format = "jsonl"
"#,
        data = work.join("data").display(),
        host = u.host_str().unwrap_or("127.0.0.1"),
        port = u.port().unwrap_or(3306),
        db = u.path().trim_start_matches('/'),
        user = u.username(),
        out = work.join("out").display(),
    );
    let config = Config::parse(&text, "bench")?;
    abrq_sources::validate(&config).map_err(|e| anyhow::anyhow!(e))?;
    std::fs::create_dir_all(work.join("data"))?;
    let store = Arc::new(SqliteStore::open(&work.join("data/state.db"))?);
    Ok(Engine::start(
        &config,
        store,
        Arc::new(Metrics::new()),
        &crate::destination_factory,
    )
    .await?)
}
