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

use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::{
    self,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    ConnectOptions as _,
};
use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

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
}

pub async fn run(a: ScaleOutArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.processes >= 2, "--processes: at least 2");
    anyhow::ensure!(a.rounds >= 1, "--rounds: at least 1");
    let abrq = abrq_binary(a.abrq.as_deref())?;
    let delay = if a.no_delay { 0 } else { a.delay_ms };
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
        config_text(&a, &inputs, &server, &schema, dest_port)?,
    )?;
    let per_request = match delay {
        0 => "no added latency (CPU-bound variant)".to_string(),
        ms => format!("every request to PostgreSQL delayed {ms} ms by a proxy"),
    };
    println!(
        "abrq: {}; {STREAMS} streams x {} records of 200 bytes, batches of {}, \
         {DESTINATIONS} postgres destinations each; {per_request}; lease_timeout {}",
        abrq.display(),
        a.records,
        a.max_records,
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

/// What one run measured, on one line.
fn run_line(n: usize, r: &RunResult, proxied: bool) -> String {
    let spread = r
        .spread_secs
        .map_or("never".to_string(), |s| format!("{s:.1} s"));
    let trips = match proxied {
        true => (r.round_trips / (STREAMS * DESTINATIONS) as u64).to_string(),
        false => "-".to_string(),
    };
    let held: Vec<String> = r.held.iter().map(|(n, c)| format!("{n}={c}")).collect();
    let wrong = match r.wrong_rows.is_empty() {
        true => String::new(),
        false => format!("; WRONG ROW COUNTS: {}", r.wrong_rows.join(", ")),
    };
    format!(
        "{n} process{} {:.0} records/s ({:.1} s; leases spread {spread}; staged {:.1} s; \
         {trips} round trips per drain; CPU abrq {:.1} s, postgres {:.1} s, machine {:.0}% busy; \
         state connections {} open, {:.1} busy on average; {} lease claims; held {}){wrong}",
        if n == 1 { "" } else { "es" },
        r.rate,
        r.secs,
        r.staged_secs,
        r.cpu_secs,
        r.server_cpu_secs,
        r.busy * 100.0,
        r.state_open_max,
        r.state_busy_mean,
        r.claims,
        held.join(" "),
    )
}

fn report(a: &ScaleOutArgs, delay: u64, one: &[RunResult], many: &[RunResult]) {
    let med =
        |rs: &[RunResult], f: &dyn Fn(&RunResult) -> f64| super::median(rs.iter().map(f).collect());
    let range = |rs: &[RunResult], f: &dyn Fn(&RunResult) -> f64| {
        let xs: Vec<f64> = rs.iter().map(f).collect();
        let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let drains = (STREAMS * DESTINATIONS) as f64;
    let what = match delay {
        0 => "no added latency".to_string(),
        ms => format!("{ms} ms per request"),
    };
    println!();
    println!(
        "| {STREAMS} streams x {} records, batches of {}, {} postgres destinations, {what} | \
         records/s delivered (median of {}) | min-max | wall s | leases spread s | sources staged s | \
         round trips per drain | x {delay} ms | CPU s: abrq / postgres | machine busy | state connections open (max) / busy (mean, max) | lease claims |",
        a.records,
        a.max_records,
        STREAMS * DESTINATIONS,
        a.rounds
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (label, rs) in [
        ("one `abrq run`".to_string(), one),
        (
            format!("{} `abrq run`, same config, shared state", a.processes),
            many,
        ),
    ] {
        let (lo, hi) = range(rs, &|r| r.rate);
        let trips = med(rs, &|r| r.round_trips as f64) / drains;
        let spread = rs.iter().filter_map(|r| r.spread_secs).collect::<Vec<_>>();
        println!(
            "| {label} | {:.0} | {lo:.0}-{hi:.0} | {:.2} | {} | {:.2} | {} | {} | {:.1} / {:.1} | {:.0} % | {:.0} / {:.1}, {:.0} | {:.0} |",
            med(rs, &|r| r.rate),
            med(rs, &|r| r.secs),
            match spread.len() == rs.len() {
                true => format!("{:.2}", super::median(spread)),
                false => format!("{} of {} runs", spread.len(), rs.len()),
            },
            med(rs, &|r| r.staged_secs),
            match delay {
                0 => "-".to_string(),
                _ => format!("{trips:.0}"),
            },
            match delay {
                0 => "-".to_string(),
                ms => format!("{:.2} s", trips * ms as f64 / 1000.0),
            },
            med(rs, &|r| r.cpu_secs),
            med(rs, &|r| r.server_cpu_secs),
            med(rs, &|r| r.busy) * 100.0,
            med(rs, &|r| r.state_open_max as f64),
            med(rs, &|r| r.state_busy_mean),
            med(rs, &|r| r.state_busy_max as f64),
            med(rs, &|r| r.claims as f64),
        );
    }
    let ratios: Vec<f64> = one.iter().zip(many).map(|(o, m)| m.rate / o.rate).collect();
    let (lo, hi) = (
        ratios.iter().cloned().fold(f64::INFINITY, f64::min),
        ratios.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    let ratio = med(many, &|r| r.rate) / med(one, &|r| r.rate);
    let target = match delay {
        0 => "CPU-bound, no target",
        _ => "target >= 2.5 with 20 ms",
    };
    println!(
        "| **ratio** {} / one ({target}) | **{ratio:.2}** | per round {lo:.2}-{hi:.2} | | | | | | | | | |",
        a.processes
    );
    let wrong: Vec<&String> = one.iter().chain(many).flat_map(|r| &r.wrong_rows).collect();
    if !wrong.is_empty() {
        println!(
            "WARNING: {} table(s) did not hold exactly their stream's records: {wrong:?}",
            wrong.len()
        );
    }
    println!();
    println!(
        "scale-out ({what}): {} processes / one = {ratio:.2}x (median of {} rounds: {:.0} vs {:.0} records/s delivered; per-round ratios {lo:.2}-{hi:.2})",
        a.processes,
        a.rounds,
        med(many, &|r| r.rate),
        med(one, &|r| r.rate),
    );
}

/// What every run shares.
struct Ctx<'a> {
    a: &'a ScaleOutArgs,
    abrq: &'a Path,
    config: &'a Path,
    work: &'a Path,
    admin: &'a PgPool,
    schema: &'a str,
    proxy: Option<&'a DelayProxy>,
    clk_tck: f64,
}

/// One sample of the state database's progress.
#[derive(Default)]
struct Progress {
    staged: bool,
    drained: bool,
}

impl Ctx<'_> {
    /// Every round: one process and the scaled-out ones, in turns.
    async fn rounds(&self) -> anyhow::Result<(Vec<RunResult>, Vec<RunResult>)> {
        let a = self.a;
        let (mut one, mut many) = (Vec::new(), Vec::new());
        for round in 0..a.rounds {
            // alternate which goes first, so neither always meets a warm server
            let order = match round % 2 {
                0 => [1, a.processes],
                _ => [a.processes, 1],
            };
            for n in order {
                let r = self.measure(n, round).await?;
                println!("round {round}: {}", run_line(n, &r, self.proxy.is_some()));
                if n == 1 {
                    one.push(r);
                } else {
                    many.push(r);
                }
            }
        }
        Ok((one, many))
    }

    /// One run of `n` processes on a fresh state database and a fresh
    /// destination schema.
    async fn measure(&self, n: usize, round: u32) -> anyhow::Result<RunResult> {
        let a = self.a;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {STATE_DB} WITH (FORCE)"))
            .execute(self.admin)
            .await?;
        sqlx::query(&format!("CREATE DATABASE {STATE_DB}"))
            .execute(self.admin)
            .await?;
        let schema = self.schema;
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(self.admin)
            .await?;
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(self.admin)
            .await?;
        let state = pool(&with_database(&a.postgres_url, STATE_DB)?).await?;
        let run_dir = self.work.join(format!("round{round}-{n}"));
        let (before_trips, before_ticks) =
            (self.proxy.map_or(0, |p| p.round_trips()), cpu_ticks()?);
        let before_server = ticks_of("postgres");
        let mut procs = Vec::new();
        for i in 0..n {
            procs.push(self.spawn(&run_dir, i)?);
        }
        let start = Instant::now();
        let result = self.watch(&state, &mut procs, start, n).await;
        let secs = start.elapsed().as_secs_f64();
        let busy = busy_share(before_ticks, cpu_ticks()?);
        let cpu_secs: f64 = procs
            .iter()
            .filter_map(|p| p.child.id())
            .map(|pid| cpu_of(pid) / self.clk_tck)
            .sum();
        let server_cpu_secs = ticks_of("postgres")
            .iter()
            .map(|(pid, t)| t - before_server.get(pid).copied().unwrap_or(0.0))
            .sum::<f64>()
            / self.clk_tck;
        let held = held(&state).await.unwrap_or_default();
        let claims: i64 =
            sqlx::query_scalar("SELECT COALESCE(sum(epoch), 0)::bigint FROM abrq.leases")
                .fetch_one(&state)
                .await
                .unwrap_or(0);
        stop(&mut procs).await;
        state.close().await;
        let samples = match result {
            Ok(s) => s,
            Err(e) => {
                let logs: Vec<String> = procs.iter().map(|p| tail(&p.log)).collect();
                anyhow::bail!("{e:#}\n{}", logs.join("\n"));
            }
        };
        let mut wrong_rows = Vec::new();
        for s in 0..STREAMS {
            for d in 0..DESTINATIONS {
                let table = format!("{schema}.s{s}_d{d}");
                let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
                    .fetch_one(self.admin)
                    .await?;
                if rows as u64 != a.records {
                    wrong_rows.push(format!("{table} has {rows} rows"));
                }
            }
        }
        let round_trips = self.proxy.map_or(0, |p| p.round_trips()) - before_trips;
        let deliveries = a.records as f64 * (STREAMS * DESTINATIONS) as f64;
        let secs = samples.drained_secs.unwrap_or(secs);
        Ok(RunResult {
            secs,
            rate: deliveries / secs,
            spread_secs: samples.spread_secs,
            staged_secs: samples.staged_secs.unwrap_or(secs),
            round_trips,
            cpu_secs,
            server_cpu_secs,
            busy,
            state_open_max: samples.open_max,
            state_busy_mean: samples.busy_sum / samples.count.max(1) as f64,
            state_busy_max: samples.busy_max,
            claims,
            held,
            wrong_rows,
        })
    }

    fn spawn(&self, run_dir: &Path, i: usize) -> anyhow::Result<Proc> {
        let data = run_dir.join(format!("node{i}"));
        std::fs::create_dir_all(&data)?;
        let log = run_dir.join(format!("node{i}.log"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(self.abrq)
            .arg("run")
            .arg("--config")
            .arg(self.config)
            .arg("--no-progress")
            .env("ABRQ_NODE_ID", format!("node{i}"))
            .env("ABRQ_PORT", port.to_string())
            .env("ABRQ_DATA_DIR", &data)
            .env("ABRQ_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", self.abrq.display()))?;
        Ok(Proc { child, log })
    }

    /// Polls the state database until every destination drained.
    async fn watch(
        &self,
        state: &PgPool,
        procs: &mut [Proc],
        start: Instant,
        n: usize,
    ) -> anyhow::Result<Samples> {
        let mut s = Samples::default();
        let limit = Duration::from_secs(self.a.timeout_secs);
        loop {
            for p in procs.iter_mut() {
                if let Some(status) = p.child.try_wait()? {
                    anyhow::bail!("an abrq process exited early ({status})");
                }
            }
            anyhow::ensure!(start.elapsed() < limit, "not drained after {limit:?}");
            let p = progress(state, self.a.records).await.unwrap_or_default();
            let at = start.elapsed().as_secs_f64();
            if p.staged && s.staged_secs.is_none() {
                s.staged_secs = Some(at);
            }
            if s.spread_secs.is_none() && spread(state, n).await.unwrap_or(false) {
                s.spread_secs = Some(at);
            }
            if let Ok((open, busy)) = state_connections(self.admin).await {
                s.count += 1;
                s.busy_sum += busy as f64;
                s.busy_max = s.busy_max.max(busy);
                s.open_max = s.open_max.max(open);
            }
            if p.drained {
                s.drained_secs = Some(at);
                return Ok(s);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[derive(Default)]
struct Samples {
    drained_secs: Option<f64>,
    staged_secs: Option<f64>,
    spread_secs: Option<f64>,
    count: u64,
    busy_sum: f64,
    busy_max: i64,
    open_max: i64,
}

struct Proc {
    child: Child,
    log: PathBuf,
}

/// Every source staged its whole file; every destination's durable mark is
/// the stream's last staged seq.
async fn progress(state: &PgPool, records: u64) -> anyhow::Result<Progress> {
    let rows: Vec<(i64, Option<String>, i64, Option<i64>)> = sqlx::query_as(
        "SELECT s.last_seq, s.cursor, count(d.id), min(d.hwm)
         FROM abrq.streams s LEFT JOIN abrq.destinations d ON d.stream_id = s.id
         GROUP BY s.id, s.last_seq, s.cursor",
    )
    .fetch_all(state)
    .await?;
    let lines = |cursor: &Option<String>| {
        cursor
            .as_deref()
            .and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok())
            .and_then(|v| v["lines"].as_u64())
            .unwrap_or(0)
    };
    let staged = rows.len() == STREAMS && rows.iter().all(|r| lines(&r.1) == records);
    let drained = staged
        && rows
            .iter()
            .all(|r| r.2 == DESTINATIONS as i64 && r.3 == Some(r.0) && r.0 > 0);
    Ok(Progress { staged, drained })
}

/// Every resource held, by `n` processes, none holding two more than
/// another.
async fn spread(state: &PgPool, n: usize) -> anyhow::Result<bool> {
    let held = held(state).await?;
    let counts: Vec<i64> = held.iter().map(|h| h.1).collect();
    let (lo, hi) = (
        counts.iter().copied().min().unwrap_or(0),
        counts.iter().copied().max().unwrap_or(0),
    );
    Ok(held.len() == n && counts.iter().sum::<i64>() == RESOURCES as i64 && hi - lo <= 1)
}

/// Live leases per node.
async fn held(state: &PgPool) -> anyhow::Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as(
        "SELECT node_id, count(*) FROM abrq.leases
         WHERE instance IS NOT NULL AND expires_at >= abrq.clock_ms()
         GROUP BY node_id ORDER BY node_id",
    )
    .fetch_all(state)
    .await?)
}

/// abrq's connections to the state database: open, and not idle.
async fn state_connections(admin: &PgPool) -> anyhow::Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state <> 'idle')
         FROM pg_stat_activity
         WHERE datname = $1 AND application_name <> $2 AND backend_type = 'client backend'",
    )
    .bind(STATE_DB)
    .bind(APP)
    .fetch_one(admin)
    .await?)
}

/// SIGTERM (each hands its leases back), then SIGKILL after 15 s.
async fn stop(procs: &mut [Proc]) {
    for p in procs.iter() {
        if let Some(pid) = p.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }
    for p in procs.iter_mut() {
        if tokio::time::timeout(Duration::from_secs(15), p.child.wait())
            .await
            .is_err()
        {
            let _ = p.child.kill().await;
        }
    }
}

/// The last lines of a process's log, for a failed run.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(20);
    format!("--- {} ---\n{}", log.display(), lines[from..].join("\n"))
}

/// One config for every process: what differs comes from the environment.
fn config_text(
    a: &ScaleOutArgs,
    inputs: &[PathBuf],
    server: &reqwest::Url,
    schema: &str,
    dest_port: u16,
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

/// Clock ticks per second of `/proc/PID/stat`'s times.
fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system ticks of a process so far.
fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name, which may hold spaces
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here
    ticks(11) + ticks(12)
}

/// User + system ticks of every process named `comm`, by pid.
fn ticks_of(comm: &str) -> std::collections::HashMap<u32, f64> {
    let want = format!("({comm})");
    let mut out = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.split_whitespace().nth(1) == Some(want.as_str()) {
            out.insert(pid, cpu_of(pid));
        }
    }
    out
}

/// (busy, total) jiffies of all CPUs since boot, from `/proc/stat`.
fn cpu_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().unwrap_or_default();
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    anyhow::ensure!(ticks.len() >= 5, "unexpected /proc/stat: {line}");
    let total: u64 = ticks.iter().sum();
    // idle and iowait
    Ok((total - ticks[3] - ticks[4], total))
}

fn busy_share(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1).max(1);
    after.0.saturating_sub(before.0) as f64 / total as f64
}

/// A loopback TCP proxy that holds every chunk a client sends for `delay`
/// before forwarding it, as a distant server would: a delay line (each
/// chunk leaves `delay` after it arrived, whatever is queued before it), so
/// it adds latency and caps no throughput. The server's answers pass at
/// once. It counts the client's turns: chunks sent after the server
/// answered, the round trips a client waited for.
struct DelayProxy {
    port: u16,
    round_trips: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    async fn start(target: String, delay: Duration) -> anyhow::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let round_trips = Arc::new(AtomicU64::new(0));
        let trips = round_trips.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, trips) = (target.clone(), trips.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, delay, trips).await;
                    }
                });
            }
        });
        Ok(DelayProxy {
            port,
            round_trips,
            accept,
        })
    }

    fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, delay: Duration, trips: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let (queue, mut queued) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    // the server spoke since the client's last chunk: the next one is a
    // new turn (the first chunk of a connection is one too)
    let answered = Arc::new(AtomicBool::new(true));
    let heard = answered.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = client_rx.read(&mut buf).await {
            if heard.swap(false, Ordering::Relaxed) {
                trips.fetch_add(1, Ordering::Relaxed);
            }
            let due = tokio::time::Instant::now() + delay;
            if queue.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // the queue closes: the sender below ends after the last chunk
    };
    let send = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if server_tx.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = server_tx.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n @ 1..) = server_rx.read(&mut buf).await {
            answered.store(true, Ordering::Relaxed);
            if client_tx.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_tx.shutdown().await;
    };
    tokio::join!(up, send, down);
}
