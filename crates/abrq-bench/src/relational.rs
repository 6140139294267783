//! The postgres and mysql destinations against the physical limit on the
//! same server in the same run: the same 1,000-row batches of the same
//! records, each batch one durable commit, through
//! - PostgreSQL: the destination; a raw prepared
//!   `INSERT ... SELECT FROM unnest($1, $2, $3)` loop; a raw `COPY` loop;
//! - MySQL: the destination; a raw multi-row `INSERT ... VALUES` loop.
//!
//! The raw loops do only the unavoidable work: pull the values out of the
//! records, send them, commit. The destination also checks and writes its
//! ledger row, applies the drift policy and opens an explicit transaction.

use std::str::FromStr;
use std::time::Instant;

use abrq_core::config::Config;
use abrq_core::{Batch, Destination};
use abrq_sinks::relational::sqlx::{self, mysql::MySqlPool, postgres::PgPool};
use clap::Args;
use serde_json::{Map, Value};

#[derive(Args)]
pub struct RelationalArgs {
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// A database the user may create schemas in.
    #[arg(
        long,
        env = "ABRQ_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres_url: String,
    /// A user that may create databases.
    #[arg(
        long,
        env = "ABRQ_TEST_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    mysql_url: String,
    /// Skip MySQL (or PostgreSQL) when that server is not there.
    #[arg(long)]
    skip_mysql: bool,
    #[arg(long)]
    skip_postgres: bool,
}

const BATCH: usize = 1000;

pub async fn run(a: RelationalArgs) -> anyhow::Result<()> {
    let records: Vec<Map<String, Value>> = (0..a.records).map(|i| super::record(i, 200)).collect();
    let batches: Vec<Batch> = records
        .chunks(BATCH)
        .enumerate()
        .map(|(i, rs)| super::batch_of(i as u64 + 1, rs.to_vec()))
        .collect();
    let n = a.records as f64;
    println!(
        "| {} records of 200 bytes, batches of {BATCH}, one commit each | rows/s | ratio |",
        a.records
    );
    println!("|---|---|---|");
    if !a.skip_postgres {
        let (mut unnest, mut copy, mut ours) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..a.rounds {
            let pg = PgPool::connect(&a.postgres_url).await?;
            let schema = format!("abrq_bench_{}_{round}", std::process::id());
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(&pg)
                .await?;
            let t = |name: &str| format!("{schema}.{name}");
            for name in ["raw_unnest", "raw_copy"] {
                sqlx::query(&format!(
                    "CREATE TABLE {} (id bigint, kind text, text text)",
                    t(name)
                ))
                .execute(&pg)
                .await?;
            }
            let u = pg_unnest(&pg, &t("raw_unnest"), &records).await?;
            let c = pg_copy(&pg, &t("raw_copy"), &records).await?;
            let dest = destination("postgres", &a.postgres_url, Some(&schema), "dest")?;
            let o = deliver(dest.as_ref(), &batches).await?;
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&pg)
                .await?;
            eprintln!(
                "postgres round {round}: unnest {:.0}/s, copy {:.0}/s, destination {:.0}/s",
                n / u,
                n / c,
                n / o
            );
            unnest.push(n / u);
            copy.push(n / c);
            ours.push(n / o);
        }
        let (u, c, o) = (
            super::median(unnest),
            super::median(copy),
            super::median(ours),
        );
        println!("| postgres: raw prepared INSERT ... SELECT FROM unnest | {u:.0} | 1.00 |");
        println!("| postgres: raw COPY | {c:.0} | {:.2} |", c / u);
        println!(
            "| postgres: destination / unnest loop (target >= 0.8) | {o:.0} | {:.2} |",
            o / u
        );
        println!(
            "| postgres: destination / COPY (target >= 0.5) | {o:.0} | {:.2} |",
            o / c
        );
    }
    if !a.skip_mysql {
        let (mut raw, mut ours) = (Vec::new(), Vec::new());
        for round in 0..a.rounds {
            let admin = MySqlPool::connect(&a.mysql_url).await?;
            let db = format!("abrq_bench_{}_{round}", std::process::id());
            sqlx::query(&format!("CREATE DATABASE {db}"))
                .execute(&admin)
                .await?;
            let table = format!("{db}.raw_insert");
            sqlx::query(&format!(
                "CREATE TABLE {table} (id bigint, kind longtext, text longtext)"
            ))
            .execute(&admin)
            .await?;
            let r = mysql_insert(&admin, &table, &records).await?;
            let dest = destination("mysql", &a.mysql_url, Some(&db), "dest")?;
            let o = deliver(dest.as_ref(), &batches).await?;
            sqlx::query(&format!("DROP DATABASE {db}"))
                .execute(&admin)
                .await?;
            eprintln!(
                "mysql round {round}: multi-row insert {:.0}/s, destination {:.0}/s",
                n / r,
                n / o
            );
            raw.push(n / r);
            ours.push(n / o);
        }
        let (r, o) = (super::median(raw), super::median(ours));
        println!("| mysql: raw multi-row INSERT ... VALUES | {r:.0} | 1.00 |");
        println!(
            "| mysql: destination / raw loop (target >= 0.8) | {o:.0} | {:.2} |",
            o / r
        );
    }
    Ok(())
}

/// The destination as an operator configures it, from the server URL.
fn destination(
    engine: &str,
    url: &str,
    schema: Option<&str>,
    table: &str,
) -> anyhow::Result<std::sync::Arc<dyn Destination>> {
    let u = reqwest::Url::from_str(url)?;
    let mut fields = format!(
        "host = \"{}\"\nport = {}\nusername = \"{}\"\ntable = \"{table}\"\n",
        u.host_str().unwrap_or("127.0.0.1"),
        u.port()
            .unwrap_or(if engine == "postgres" { 5432 } else { 3306 }),
        u.username(),
    );
    if let Some(p) = u.password() {
        fields.push_str(&format!("password = \"{p}\"\n"));
    }
    let db = u.path().trim_start_matches('/');
    match (engine, schema) {
        ("postgres", Some(s)) => {
            fields.push_str(&format!("database = \"{db}\"\nschema = \"{s}\"\n"))
        }
        (_, Some(s)) => fields.push_str(&format!("database = \"{s}\"\n")),
        (_, None) => fields.push_str(&format!("database = \"{db}\"\n")),
    }
    let d = Config::destination("db", &format!("engine = \"{engine}\"\n{fields}"))?;
    Ok(abrq_sinks::build("bench", &d)?)
}

async fn deliver(d: &dyn Destination, batches: &[Batch]) -> anyhow::Result<f64> {
    let start = Instant::now();
    for b in batches {
        d.deliver(b)
            .await
            .map_err(|e| anyhow::anyhow!(e.describe()))?;
    }
    Ok(start.elapsed().as_secs_f64())
}

fn columns(rs: &[Map<String, Value>]) -> (Vec<i64>, Vec<&str>, Vec<&str>) {
    let ids = rs
        .iter()
        .map(|r| r["id"].as_i64().unwrap_or_default())
        .collect();
    let kinds = rs
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default())
        .collect();
    let texts = rs
        .iter()
        .map(|r| r["text"].as_str().unwrap_or_default())
        .collect();
    (ids, kinds, texts)
}

async fn pg_unnest(
    pg: &PgPool,
    table: &str,
    records: &[Map<String, Value>],
) -> anyhow::Result<f64> {
    let sql = format!("INSERT INTO {table} (id, kind, text) SELECT * FROM unnest($1::int8[], $2::text[], $3::text[])");
    let start = Instant::now();
    for rs in records.chunks(BATCH) {
        let (ids, kinds, texts) = columns(rs);
        sqlx::query(&sql)
            .bind(ids)
            .bind(kinds)
            .bind(texts)
            .execute(pg)
            .await?;
    }
    Ok(start.elapsed().as_secs_f64())
}

async fn pg_copy(pg: &PgPool, table: &str, records: &[Map<String, Value>]) -> anyhow::Result<f64> {
    let sql = format!("COPY {table} (id, kind, text) FROM STDIN");
    let mut conn = pg.acquire().await?;
    let start = Instant::now();
    let mut buf = Vec::with_capacity(256 << 10);
    for rs in records.chunks(BATCH) {
        buf.clear();
        let (ids, kinds, texts) = columns(rs);
        for i in 0..rs.len() {
            buf.extend_from_slice(ids[i].to_string().as_bytes());
            for v in [kinds[i], texts[i]] {
                buf.push(b'\t');
                copy_escape(&mut buf, v);
            }
            buf.push(b'\n');
        }
        let mut copy = conn.copy_in_raw(&sql).await?;
        copy.send(buf.as_slice()).await?;
        copy.finish().await?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// COPY text format: backslash, tab, newline and carriage return escaped.
fn copy_escape(out: &mut Vec<u8>, s: &str) {
    for b in s.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

async fn mysql_insert(
    my: &MySqlPool,
    table: &str,
    records: &[Map<String, Value>],
) -> anyhow::Result<f64> {
    let start = Instant::now();
    for rs in records.chunks(BATCH) {
        let sql = format!(
            "INSERT INTO {table} (id, kind, text) VALUES {}",
            vec!["(?, ?, ?)"; rs.len()].join(", ")
        );
        let (ids, kinds, texts) = columns(rs);
        let mut q = sqlx::query(&sql);
        for i in 0..rs.len() {
            q = q.bind(ids[i]).bind(kinds[i]).bind(texts[i]);
        }
        q.execute(my).await?;
    }
    Ok(start.elapsed().as_secs_f64())
}
