//! End to end, an NDJSON file into PostgreSQL, against what a user would
//! run instead on the same server in the same run: `psql \copy` of the
//! same rows as CSV, the server's own bulk load path (the physical limit).
//! abrq's side is the whole engine: the file source, the durable spool,
//! the drain loop and the postgres destination with its ledger row per
//! batch, durable at both ends. Rounds alternate the two; every run's row
//! count is checked.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use clap::Args;

#[derive(Args)]
pub struct FilePostgresArgs {
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Records per batch on abrq's side.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
    /// A database the user may create schemas in.
    #[arg(
        long,
        env = "ABRQ_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres_url: String,
}

pub async fn run(a: FilePostgresArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ndjson = dir.path().join("input.ndjson");
    let csv = dir.path().join("input.csv");
    {
        let mut j = std::io::BufWriter::new(std::fs::File::create(&ndjson)?);
        let mut c = csv::Writer::from_path(&csv)?;
        for i in 0..a.records {
            let r = super::record(i, 219);
            serde_json::to_writer(&mut j, &r)?;
            j.write_all(b"\n")?;
            let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            c.write_record([i.to_string(), text("kind"), text("text")])?;
        }
        j.flush()?;
        c.flush()?;
    }
    let pg = PgPool::connect(&a.postgres_url).await?;
    let (mut copy, mut ours) = (Vec::new(), Vec::new());
    for round in 0..a.rounds {
        let schema = format!("abrq_e2e_{}_{round}", std::process::id());
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&pg)
            .await?;
        sqlx::query(&format!(
            "CREATE TABLE {schema}.copied (id bigint, kind text, text text)"
        ))
        .execute(&pg)
        .await?;
        let c = psql_copy(&a.postgres_url, &format!("{schema}.copied"), &csv)?;
        let work = tempfile::tempdir()?;
        let o = abrq_run(&a, &ndjson, work.path(), &schema).await?;
        for table in ["copied", "events"] {
            let (n,): (i64,) = sqlx::query_as(&format!("SELECT count(*) FROM {schema}.{table}"))
                .fetch_one(&pg)
                .await?;
            anyhow::ensure!(n as u64 == a.records, "{schema}.{table} has {n} rows");
        }
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&pg)
            .await?;
        let n = a.records as f64;
        println!(
            "round {round}: psql \\copy {:.0} rows/s, abrq {:.0} rows/s",
            n / c,
            n / o
        );
        copy.push(n / c);
        ours.push(n / o);
    }
    let (c, o) = (super::median(copy), super::median(ours));
    println!();
    println!(
        "| file to PostgreSQL, {} records of 219 bytes | rows/s | abrq is |",
        a.records
    );
    println!("|---|---|---|");
    println!(
        "| `psql \\copy` of the same rows as CSV | {c:.0} | {:.2}x of it |",
        o / c
    );
    println!("| abrq, batches of {} | {o:.0} | |", a.batch);
    Ok(())
}

/// Seconds for `psql -c "\copy table FROM file CSV"`, the process included.
fn psql_copy(url: &str, table: &str, csv: &Path) -> anyhow::Result<f64> {
    let start = Instant::now();
    let out = std::process::Command::new("psql")
        .arg(url)
        .arg("-v")
        .arg("ON_ERROR_STOP=1")
        .arg("-c")
        .arg(format!("\\copy {table} FROM '{}' CSV", csv.display()))
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(start.elapsed().as_secs_f64())
}

async fn abrq_run(
    a: &FilePostgresArgs,
    input: &Path,
    work: &Path,
    schema: &str,
) -> anyhow::Result<f64> {
    let u = reqwest::Url::parse(&a.postgres_url)?;
    let text = super::file_stream_config(work, input)
        + &format!(
            r#"
[streams.batch]
max_records = {batch}
[[streams.destinations]]
name = "db"
engine = "postgres"
host = "{host}"
port = {port}
database = "{database}"
username = "{user}"
schema = "{schema}"
table = "events"
"#,
            batch = a.batch,
            host = u.host_str().unwrap_or("127.0.0.1"),
            port = u.port().unwrap_or(5432),
            database = u.path().trim_start_matches('/'),
            user = u.username(),
        );
    super::run_until_drained(&text, work).await
}
