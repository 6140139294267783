//! The postgres cdc source against the server's own limit, in the same
//! run: `changes` single-row INSERT transactions are written while two
//! logical slots exist, then `pg_recvlogical` reads one slot to
//! /dev/null up to the last commit (the server decoding its WAL and
//! nothing else), and abrq reads the other into its spool and delivers
//! every change to a local `jsonl` destination. Both read the same WAL.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::config::Config;
use abrq_engine::{Engine, Metrics};
use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use abrq_state::SqliteStore;
use clap::Args;

#[derive(Args)]
pub struct CdcArgs {
    #[arg(long, default_value_t = 1_000_000)]
    changes: u64,
    /// A cluster with wal_level = logical (`scripts/services.sh` pgcdc).
    #[arg(
        long,
        env = "ABRQ_TEST_PGCDC_URL",
        default_value = "postgres://postgres@127.0.0.1:5442/test"
    )]
    url: String,
    /// Then the latency run: single-row transactions at this rate...
    #[arg(long, default_value_t = 5_000)]
    latency_rate: u64,
    /// ...for this long (0: no latency run).
    #[arg(long, default_value_t = 10)]
    latency_secs: u64,
    /// Rows of the snapshot run (0: none).
    #[arg(long, default_value_t = 1_000_000)]
    snapshot_rows: u64,
    /// Snapshot runs, psql's and abrq's alternating; medians are shown.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Connections abrq's snapshot copy reads on (`snapshot_connections`);
    /// several (`1,2,4`) run one after the other in each round.
    #[arg(long, value_delimiter = ',', default_values_t = [1])]
    snapshot_connections: Vec<usize>,
}

const TABLE: &str = "abrq_bench_cdc";
const PUBLICATION: &str = "abrq_bench_cdc";
const SLOT_ABRQ: &str = "abrq_bench_cdc_abrq";
const SLOT_RECV: &str = "abrq_bench_cdc_recv";
/// Writer sessions of the latency run.
const WRITERS: u64 = 8;

pub async fn run(args: CdcArgs) -> anyhow::Result<()> {
    let pool = PgPool::connect(&args.url).await?;
    if args.changes == 0 {
        // the latency and snapshot runs alone
        sqlx::query(&format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} (id bigint PRIMARY KEY, customer text, \
             total numeric(10,2), placed timestamptz, note text)"
        ))
        .execute(&pool)
        .await?;
        sqlx::query(&format!("DROP PUBLICATION IF EXISTS {PUBLICATION}"))
            .execute(&pool)
            .await?;
        sqlx::query(&format!(
            "CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}"
        ))
        .execute(&pool)
        .await?;
        if args.latency_secs > 0 {
            latency(&args, &pool).await?;
        }
        if args.snapshot_rows > 0 {
            snapshot(&args, &pool).await?;
        }
        return Ok(());
    }
    for slot in [SLOT_ABRQ, SLOT_RECV] {
        sqlx::query(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(slot)
        .execute(&pool)
        .await?;
    }
    for sql in [
        format!("DROP PUBLICATION IF EXISTS {PUBLICATION}"),
        format!("DROP TABLE IF EXISTS {TABLE}"),
        format!(
            "CREATE TABLE {TABLE} (id bigint PRIMARY KEY, customer text, total numeric(10,2), \
             placed timestamptz, note text)"
        ),
        format!("CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}"),
        // one transaction per row, as an OLTP writer commits them
        format!(
            "CREATE OR REPLACE PROCEDURE abrq_bench_fill(n bigint) LANGUAGE plpgsql AS $$ \
             BEGIN FOR i IN 1..n LOOP \
               INSERT INTO {TABLE} VALUES (i, 'customer-' || (i % 997), (i % 100000) / 100.0, \
                 now(), repeat('x', 120)); \
               COMMIT; \
             END LOOP; END $$"
        ),
    ] {
        sqlx::query(&sql).execute(&pool).await?;
    }
    for slot in [SLOT_ABRQ, SLOT_RECV] {
        sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
            .bind(slot)
            .execute(&pool)
            .await?;
    }
    let t = Instant::now();
    let mut fill = pool.acquire().await?;
    sqlx::query("SET synchronous_commit = off")
        .execute(&mut *fill)
        .await?;
    sqlx::query("CALL abrq_bench_fill($1)")
        .bind(args.changes as i64)
        .execute(&mut *fill)
        .await?;
    drop(fill);
    let end: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&pool)
        .await?;
    println!(
        "wrote {} single-row transactions in {:.1}s; WAL up to {end}",
        args.changes,
        t.elapsed().as_secs_f64()
    );

    let recv = pg_recvlogical(&args.url, &end)?;
    println!("pg_recvlogical to /dev/null: {recv:.2}s");
    let work = tempfile::tempdir()?;
    let ours = abrq_run(&args.url, args.changes, work.path()).await?;
    println!("abrq to spool and local jsonl: {ours:.2}s");

    let n = args.changes as f64;
    println!();
    println!(
        "| postgres cdc, {} single-row insert transactions | s | changes/s |",
        args.changes
    );
    println!("|---|---|---|");
    println!(
        "| pg_recvlogical, pgoutput to /dev/null | {recv:.2} | {:.0} |",
        n / recv
    );
    println!(
        "| abrq, slot to spool to local jsonl (durable at both ends) | {ours:.2} | {:.0} |",
        n / ours
    );
    println!("| ratio | {:.2} | |", recv / ours);

    for slot in [SLOT_ABRQ, SLOT_RECV] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while sqlx::query("SELECT pg_drop_replication_slot($1)")
            .bind(slot)
            .execute(&pool)
            .await
            .is_err()
        {
            anyhow::ensure!(Instant::now() < deadline, "slot {slot} stays active");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if args.latency_secs > 0 {
        latency(&args, &pool).await?;
    }
    if args.snapshot_rows > 0 {
        snapshot(&args, &pool).await?;
    }
    sqlx::query(&format!("DROP PUBLICATION {PUBLICATION}"))
        .execute(&pool)
        .await?;
    sqlx::query(&format!("DROP TABLE {TABLE}"))
        .execute(&pool)
        .await?;
    Ok(())
}

/// Commit on the source to delivered at a local destination, per change,
/// at a steady rate: a writer commits single-row transactions on a fixed
/// schedule and notes when each commit returned; a watcher notes when the
/// destination's delivered count passed each change (one destination
/// delivers in order).
async fn latency(args: &CdcArgs, pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query(&format!("TRUNCATE {TABLE}"))
        .execute(pool)
        .await?;
    let work = tempfile::tempdir()?;
    let engine = start_engine(&args.url, work.path(), "10ms").await?;
    // the slot exists once the source has started streaming
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = engine.status().await?;
        let copying = st[0]
            .source
            .position
            .as_ref()
            .and_then(|p| p["snapshot"]["state"].as_str().map(str::to_string));
        if copying.as_deref() == Some("done") {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the source did not start: {:?}",
            st[0].source
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = args.latency_rate * args.latency_secs;
    let rate = args.latency_rate;
    // durable commits (synchronous_commit on, as OLTP writers run), from
    // several sessions so the server can group them; change i is due at
    // i / rate, whichever session sends it
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
                    "INSERT INTO {TABLE} VALUES ($1, 'c', 1, now(), 'latency')"
                ))
                .bind(i as i64 + 1)
                .execute(&mut *conn)
                .await?;
                committed.push(Instant::now());
            }
            anyhow::Ok(committed)
        }));
    }
    // the destination delivers in commit order: the n-th record delivered
    // is the n-th committed
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
    // the server lets go of the slot a moment after the session ends
    let deadline = Instant::now() + Duration::from_secs(10);
    while sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(SLOT_ABRQ)
        .execute(pool)
        .await
        .is_err()
    {
        anyhow::ensure!(Instant::now() < deadline, "slot {SLOT_ABRQ} stays active");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ms: Vec<f64> = committed
        .iter()
        .zip(&delivered_at)
        .map(|(c, d)| d.saturating_duration_since(*c).as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    let achieved = total as f64
        / committed
            .last()
            .zip(committed.first())
            .map_or(1.0, |(l, f)| l.duration_since(*f).as_secs_f64().max(1e-9));
    println!();
    println!(
        "| commit to delivered at local jsonl, {} changes at {}/s (achieved {achieved:.0}/s) from {WRITERS} sessions, synchronous_commit on, max_wait 10ms | ms |",
        total, args.latency_rate
    );
    println!("|---|---|");
    println!("| p50 | {:.1} |", at(0.50));
    println!("| p99 | {:.1} |", at(0.99));
    println!("| max | {:.1} |", at(1.0));
    Ok(())
}

/// The initial copy of an existing table against `COPY (SELECT ...) TO
/// STDOUT` of the same table by psql to /dev/null.
async fn snapshot(args: &CdcArgs, pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query(&format!("TRUNCATE {TABLE}"))
        .execute(pool)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO {TABLE} SELECT i, 'customer-' || (i % 997), (i % 100000) / 100.0, now(), \
         repeat('x', 120) FROM generate_series(1, $1) AS i"
    ))
    .bind(args.snapshot_rows as i64)
    .execute(pool)
    .await?;
    sqlx::query(&format!("VACUUM ANALYZE {TABLE}"))
        .execute(pool)
        .await?;
    let tck = crate::proc_stat::clk_tck();
    // the copy's backends are gone by the end of a run: the server's
    // share is the machine's busy time less abrq's
    let cpu = || {
        let ours = crate::proc_stat::cpu_of(std::process::id());
        let busy = crate::proc_stat::cpu_ticks().map_or(0, |(busy, _)| busy);
        (ours, busy as f64)
    };
    let mut copies = Vec::new();
    // the server's own copy in as many parts, at once, for each count
    let mut parallel: Vec<Vec<f64>> = vec![Vec::new(); args.snapshot_connections.len()];
    let mut ours: Vec<Vec<f64>> = vec![Vec::new(); args.snapshot_connections.len()];
    // CPU seconds of abrq and of the server, per run
    let mut cpu_used: Vec<Vec<(f64, f64)>> = vec![Vec::new(); args.snapshot_connections.len()];
    for _ in 0..args.rounds.max(1) {
        let t = Instant::now();
        let status = Command::new("psql")
            .args([&args.url, "-qAt", "-c"])
            .arg(format!("COPY (SELECT * FROM {TABLE}) TO STDOUT"))
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "psql failed: {status}");
        copies.push(t.elapsed().as_secs_f64());
        for (i, &connections) in args.snapshot_connections.iter().enumerate() {
            if connections > 1 {
                parallel[i].push(psql_in_parts(&args.url, pool, connections).await?);
            }
            let work = tempfile::tempdir()?;
            let (ours_before, busy_before) = cpu();
            let t = Instant::now();
            let engine = start_engine_with(
                &args.url,
                work.path(),
                "50ms",
                "initial",
                10_000,
                connections,
            )
            .await?;
            delivered(&engine, args.snapshot_rows).await?;
            ours[i].push(t.elapsed().as_secs_f64());
            let (ours_after, busy_after) = cpu();
            let ours_cpu = (ours_after - ours_before) / tck;
            let rest_cpu = (busy_after - busy_before) / tck - ours_cpu;
            cpu_used[i].push((ours_cpu, rest_cpu));
            engine.shutdown().await;
            drop_slot(pool, SLOT_ABRQ).await?;
        }
    }
    for (i, connections) in args.snapshot_connections.iter().enumerate() {
        crate::snapshot_table(
            args.snapshot_rows,
            "psql: COPY (SELECT ...) TO STDOUT > /dev/null",
            &copies,
            &format!(
                "abrq: slot with snapshot, COPY streamed on {connections} connection(s) in pages \
                 of 10,000, spool, local jsonl"
            ),
            &ours[i],
        );
        if !parallel[i].is_empty() {
            let (peer, abrq) = (
                crate::median(parallel[i].clone()),
                crate::median(ours[i].clone()),
            );
            println!(
                "| psql: {connections} COPYs of the key's ranges at once > /dev/null | {} (median {peer:.2}) | ratio {:.2} |",
                parallel[i].iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
                peer / abrq
            );
        }
        let each: Vec<String> = cpu_used[i]
            .iter()
            .map(|(a, s)| format!("{a:.2} + {s:.2}"))
            .collect();
        println!(
            "| CPU s per run, abrq + the rest of the machine, {connections} connection(s) | {} | |",
            each.join(", ")
        );
    }
    Ok(())
}

/// Seconds for `parts` psql processes to copy the table's rows at once,
/// each one range of its key, to /dev/null: the server's own copy in
/// parts.
async fn psql_in_parts(url: &str, pool: &PgPool, parts: usize) -> anyhow::Result<f64> {
    let fractions: Vec<f64> = (1..parts).map(|i| i as f64 / parts as f64).collect();
    let bounds: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT percentile_disc($1::float8[]) WITHIN GROUP (ORDER BY id) FROM {TABLE}"
    ))
    .bind(&fractions)
    .fetch_one(pool)
    .await?;
    let lows = std::iter::once(None).chain(bounds.iter().copied().map(Some));
    let highs = bounds
        .iter()
        .copied()
        .map(Some)
        .chain(std::iter::once(None));
    let t = Instant::now();
    let mut running = Vec::new();
    for (low, high) in lows.zip(highs) {
        let mut filter = Vec::new();
        filter.extend(low.map(|l| format!("id > {l}")));
        filter.extend(high.map(|h| format!("id <= {h}")));
        let sql = format!(
            "COPY (SELECT * FROM {TABLE} WHERE {} ORDER BY id) TO STDOUT",
            filter.join(" AND ")
        );
        running.push(
            Command::new("psql")
                .args([url, "-qAt", "-c", &sql])
                .stdout(std::process::Stdio::null())
                .spawn()?,
        );
    }
    for mut child in running {
        let status = child.wait()?;
        anyhow::ensure!(status.success(), "psql failed: {status}");
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Drops a slot once the server has let go of it.
async fn drop_slot(pool: &PgPool, slot: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(slot)
        .execute(pool)
        .await
        .is_err()
    {
        anyhow::ensure!(Instant::now() < deadline, "slot {slot} stays active");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The server's pg_recvlogical (Debian keeps it off PATH).
fn recvlogical_binary() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.into_iter()
        .rev()
        .map(|d| d.join("pg_recvlogical"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("pg_recvlogical"))
}

/// Seconds for pg_recvlogical to read the slot up to `end`.
fn pg_recvlogical(url: &str, end: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let status = Command::new(recvlogical_binary())
        .args([
            "-d",
            url,
            "--slot",
            SLOT_RECV,
            "--start",
            "-o",
            "proto_version=1",
        ])
        .args(["-o", &format!("publication_names={PUBLICATION}")])
        .args(["-f", "/dev/null", "-E", end, "--no-loop"])
        .status()?;
    anyhow::ensure!(status.success(), "pg_recvlogical failed: {status}");
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds for abrq to stage and deliver all `changes`.
async fn abrq_run(url: &str, changes: u64, work: &Path) -> anyhow::Result<f64> {
    let start = Instant::now();
    let engine = start_engine(url, work, "50ms").await?;
    delivered(&engine, changes).await?;
    let secs = start.elapsed().as_secs_f64();
    engine.shutdown().await;
    Ok(secs)
}

/// Waits until the destination has delivered `records`; a source that
/// fails ends the wait.
async fn delivered(engine: &Engine, records: u64) -> anyhow::Result<()> {
    loop {
        let st = engine.status().await?;
        if st[0].destinations[0].delivered_records >= records {
            return Ok(());
        }
        if let Some(e) = &st[0].source.error {
            anyhow::bail!("source failed: {e}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An engine with the cdc source on the bench slot and a local jsonl
/// destination.
async fn start_engine(url: &str, work: &Path, max_wait: &str) -> anyhow::Result<Arc<Engine>> {
    start_engine_with(url, work, max_wait, "never", 1000, 1).await
}

async fn start_engine_with(
    url: &str,
    work: &Path,
    max_wait: &str,
    snapshot: &str,
    max_records: u64,
    snapshot_connections: usize,
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
engine = "postgres"
mode = "cdc"
host = "{host}"
port = {port}
database = "{db}"
username = "{user}"
table = "{TABLE}"
slot = "{SLOT_ABRQ}"
publication = "{PUBLICATION}"
snapshot = "{snapshot}"
snapshot_connections = {snapshot_connections}
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
        port = u.port().unwrap_or(5432),
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
