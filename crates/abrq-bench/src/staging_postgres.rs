//! Staging on PostgreSQL state: the state store's `stage` (payload
//! encoding, one durable transaction per 1,000-record batch with its
//! cursor, the stream row locked for a gapless seq) against a raw loop
//! inserting the same rows into the same server, one transaction per
//! batch, each batch one `INSERT ... SELECT FROM unnest(...)`.

use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use abrq_state::{source_resource, LeaseStore, NewBatch, NodeIdentity, PostgresStore, SpoolWrite};
use clap::Args;

#[derive(Args)]
pub struct StagingPostgresArgs {
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// A server where the user may create databases; each round uses a
    /// fresh one.
    #[arg(
        long,
        env = "ABRQ_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    url: String,
}

const BATCH: usize = 1000;
const DATABASE: &str = "abrq_bench_state";

pub async fn run(a: StagingPostgresArgs) -> anyhow::Result<()> {
    let lines: Vec<String> = (0..a.records)
        .map(|i| serde_json::to_string(&super::record(i, 200)).expect("json"))
        .collect();
    let admin = PgPool::connect(&a.url).await?;
    let url = with_database(&a.url, DATABASE)?;
    let (mut raw, mut ours) = (Vec::new(), Vec::new());
    for round in 0..a.rounds {
        fresh_database(&admin).await?;
        // alternate which goes first, so neither always meets a warm cache
        let (r, o) = if round % 2 == 0 {
            let r = raw_loop(&url, &lines).await?;
            (r, abrq_stage(&url, &lines).await?)
        } else {
            let o = abrq_stage(&url, &lines).await?;
            (raw_loop(&url, &lines).await?, o)
        };
        println!("round {round}: raw {r:.0} records/s, abrq {o:.0} records/s");
        raw.push(r);
        ours.push(o);
    }
    sqlx::query(&format!("DROP DATABASE IF EXISTS {DATABASE}"))
        .execute(&admin)
        .await?;
    let (r, o) = (super::median(raw), super::median(ours));
    println!();
    println!("| staging on PostgreSQL state, 200-byte records, batches of 1,000 | records/s |");
    println!("|---|---|");
    println!("| raw insert loop (unnest, one transaction per batch) | {r:.0} |");
    println!("| abrq spool staging | {o:.0} |");
    println!("| ratio | {:.2} |", o / r);
    Ok(())
}

fn with_database(url: &str, db: &str) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url)?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}

async fn fresh_database(admin: &PgPool) -> anyhow::Result<()> {
    sqlx::query(&format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"))
        .execute(admin)
        .await?;
    sqlx::query(&format!("CREATE DATABASE {DATABASE}"))
        .execute(admin)
        .await?;
    Ok(())
}

async fn raw_loop(url: &str, lines: &[String]) -> anyhow::Result<f64> {
    let pool = PgPool::connect(url).await?;
    sqlx::query("CREATE TABLE raw_rows (seq bigint, idx int, body text, PRIMARY KEY (seq, idx))")
        .execute(&pool)
        .await?;
    let start = Instant::now();
    for (seq, chunk) in lines.chunks(BATCH).enumerate() {
        let idx: Vec<i32> = (0..chunk.len() as i32).collect();
        let mut tx = pool.begin().await?;
        sqlx::query(
            "INSERT INTO raw_rows (seq, idx, body) SELECT $1, i, b FROM unnest($2::int[], $3::text[]) AS t(i, b)",
        )
        .bind(seq as i64)
        .bind(&idx)
        .bind(chunk)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    }
    let rate = lines.len() as f64 / start.elapsed().as_secs_f64();
    pool.close().await;
    Ok(rate)
}

/// Staged as a source holding its lease does: through the fenced handle,
/// each transaction checking the lease first.
async fn abrq_stage(url: &str, lines: &[String]) -> anyhow::Result<f64> {
    let shared = PostgresStore::connect(url).await?;
    shared.register_stream("bench").await?;
    let node = NodeIdentity {
        node_id: "bench".into(),
        instance: uuid::Uuid::new_v4(),
    };
    let fence = shared
        .claim(&source_resource("bench"), &node, Duration::from_secs(600))
        .await?
        .ok_or_else(|| anyhow::anyhow!("the bench's lease is held elsewhere"))?;
    let store = shared.fenced(fence);
    let batches = super::staging::parsed_batches(lines, BATCH);
    let start = Instant::now();
    for (i, (items, bytes)) in batches.into_iter().enumerate() {
        let b = NewBatch::from_items(&items, bytes)?;
        let cursor = format!("{}", (i + 1) * BATCH);
        store.stage("bench", vec![b], Some(cursor), None).await?;
    }
    Ok(lines.len() as f64 / start.elapsed().as_secs_f64())
}
