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
}

const TABLE: &str = "abrq_bench_cdc";
const PUBLICATION: &str = "abrq_bench_cdc";
const SLOT_ABRQ: &str = "abrq_bench_cdc_abrq";
const SLOT_RECV: &str = "abrq_bench_cdc_recv";

pub async fn run(args: CdcArgs) -> anyhow::Result<()> {
    let pool = PgPool::connect(&args.url).await?;
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
        sqlx::query("SELECT pg_drop_replication_slot($1)")
            .bind(slot)
            .execute(&pool)
            .await?;
    }
    sqlx::query(&format!("DROP PUBLICATION {PUBLICATION}"))
        .execute(&pool)
        .await?;
    sqlx::query(&format!("DROP TABLE {TABLE}"))
        .execute(&pool)
        .await?;
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
[streams.batch]
max_records = 1000
max_wait = "50ms"
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
    let start = Instant::now();
    let engine = Engine::start(
        &config,
        store,
        Arc::new(Metrics::new()),
        &crate::destination_factory,
    )
    .await?;
    loop {
        let st = engine.status().await?;
        let delivered: u64 = st[0].destinations[0].delivered_records;
        if delivered >= changes {
            break;
        }
        if let Some(e) = &st[0].source.error {
            anyhow::bail!("source failed: {e}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    engine.shutdown().await;
    Ok(secs)
}
