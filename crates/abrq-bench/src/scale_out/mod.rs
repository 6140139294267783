//! `abrq-bench scale-out`: records delivered per second by ONE `abrq run`
//! process against THREE `abrq run` processes with the same config sharing
//! one PostgreSQL state database (leases: each source and each drain held
//! by one process, fair share = resources / live processes).
//!
//! Workload: three streams, each a file source (an NDJSON file written
//! first, batches of `--max-records`) and three `postgres` destinations
//! (nine drains). Each destination reaches the server through a loopback
//! proxy written here that holds every chunk a client sends for
//! `--delay-ms` before forwarding it, so each delivery costs several round
//! trips of that length. `--no-delay` is the CPU-bound variant: the
//! destinations connect straight to the server.
//!
//! A run starts its processes at once (the release `abrq` binary, each
//! with its own port, data dir and node_id through `${VAR}`s in one config
//! file) against a fresh state database, and lasts from the moment they
//! are all started until every destination's mark (read from the state
//! database) reaches the last staged seq and every source has staged its
//! whole file: the time the leases take to spread counts. Rounds alternate
//! which setup runs first; the table shows medians, the spread and the
//! ratio three / one, with what explains it: round trips per drain through
//! the proxy, CPU, the state connections open and busy, lease claims.
//!
//! `--destinations jsonl-gz` makes the drains `local` `jsonl.gz` ones
//! (CPU-bound in abrq: gzip), and `--cpu-cap` gives each process its own
//! CPU quota (a cgroup v1 `cpu` group each, as separate machines would
//! have), so one process is bound by its cap and more processes add
//! throughput only if the work spreads.
//!
//! Here: the arguments, the workload (input files, config) and the entry
//! point; `runs` runs and watches the processes, `report` prints the
//! table, `delay_proxy` is the proxy,
//! `cpu_cap` the CPU quotas.

mod cpu_cap;
mod delay_proxy;
mod report;
mod runs;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use abrq_sinks::relational::sqlx::{
    self,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    ConnectOptions as _,
};
use clap::Args;

use crate::proc_stat::clk_tck;
use delay_proxy::DelayProxy;
use report::report;
use runs::Ctx;

#[derive(Args)]
pub struct ScaleOutArgs {
    /// Records per stream (three streams, each to three destinations).
    #[arg(long, default_value_t = 30_000)]
    records: u64,
    /// Rounds; each runs one process and the scaled-out processes, the
    /// order alternating.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Processes of the scaled-out run.
    #[arg(long, default_value_t = 3)]
    processes: usize,
    /// Milliseconds the proxy holds each chunk a destination's client
    /// sends to PostgreSQL.
    #[arg(long, default_value_t = 20)]
    delay_ms: u64,
    /// The CPU-bound variant: no proxy, the destinations connect straight
    /// to PostgreSQL.
    #[arg(long)]
    no_delay: bool,
    /// Records per batch (`[streams.batch] max_records`).
    #[arg(long, default_value_t = 200)]
    max_records: u64,
    /// `[state] lease_timeout` (the heartbeat is a third of it).
    #[arg(long, default_value = "3s")]
    lease_timeout: String,
    /// The abrq binary; by default `$CARGO_TARGET_DIR/release/abrq`, else
    /// the one next to this executable, else `target/release/abrq`.
    #[arg(long)]
    abrq: Option<PathBuf>,
    /// A server where the user may create databases and schemas; the state
    /// database is a fresh one on it per run, the destinations write to a
    /// schema of this database.
    #[arg(
        long,
        env = "ABRQ_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    postgres_url: String,
    /// Keep the work directory (each process's log, the config) and say
    /// where it is.
    #[arg(long)]
    keep: bool,
    /// A run that has not drained after this long fails.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// What each stream's three destinations are.
    #[arg(long, value_enum, default_value_t = Sink::Postgres)]
    destinations: Sink,
    /// Cores each `abrq run` may use (its own cgroup v1 `cpu` quota, for
    /// example 0.45); needs a writable `/sys/fs/cgroup/cpu`.
    #[arg(long)]
    cpu_cap: Option<f64>,
    /// After a run drained, seconds to stay idle while the state
    /// database's transactions and abrq's connections to it are counted
    /// (the cost of a process at rest; 0: none).
    #[arg(long, default_value_t = 0)]
    idle_secs: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Sink {
    /// `postgres` tables (behind the proxy unless `--no-delay`).
    Postgres,
    /// `local` destinations writing `jsonl.gz` files.
    JsonlGz,
}

const STREAMS: usize = 3;
const DESTINATIONS: usize = 3;
/// A source per stream and a drain per destination.
const RESOURCES: usize = STREAMS * (DESTINATIONS + 1);
const STATE_DB: &str = "abrq_bench_scale_out";
/// How the bench's own connections name themselves, so the samples of
/// `pg_stat_activity` count only abrq's.
const APP: &str = "abrq-bench-scale-out";
const POLL: Duration = Duration::from_millis(50);

/// What one run measured.
#[derive(Clone)]
struct RunResult {
    secs: f64,
    /// Records delivered per second, all destinations together.
    rate: f64,
    /// Until every resource was held and the leases balanced (None: not
    /// before the run ended).
    spread_secs: Option<f64>,
    /// Until every source had staged its whole file.
    staged_secs: f64,
    /// Client turns through the proxy (a chunk sent after an answer).
    round_trips: u64,
    /// User + system seconds of the abrq processes.
    cpu_secs: f64,
    /// User + system seconds of the PostgreSQL server's processes (all of
    /// its clients: the state and destination connections of abrq, and
    /// whatever else uses the server meanwhile).
    server_cpu_secs: f64,
    /// The whole machine's busy share (servers included).
    busy: f64,
    /// State database connections of the abrq processes: most open at
    /// once, and the mean of those not idle.
    state_open_max: i64,
    state_busy_mean: f64,
    state_busy_max: i64,
    /// Lease claims (a claim raises its lease's epoch by one): the
    /// resources' count when no lease moved.
    claims: i64,
    /// Leases held per node at the end.
    held: Vec<(String, i64)>,
    /// Tables whose row count is not the stream's record count.
    wrong_rows: Vec<String>,
    /// At rest after draining (`--idle-secs`): the state database's
    /// transactions per second, abrq's connections open to it, and the
    /// server's CPU in cores.
    idle: Option<(f64, i64, f64)>,
}

pub async fn run(a: ScaleOutArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.processes >= 2, "--processes: at least 2");
    anyhow::ensure!(a.rounds >= 1, "--rounds: at least 1");
    if let Some(cores) = a.cpu_cap {
        cpu_cap::check(cores)?;
    }
    let abrq = abrq_binary(a.abrq.as_deref())?;
    let delay = match a.destinations {
        Sink::Postgres if !a.no_delay => a.delay_ms,
        _ => 0,
    };
    let dir = tempfile::tempdir()?;
    let mut inputs = Vec::new();
    for s in 0..STREAMS {
        let path = dir.path().join(format!("s{s}.ndjson"));
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
        for i in 0..a.records {
            serde_json::to_writer(&mut w, &super::record(s as u64 * a.records + i, 200))?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        inputs.push(path);
    }
    let admin = pool(&a.postgres_url).await?;
    let server = reqwest::Url::parse(&a.postgres_url)?;
    let host = server.host_str().unwrap_or("127.0.0.1").to_string();
    let port = server.port().unwrap_or(5432);
    let proxy = match delay {
        0 => None,
        ms => Some(DelayProxy::start(format!("{host}:{port}"), Duration::from_millis(ms)).await?),
    };
    let schema = format!("abrq_scale_out_{}", std::process::id());
    let dest_port = proxy.as_ref().map_or(port, |p| p.port);
    let config = dir.path().join("abrq.toml");
    std::fs::write(
        &config,
        config_text(&a, &inputs, &server, &schema, dest_port, dir.path())?,
    )?;
    let per_request = match (a.destinations, delay) {
        (Sink::JsonlGz, _) => "local files".to_string(),
        (_, 0) => "no added latency (CPU-bound variant)".to_string(),
        (_, ms) => format!("every request to PostgreSQL delayed {ms} ms by a proxy"),
    };
    let cap = a.cpu_cap.map_or(String::new(), |c| {
        format!("; each process capped at {c} cores")
    });
    println!(
        "abrq: {}; {STREAMS} streams x {} records of 200 bytes, batches of {}, \
         {DESTINATIONS} {} destinations each; {per_request}; lease_timeout {}{cap}",
        abrq.display(),
        a.records,
        a.max_records,
        a.destinations.label(),
        a.lease_timeout
    );
    let ctx = Ctx {
        a: &a,
        abrq: &abrq,
        config: &config,
        work: dir.path(),
        admin: &admin,
        schema: &schema,
        proxy: proxy.as_ref(),
        clk_tck: clk_tck(),
    };
    let rounds = ctx.rounds().await;
    // what a run left behind goes, whether or not the rounds went through
    sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&admin)
        .await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {STATE_DB} WITH (FORCE)"))
        .execute(&admin)
        .await?;
    let (one, many) = rounds?;
    report(&a, delay, &one, &many);
    if a.keep {
        println!("logs and config kept in {}", dir.keep().display());
    }
    Ok(())
}

impl Sink {
    fn label(self) -> &'static str {
        match self {
            Sink::Postgres => "postgres",
            Sink::JsonlGz => "local jsonl.gz",
        }
    }
}

/// Where a `jsonl.gz` destination writes (shared by the processes, as a
/// bucket would be).
fn files_of(work: &Path, s: usize, d: usize) -> PathBuf {
    work.join("out").join(format!("s{s}_d{d}"))
}

/// One config for every process: what differs comes from the environment.
fn config_text(
    a: &ScaleOutArgs,
    inputs: &[PathBuf],
    server: &reqwest::Url,
    schema: &str,
    dest_port: u16,
    work: &Path,
) -> anyhow::Result<String> {
    let state_url = with_database(&a.postgres_url, STATE_DB)?;
    let mut text = format!(
        "data_dir = \"${{ABRQ_DATA_DIR}}\"\n\
         [state]\nurl = \"{state_url}\"\nnode_id = \"${{ABRQ_NODE_ID}}\"\nlease_timeout = \"{}\"\n\
         [server]\nlisten = \"127.0.0.1:${{ABRQ_PORT}}\"\n",
        a.lease_timeout
    );
    let mut login = format!("username = \"{}\"\n", server.username());
    if let Some(p) = server.password() {
        login.push_str(&format!("password = \"{p}\"\n"));
    }
    for (s, input) in inputs.iter().enumerate() {
        text.push_str(&format!(
            "\n[[streams]]\nname = \"s{s}\"\n[streams.source]\nengine = \"file\"\npath = \"{}\"\n\
             [streams.batch]\nmax_records = {}\n",
            input.display(),
            a.max_records
        ));
        for d in 0..DESTINATIONS {
            if a.destinations == Sink::JsonlGz {
                text.push_str(&format!(
                    "[[streams.destinations]]\nname = \"d{d}\"\nengine = \"local\"\n\
                     database = \"{}\"\nformat = \"jsonl.gz\"\n",
                    files_of(work, s, d).display()
                ));
                continue;
            }
            text.push_str(&format!(
                "[[streams.destinations]]\nname = \"d{d}\"\nengine = \"postgres\"\n\
                 host = \"127.0.0.1\"\nport = {dest_port}\ndatabase = \"{}\"\n{login}\
                 schema = \"{schema}\"\ntable = \"s{s}_d{d}\"\n",
                server.path().trim_start_matches('/'),
            ));
        }
    }
    Ok(text)
}

/// `--abrq`, else `$CARGO_TARGET_DIR/release/abrq`, else next to this
/// executable, else `target/release/abrq`.
fn abrq_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        anyhow::ensure!(p.is_file(), "--abrq {}: no such file", p.display());
        return Ok(p.to_path_buf());
    }
    let candidates: Vec<PathBuf> = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| PathBuf::from(d).join("release/abrq"))
        .into_iter()
        .chain(
            std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|d| d.join("abrq"))),
        )
        .chain([PathBuf::from("target/release/abrq")])
        .collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no abrq binary at {candidates:?}: `cargo build --release -p abrq`, or --abrq PATH"
            )
        })
}

async fn pool(url: &str) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(url)?
        .application_name(APP)
        // a DROP DATABASE of a busy server is slow, and no news
        .disable_statement_logging();
    Ok(PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await?)
}

fn with_database(url: &str, db: &str) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url)?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}
