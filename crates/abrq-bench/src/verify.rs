//! `abrq verify` on a table of `--rows` rows against the plain way to the
//! same answer: `COUNT(*)` and an MD5 over every row in key order, on both
//! sides at once. PostgreSQL (source and replica schemas on one server)
//! and MySQL/MariaDB (two databases on one server). Three cases per
//! engine: equal tables, and a replica with ten corrupted rows (three
//! deleted, five changed, two added), which verify must also name.

use std::sync::Mutex;
use std::time::Instant;

use abrq_core::config::Config;
use abrq_sinks::relational::sqlx::{self, mysql::MySqlPool, postgres::PgPool};
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
    /// A user that may create databases (MariaDB: the sequence engine
    /// makes the rows).
    #[arg(
        long,
        env = "ABRQ_TEST_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    mysql_url: String,
    #[arg(long)]
    skip_mysql: bool,
    #[arg(long)]
    skip_postgres: bool,
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

enum Db {
    Pg(PgPool),
    My(MySqlPool),
}

impl Db {
    fn engine(&self) -> &'static str {
        match self {
            Db::Pg(_) => "postgres",
            Db::My(_) => "mysql",
        }
    }

    async fn run(&self, sql: &str) -> anyhow::Result<()> {
        match self {
            Db::Pg(p) => sqlx::query(sql).execute(p).await.map(|_| ())?,
            Db::My(p) => sqlx::query(sql).execute(p).await.map(|_| ())?,
        }
        Ok(())
    }

    /// The table, its copy as the replica, and their statistics.
    fn setup(&self, rows: u64) -> Vec<String> {
        match self {
            Db::Pg(_) => vec![
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
                     FROM generate_series(1, {rows}) AS g"
                ),
                format!("CREATE TABLE {DST}.t (LIKE {SRC}.t INCLUDING ALL)"),
                format!("INSERT INTO {DST}.t SELECT * FROM {SRC}.t"),
                format!("VACUUM ANALYZE {SRC}.t"),
                format!("VACUUM ANALYZE {DST}.t"),
            ],
            Db::My(_) => vec![
                format!("DROP DATABASE IF EXISTS {SRC}"),
                format!("DROP DATABASE IF EXISTS {DST}"),
                format!("CREATE DATABASE {SRC}"),
                format!("CREATE DATABASE {DST}"),
                format!(
                    "CREATE TABLE {SRC}.t (id bigint PRIMARY KEY, name varchar(64), \
                     amount decimal(12,2), at datetime(6), doc longtext)"
                ),
                format!(
                    "INSERT INTO {SRC}.t SELECT seq, CONCAT('customer ', seq), seq * 0.37, \
                     TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq SECOND, \
                     JSON_OBJECT('g', seq, 'tags', JSON_ARRAY('a', 'b')) FROM seq_1_to_{rows}"
                ),
                format!("CREATE TABLE {DST}.t LIKE {SRC}.t"),
                format!("INSERT INTO {DST}.t SELECT * FROM {SRC}.t"),
                format!("ANALYZE TABLE {SRC}.t"),
                format!("ANALYZE TABLE {DST}.t"),
            ],
        }
    }

    fn teardown(&self) -> Vec<String> {
        let what = match self {
            Db::Pg(_) => "SCHEMA",
            Db::My(_) => "DATABASE",
        };
        let cascade = match self {
            Db::Pg(_) => " CASCADE",
            Db::My(_) => "",
        };
        vec![
            format!("DROP {what} {SRC}{cascade}"),
            format!("DROP {what} {DST}{cascade}"),
        ]
    }

    /// `COUNT(*)`, then an MD5 of every row's MD5 in key order.
    async fn count_and_md5(&self, side: &str) -> anyhow::Result<(i64, String)> {
        Ok(match self {
            Db::Pg(p) => {
                let n = sqlx::query_scalar(&format!("SELECT count(*) FROM {side}.t"))
                    .fetch_one(p)
                    .await?;
                let h = sqlx::query_scalar(&format!(
                    "SELECT md5(string_agg(md5(t::text), '' ORDER BY id)) FROM {side}.t"
                ))
                .fetch_one(p)
                .await?;
                (n, h)
            }
            Db::My(p) => {
                let mut c = p.acquire().await?;
                sqlx::query("SET SESSION group_concat_max_len = 1073741824")
                    .execute(&mut *c)
                    .await?;
                let n = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {side}.t"))
                    .fetch_one(&mut *c)
                    .await?;
                let h: String = sqlx::query_scalar(&format!(
                    "SELECT MD5(GROUP_CONCAT(MD5(CONCAT_WS('|', id, name, amount, at, doc)) \
                     ORDER BY id SEPARATOR '')) FROM {side}.t"
                ))
                .fetch_one(&mut *c)
                .await?;
                (n, h)
            }
        })
    }
}

fn plan(engine: &str, url: &str) -> anyhow::Result<abrq_verify::Plan> {
    let u = reqwest::Url::parse(url)?;
    let fields = format!(
        "host = \"{}\"\nport = {}\nusername = \"{}\"\n",
        u.host_str().unwrap_or("127.0.0.1"),
        u.port()
            .unwrap_or(if engine == "postgres" { 5432 } else { 3306 }),
        u.username(),
    );
    let db = u.path().trim_start_matches('/');
    let (source_db, replica) = match engine {
        "postgres" => (
            format!("database = \"{db}\"\n"),
            format!("database = \"{db}\"\nschema = \"{DST}\"\n"),
        ),
        _ => (String::new(), format!("database = \"{DST}\"\n")),
    };
    let text = format!(
        "[[streams]]\nname = \"bench\"\n[streams.source]\nengine = \"{engine}\"\nmode = \"cdc\"\n\
         {fields}{source_db}table = \"{SRC}.t\"\n\
         [[streams.destinations]]\nname = \"replica\"\nengine = \"{engine}\"\n{fields}{replica}\
         table = \"t\"\nmode = \"upsert\"\n"
    );
    let config = Config::parse(&text, "bench")?;
    let s = config.streams[0].get_ref();
    abrq_verify::Plan::new("bench", s.source.get_ref(), s.destinations[0].get_ref())
        .map_err(anyhow::Error::msg)
}

/// The plain check on both sides at once: seconds, and whether equal.
async fn plain(db: &Db) -> anyhow::Result<(f64, bool)> {
    let start = Instant::now();
    let (a, b) = tokio::join!(db.count_and_md5(SRC), db.count_and_md5(DST));
    let secs = start.elapsed().as_secs_f64();
    Ok((secs, a? == b?))
}

/// abrq verify: seconds, the differences it named, the ranges it summed.
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

async fn one(db: Db, url: &str, a: &VerifyArgs) -> anyhow::Result<()> {
    for sql in db.setup(a.rows) {
        db.run(&sql).await?;
    }
    let plan = plan(db.engine(), url)?;
    let mut base = Vec::new();
    let mut equal = Vec::new();
    for _ in 0..a.rounds {
        let (s, same) = plain(&db).await?;
        anyhow::ensure!(same, "the plain check found the copies different");
        base.push(s);
        let (s, diffs, _) = verify(&plan).await?;
        anyhow::ensure!(
            diffs == 0,
            "verify found {diffs} differences in equal tables"
        );
        equal.push(s);
    }
    let (base, equal) = (super::median(base), super::median(equal));
    let e = db.engine();
    println!("| {e}: COUNT(*) + MD5 of every row, both sides at once | {base:.2} | 1.00 |");
    println!(
        "| {e}: abrq verify, equal tables | {equal:.2} | {:.2} |",
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
        db.run(&sql).await?;
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
        "| {e}: abrq verify, 10 rows corrupted (named: 10 of 10, {ranges} ranges checksummed) | {corrupt:.2} | {:.2} |",
        corrupt / base
    );
    for sql in db.teardown() {
        db.run(&sql).await?;
    }
    Ok(())
}

pub async fn run(a: VerifyArgs) -> anyhow::Result<()> {
    println!(
        "| {} rows, source and replica on one server | seconds (median of {}) | ratio to COUNT(*) + full MD5 |",
        a.rows, a.rounds
    );
    println!("|---|---|---|");
    if !a.skip_postgres {
        let db = Db::Pg(PgPool::connect(&a.postgres_url).await?);
        one(db, &a.postgres_url, &a).await?;
    }
    if !a.skip_mysql {
        let db = Db::My(MySqlPool::connect(&a.mysql_url).await?);
        one(db, &a.mysql_url, &a).await?;
    }
    Ok(())
}
