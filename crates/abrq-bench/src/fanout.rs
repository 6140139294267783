//! `abrq-bench fanout`: one NDJSON file delivered to local (`jsonl.gz`),
//! postgres, kafka and s3 at once, against each of them alone in the same
//! run. Each destination drains on its own, so a fan-out should run at the
//! pace of its slowest destination: the ratio is the fan-out's rows/s over
//! the slowest single route's. Rounds rotate the order of the runs; the
//! postgres table's row count and the local files' line count are checked
//! on every run that has them (kafka and s3 are drained when their
//! high-water marks pass the last batch).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::config::Config;
use abrq_engine::{Engine, Metrics};
use abrq_state::{MarksWrite, SpoolWrite, SqliteStore};

use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use abrq_testkit::{names, S3};

// the whole machine's busy time: the servers' work counts as much as abrq's
use crate::proc_stat::{busy_share, cpu_ticks};
use clap::Args;

#[derive(Args)]
pub struct FanoutArgs {
    #[arg(long, default_value_t = 300_000)]
    records: u64,
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    #[arg(
        long,
        env = "ABRQ_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres_url: String,
    #[arg(
        long,
        env = "ABRQ_TEST_KAFKA_BROKERS",
        default_value = "127.0.0.1:9092"
    )]
    brokers: String,
    /// Runs only this route alone (for a profile), no fan-out.
    #[arg(long)]
    only: Option<String>,
}

const ROUTES: [&str; 4] = ["local", "postgres", "kafka", "s3"];
const ALL: &str = "all four";
/// The source alone: read, parse and stage while the destination is
/// paused. No route can run faster than this.
const SPOOL: &str = "spool";

/// A destination's config section and what to check once it drained.
struct Section {
    toml: String,
    check: Check,
}

enum Check {
    Rows { schema: String },
    Lines { dir: std::path::PathBuf },
    Drained,
}

pub async fn run(a: FanoutArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("input.ndjson");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&input)?);
        for i in 0..a.records {
            serde_json::to_writer(&mut w, &super::record(i, 219))?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
    }
    let pg = PgPool::connect(&a.postgres_url).await?;
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut busies: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut runs: Vec<Vec<&str>> = ROUTES.iter().map(|r| vec![*r]).collect();
    runs.push(ROUTES.to_vec());
    runs.push(vec![SPOOL]);
    if let Some(only) = &a.only {
        runs.retain(|r| r.len() == 1 && r[0] == only);
        anyhow::ensure!(!runs.is_empty(), "--only: one of {ROUTES:?} or {SPOOL}");
    }
    for round in 0..a.rounds {
        // rotate, so no route always runs on the freshest server state
        runs.rotate_left(1);
        for (n, routes) in runs.iter().enumerate() {
            let work = tempfile::tempdir()?;
            if routes == &[SPOOL] {
                let before = cpu_ticks()?;
                let secs = spool_only(&input, work.path(), a.records).await?;
                let busy = busy_share(before, cpu_ticks()?);
                let rate = a.records as f64 / secs;
                println!(
                    "round {round}: spool only {rate:.0} rows/s, machine {:.0}% busy",
                    busy * 100.0
                );
                rates.entry(SPOOL).or_default().push(rate);
                busies.entry(SPOOL).or_default().push(busy);
                continue;
            }
            let mut sections = Vec::new();
            for route in routes {
                let tag = format!("{}_{round}_{n}", std::process::id());
                sections.push(section(&a, &pg, route, &tag, work.path()).await?);
            }
            let text = config(&input, work.path(), &sections);
            let before = cpu_ticks()?;
            let secs = super::run_until_drained(&text, work.path()).await?;
            let busy = busy_share(before, cpu_ticks()?);
            for s in &sections {
                verify(&pg, &s.check, a.records).await?;
            }
            let label = if routes.len() == 1 { routes[0] } else { ALL };
            let rate = a.records as f64 / secs;
            println!(
                "round {round}: {label} {rate:.0} rows/s, machine {:.0}% busy",
                busy * 100.0
            );
            rates.entry(label).or_default().push(rate);
            busies.entry(label).or_default().push(busy);
        }
    }
    if a.only.is_some() {
        return Ok(());
    }
    let median = |k: &str| super::median(rates.get(k).cloned().unwrap_or_default());
    let busy = |k: &str| super::median(busies.get(k).cloned().unwrap_or_default()) * 100.0;
    let slowest = ROUTES
        .iter()
        .map(|r| (*r, median(r)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .unwrap_or(("none", 1.0));
    let together = median(ALL);
    println!();
    println!(
        "| one file of {} records (219 bytes) to | rows/s (median of {}) | machine busy (all processes) |",
        a.records, a.rounds
    );
    println!("|---|---|---|");
    for r in ROUTES {
        println!("| {r} alone | {:.0} | {:.0} % |", median(r), busy(r));
    }
    println!(
        "| local + postgres + kafka + s3 at once | {together:.0} | {:.0} % |",
        busy(ALL)
    );
    println!(
        "| the source alone into the spool (destination paused) | {:.0} | {:.0} % |",
        median(SPOOL),
        busy(SPOOL)
    );
    println!(
        "| **ratio** to the slowest alone ({}) | **{:.2}** |",
        slowest.0,
        together / slowest.1
    );
    Ok(())
}

fn config(input: &Path, work: &Path, sections: &[Section]) -> String {
    let mut text = super::file_stream_config(work, input);
    for s in sections {
        text.push_str("[[streams.destinations]]\n");
        text.push_str(&s.toml);
    }
    text
}

/// Seconds until the source alone staged every record, its one
/// destination paused before the engine starts (as an operator would).
async fn spool_only(input: &Path, work: &Path, records: u64) -> anyhow::Result<f64> {
    let local = Section {
        toml: format!(
            "name = \"local\"\nengine = \"local\"\ndatabase = \"{}\"\n",
            work.join("out").display()
        ),
        check: Check::Drained,
    };
    let config = Config::parse(&config(input, work, &[local]), "bench")?;
    let store = Arc::new(SqliteStore::open(&work.join("data/state.db"))?);
    store.register_stream("bench").await?;
    store
        .register_destination("bench", "local", "local", true)
        .await?;
    store.set_paused("bench", "local", true).await?;
    let metrics = Arc::new(Metrics::new());
    let start = Instant::now();
    let engine =
        Engine::start(&config, store, metrics.clone(), &super::destination_factory).await?;
    let staged = || metrics.records_staged.with_label_values(&["bench"]).get();
    while staged() < records {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(600),
            "the source stalled"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    engine.shutdown().await;
    Ok(secs)
}

/// A fresh place for `route` to write: a directory, a schema, a topic of
/// four partitions, a bucket.
async fn section(
    a: &FanoutArgs,
    pg: &PgPool,
    route: &str,
    tag: &str,
    work: &Path,
) -> anyhow::Result<Section> {
    Ok(match route {
        "local" => {
            let dir = work.join("out");
            Section {
                toml: format!(
                    "name = \"local\"\nengine = \"local\"\ndatabase = \"{}\"\nformat = \"jsonl.gz\"\n",
                    dir.display()
                ),
                check: Check::Lines { dir },
            }
        }
        "postgres" => {
            let schema = format!("abrq_fan_{tag}");
            sqlx::query(&format!("CREATE SCHEMA {schema}"))
                .execute(pg)
                .await?;
            let u = reqwest::Url::parse(&a.postgres_url)?;
            Section {
                toml: format!(
                    "name = \"db\"\nengine = \"postgres\"\nhost = \"{}\"\nport = {}\n\
                     database = \"{}\"\nusername = \"{}\"\nschema = \"{schema}\"\ntable = \"events\"\n",
                    u.host_str().unwrap_or("127.0.0.1"),
                    u.port().unwrap_or(5432),
                    u.path().trim_start_matches('/'),
                    u.username(),
                ),
                check: Check::Rows { schema },
            }
        }
        "kafka" => {
            let topic = format!("abrq-fan-{tag}");
            super::kafka::create_topic(&a.brokers, &topic).await?;
            Section {
                toml: format!(
                    "name = \"bus\"\nengine = \"kafka\"\nhost = \"{}\"\ndatabase = \"{topic}\"\n",
                    a.brokers
                ),
                check: Check::Drained,
            }
        }
        "s3" => {
            let s3 = S3::from_env();
            let bucket = names::bucket("fanout");
            s3.create_bucket(&bucket).await?;
            Section {
                toml: format!(
                    "name = \"lake\"\nengine = \"s3\"\nhost = \"{}\"\ndatabase = \"{bucket}\"\n\
                     username = \"{}\"\npassword = \"{}\"\nregion = \"{}\"\nprefix = \"abrq\"\n\
                     format = \"jsonl.gz\"\n",
                    s3.endpoint,
                    s3.access_key_id,
                    s3.secret_access_key.expose(),
                    s3.region
                ),
                check: Check::Drained,
            }
        }
        other => anyhow::bail!("unknown route {other}"),
    })
}

async fn verify(pg: &PgPool, check: &Check, records: u64) -> anyhow::Result<()> {
    match check {
        Check::Rows { schema } => {
            let (n,): (i64,) = sqlx::query_as(&format!("SELECT count(*) FROM {schema}.events"))
                .fetch_one(pg)
                .await?;
            anyhow::ensure!(n as u64 == records, "{schema}.events has {n} rows");
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(pg)
                .await?;
        }
        Check::Lines { dir } => {
            let n = gz_lines(dir)?;
            anyhow::ensure!(n == records, "{} holds {n} lines", dir.display());
        }
        Check::Drained => {}
    }
    Ok(())
}

/// Lines in every `.jsonl.gz` file under `dir`.
fn gz_lines(dir: &Path) -> anyhow::Result<u64> {
    let mut n = 0;
    for entry in walk(dir)? {
        if entry.to_string_lossy().ends_with(".jsonl.gz") {
            let gz = flate2::read::MultiGzDecoder::new(std::fs::File::open(&entry)?);
            n += std::io::BufReader::new(gz).lines().count() as u64;
        }
    }
    Ok(n)
}

fn walk(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}
