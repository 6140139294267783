//! `abrq verify` on a table of `--rows` rows (PostgreSQL, source and
//! replica schemas on one server) against the plain way to the same
//! answer: `COUNT(*)` and an `md5` over every row in key order, on both
//! sides at once. Three cases: equal tables, and a replica with ten
//! corrupted rows (three deleted, five changed, two added), which verify
//! must also name.

use std::sync::Mutex;
use std::time::Instant;

use abrq_core::config::Config;
use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use clap::Args;

#[derive(Args)]
pub struct VerifyArgs {
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// A database the user may create schemas in.
    #[arg(
        long,
        env = "ABRQ_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres_url: String,
}

const SRC: &str = "abrq_bench_verify_src";
const DST: &str = "abrq_bench_verify_dst";

/// Nothing is in flight: the tables are still.
struct Still;

#[async_trait::async_trait]
impl abrq_verify::Pipeline for Still {
    async fn settle(&self) -> Result<(), String> {
        Ok(())
    }
    async fn backfill(&self, _: &str, _: &str) -> Result<(), String> {
        Err("the benchmark does not repair".into())
    }
}

fn plan(url: &str) -> anyhow::Result<abrq_verify::Plan> {
    let u = reqwest::Url::parse(url)?;
    let fields = format!(
        "host = \"{}\"\nport = {}\nusername = \"{}\"\ndatabase = \"{}\"\n",
        u.host_str().unwrap_or("127.0.0.1"),
        u.port().unwrap_or(5432),
        u.username(),
        u.path().trim_start_matches('/'),
    );
    let text = format!(
        "[[streams]]\nname = \"bench\"\n[streams.source]\nengine = \"postgres\"\nmode = \"cdc\"\n\
         {fields}table = \"{SRC}.t\"\n\
         [[streams.destinations]]\nname = \"replica\"\nengine = \"postgres\"\n{fields}\
         schema = \"{DST}\"\ntable = \"t\"\nmode = \"upsert\"\n"
    );
    let config = Config::parse(&text, "bench")?;
    let s = config.streams[0].get_ref();
    abrq_verify::Plan::new("bench", s.source.get_ref(), s.destinations[0].get_ref())
        .map_err(anyhow::Error::msg)
}

/// `COUNT(*)` then a full md5 in key order, on both sides at once.
async fn plain(pool: &PgPool) -> anyhow::Result<(f64, bool)> {
    let side = |schema: &'static str| async move {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {schema}.t"))
            .fetch_one(pool)
            .await?;
        let h: String = sqlx::query_scalar(&format!(
            "SELECT md5(string_agg(md5(t::text), '' ORDER BY id)) FROM {schema}.t"
        ))
        .fetch_one(pool)
        .await?;
        Ok::<_, sqlx::Error>((n, h))
    };
    let start = Instant::now();
    let (a, b) = tokio::join!(side(SRC), side(DST));
    let secs = start.elapsed().as_secs_f64();
    Ok((secs, a? == b?))
}

/// abrq verify: seconds and the differences it named.
async fn verify(plan: &abrq_verify::Plan) -> anyhow::Result<(f64, usize, u64)> {
    let report = Mutex::new(abrq_verify::Report::started("bench", "replica", false));
    let start = Instant::now();
    abrq_verify::run(plan, None, false, &Still, &report)
        .await
        .map_err(anyhow::Error::msg)?;
    let secs = start.elapsed().as_secs_f64();
    let r = report.into_inner().unwrap_or_else(|p| p.into_inner());
    let t = r
        .tables
        .first()
        .ok_or(anyhow::anyhow!("no table compared"))?;
    if let Some(e) = &t.error {
        anyhow::bail!("verify: {e}");
    }
    Ok((secs, t.differences.len(), t.ranges))
}

pub async fn run(a: VerifyArgs) -> anyhow::Result<()> {
    let pool = PgPool::connect(&a.postgres_url).await?;
    for sql in [
        format!("DROP SCHEMA IF EXISTS {SRC} CASCADE"),
        format!("DROP SCHEMA IF EXISTS {DST} CASCADE"),
        format!("CREATE SCHEMA {SRC}"),
        format!("CREATE SCHEMA {DST}"),
        format!(
            "CREATE TABLE {SRC}.t (id bigint PRIMARY KEY, name text, amount numeric(12,2), \
             at timestamptz, doc jsonb)"
        ),
        format!(
            "INSERT INTO {SRC}.t SELECT g, 'customer ' || g, g * 0.37, \
             timestamptz '2026-01-01' + g * interval '1 second', \
             jsonb_build_object('g', g, 'tags', jsonb_build_array('a', 'b')) \
             FROM generate_series(1, {}) AS g",
            a.rows
        ),
        format!("CREATE TABLE {DST}.t (LIKE {SRC}.t INCLUDING ALL)"),
        format!("INSERT INTO {DST}.t SELECT * FROM {SRC}.t"),
        format!("VACUUM ANALYZE {SRC}.t"),
        format!("VACUUM ANALYZE {DST}.t"),
    ] {
        sqlx::query(&sql).execute(&pool).await?;
    }
    let plan = plan(&a.postgres_url)?;
    println!(
        "| {} rows, PostgreSQL source and replica on one server | seconds (median of {}) | ratio to COUNT(*) + full md5 |",
        a.rows, a.rounds
    );
    println!("|---|---|---|");
    let mut base = Vec::new();
    let mut equal = Vec::new();
    for _ in 0..a.rounds {
        let (s, same) = plain(&pool).await?;
        anyhow::ensure!(same, "the plain check found the copies different");
        base.push(s);
        let (s, diffs, _) = verify(&plan).await?;
        anyhow::ensure!(
            diffs == 0,
            "verify found {diffs} differences in equal tables"
        );
        equal.push(s);
    }
    let base = super::median(base);
    let equal = super::median(equal);
    println!("| COUNT(*) + md5 of every row, both sides at once | {base:.2} | 1.00 |");
    println!(
        "| abrq verify, equal tables | {equal:.2} | {:.2} |",
        equal / base
    );
    let n = a.rows;
    for sql in [
        format!("DELETE FROM {DST}.t WHERE id IN (7, {}, {})", n / 2, n - 1),
        format!(
            "UPDATE {DST}.t SET name = 'x' WHERE id IN (11, {}, {}, {}, {})",
            n / 3,
            n / 4,
            n / 5,
            n
        ),
        format!("INSERT INTO {DST}.t (id) VALUES ({}), ({})", n + 10, n + 20),
    ] {
        sqlx::query(&sql).execute(&pool).await?;
    }
    let mut corrupt = Vec::new();
    let mut ranges = 0;
    for _ in 0..a.rounds {
        let (s, diffs, r) = verify(&plan).await?;
        anyhow::ensure!(diffs == 10, "verify named {diffs} of the 10 corrupted rows");
        corrupt.push(s);
        ranges = r;
    }
    let corrupt = super::median(corrupt);
    println!(
        "| abrq verify, 10 rows corrupted (named: 10 of 10, {ranges} ranges checksummed) | {corrupt:.2} | {:.2} |",
        corrupt / base
    );
    for sql in [
        format!("DROP SCHEMA {SRC} CASCADE"),
        format!("DROP SCHEMA {DST} CASCADE"),
    ] {
        sqlx::query(&sql).execute(&pool).await?;
    }
    Ok(())
}
