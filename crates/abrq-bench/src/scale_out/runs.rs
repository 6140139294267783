//! One run of `n` processes on a fresh state database, and what the state
//! database says meanwhile: progress, how the leases spread, connections.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use tokio::process::{Child, Command};

use super::cpu_cap::CpuCap;
use super::delay_proxy::DelayProxy;
use super::report::run_line;
use super::{
    files_of, pool, with_database, RunResult, ScaleOutArgs, Sink, APP, DESTINATIONS, POLL,
    RESOURCES, STATE_DB, STREAMS,
};
use crate::proc_stat::{busy_share, cpu_of, cpu_ticks, ticks_of, ticks_since};

/// What every run shares.
pub(super) struct Ctx<'a> {
    pub(super) a: &'a ScaleOutArgs,
    pub(super) abrq: &'a Path,
    pub(super) config: &'a Path,
    pub(super) work: &'a Path,
    pub(super) admin: &'a PgPool,
    pub(super) schema: &'a str,
    pub(super) proxy: Option<&'a DelayProxy>,
    pub(super) clk_tck: f64,
}

/// One sample of the state database's progress.
#[derive(Default)]
struct Progress {
    staged: bool,
    drained: bool,
}

impl Ctx<'_> {
    /// Every round: one process and the scaled-out ones, in turns.
    pub(super) async fn rounds(&self) -> anyhow::Result<(Vec<RunResult>, Vec<RunResult>)> {
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
        let _ = std::fs::remove_dir_all(self.work.join("out"));
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
        let server_cpu_secs = ticks_since("postgres", &before_server) / self.clk_tck;
        let idle = match (&result, a.idle_secs) {
            (Ok(_), secs) if secs > 0 => Some(self.at_rest(secs).await?),
            _ => None,
        };
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
                let (what, rows) = match a.destinations {
                    Sink::Postgres => {
                        let table = format!("{schema}.s{s}_d{d}");
                        let sql = format!("SELECT count(*) FROM {table}");
                        let rows: i64 = sqlx::query_scalar(&sql).fetch_one(self.admin).await?;
                        (table, rows as u64)
                    }
                    Sink::JsonlGz => {
                        let dir = files_of(self.work, s, d);
                        let rows = gz_lines(&dir)?;
                        (dir.display().to_string(), rows)
                    }
                };
                if rows != a.records {
                    wrong_rows.push(format!("{what} has {rows} rows"));
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
            idle,
        })
    }

    /// The state database's transactions per second over `secs` with
    /// nothing to do (every process's heartbeats, followers and pollers;
    /// the bench's own two samples aside), abrq's connections to it, and
    /// the server's CPU share meanwhile (cores).
    async fn at_rest(&self, secs: u64) -> anyhow::Result<(f64, i64, f64)> {
        let xacts = async || -> anyhow::Result<i64> {
            // the statistics are sent by each backend at most every 500 ms
            tokio::time::sleep(Duration::from_millis(600)).await;
            sqlx::query("SELECT pg_stat_clear_snapshot()")
                .execute(self.admin)
                .await?;
            Ok(sqlx::query_scalar(
                "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
            )
            .bind(STATE_DB)
            .fetch_one(self.admin)
            .await?)
        };
        let before = xacts().await?;
        let (started, server_before) = (Instant::now(), ticks_of("postgres"));
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let server = ticks_since("postgres", &server_before) / self.clk_tck;
        let elapsed = started.elapsed().as_secs_f64();
        let after = xacts().await?;
        let (open, _) = state_connections(self.admin).await?;
        Ok(((after - before) as f64 / elapsed, open, server / elapsed))
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
        // moved into its group at once: what it ran before is start-up
        let cap = match (self.a.cpu_cap, child.id()) {
            (Some(cores), Some(pid)) => Some(CpuCap::new(&format!("node{i}"), cores, pid)?),
            _ => None,
        };
        Ok(Proc {
            child,
            log,
            _cap: cap,
        })
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
    /// Its CPU quota, removed when it is dropped (after the process ended).
    _cap: Option<CpuCap>,
}

/// Lines in every `.gz` file under `dir` (a local destination's objects).
fn gz_lines(dir: &Path) -> anyhow::Result<u64> {
    use std::io::BufRead;
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "gz") {
                let gz = flate2::read::MultiGzDecoder::new(std::fs::File::open(&path)?);
                n += std::io::BufReader::new(gz).lines().count() as u64;
            }
        }
    }
    Ok(n)
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
