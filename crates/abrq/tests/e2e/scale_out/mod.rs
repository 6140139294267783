//! Scale-out on shared PostgreSQL state: several `abrq run` processes with
//! the same config share the source and the drains through leases.
//!
//! - SIGKILL the process reading the source, then the one draining the
//!   PostgreSQL destination, while a followed file is still being
//!   appended to: another process takes each lease over within
//!   `lease_timeout + heartbeat` (plus slack), from the last committed
//!   cursor or mark, and in the end the relational table holds every
//!   record exactly once and each local destination every record.
//! - An operator's pause through one process reaches the holder of the
//!   drain on another: its mark stops moving while records keep coming;
//!   a resume through a third process lets it catch up.
//!
//! Each process is one [`Abrq`] (its own directory, data dir, port and
//! config, identical but for `node_id`, `listen` and `data_dir`); the input
//! file and the local destinations live in one shared directory, the state
//! in one fresh database, the relational destination in another.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::turns::Alone;
use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool, Row};
use rand::Rng;
use serde_json::{json, Value};

const STREAM: &str = "orders";
const LEASE_TIMEOUT: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_secs(1);
/// What a takeover may take past the lease timeout and one heartbeat.
const SLACK: Duration = Duration::from_secs(1);
/// The whole test, whatever it waits for.
const OVERALL: Duration = Duration::from_secs(180);
/// How often the leases table is read while a takeover is timed.
const LEASE_POLL: Duration = Duration::from_millis(50);

// ---- databases ----

/// A fresh database on the machine's PostgreSQL, dropped at the end of a
/// passing test (a failing one leaves it for a look; names never repeat).
struct Database {
    admin: PgPool,
    name: String,
    url: String,
    pool: PgPool,
}

impl Database {
    async fn fresh(what: &str) -> Database {
        let pg = abrq_testkit::Postgres::from_env();
        let admin = PgPool::connect(&pg.url).await.expect("connect to postgres");
        let name = format!("abrq_scale_{what}_{}", pg::tag());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        let url = pg.url_for(&name).expect("a database url");
        let pool = PgPool::connect(&url)
            .await
            .expect("connect to the new database");
        Database {
            admin,
            name,
            url,
            pool,
        }
    }

    async fn drop(self) {
        self.pool.close().await;
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = sqlx::query(&sql).execute(&self.admin).await;
    }
}

// ---- leases, as the table holds them ----

#[derive(Debug, Clone)]
struct Lease {
    resource: String,
    node_id: Option<String>,
    instance: Option<String>,
    epoch: i64,
    /// Held and not expired by the database's clock (what the processes
    /// themselves go by).
    live: bool,
}

async fn leases(state: &PgPool) -> Vec<Lease> {
    sqlx::query(
        "SELECT resource, node_id, instance, epoch,
                instance IS NOT NULL AND expires_at >= abrq.clock_ms()
         FROM abrq.leases ORDER BY resource",
    )
    .fetch_all(state)
    .await
    .expect("read abrq.leases")
    .iter()
    .map(|r| Lease {
        resource: r.get(0),
        node_id: r.get(1),
        instance: r.get(2),
        epoch: r.get(3),
        live: r.get(4),
    })
    .collect()
}

async fn live_lease(state: &PgPool, resource: &str) -> Option<Lease> {
    leases(state)
        .await
        .into_iter()
        .find(|l| l.resource == resource && l.live)
}

fn source_resource() -> String {
    format!("source/{STREAM}")
}

fn drain_resource(destination: &str) -> String {
    format!("drain/{STREAM}/{destination}")
}

// ---- the processes ----

/// Three (or more) `abrq run` processes on one shared state.
struct Nodes {
    /// The input file and the local destinations' directories.
    shared: tempfile::TempDir,
    nodes: Vec<Abrq>,
    /// The instance each running process made at start (`/v1/cluster`).
    instances: Vec<Option<String>>,
    state: PgPool,
    resources: Vec<String>,
}

impl Nodes {
    /// `n` processes whose configs differ only in `node_id`, `listen` and
    /// `data_dir`; `destinations` is the `[[streams.destinations]]` TOML,
    /// with `{shared}` standing for the shared directory.
    fn new(
        alone: &Alone,
        n: usize,
        state: &Database,
        destinations: &[&str],
        dest_toml: &str,
    ) -> Nodes {
        let shared = tempfile::Builder::new()
            .prefix("abrq-scale-")
            .tempdir()
            .expect("create the shared dir");
        let dest_toml = dest_toml.replace("{shared}", &shared.path().display().to_string());
        let input = shared.path().join("orders.ndjson");
        let nodes: Vec<Abrq> = (0..n).map(|_| alone.abrq()).collect();
        for (i, node) in nodes.iter().enumerate() {
            node.write_config(&format!(
                r#"
data_dir = "{data}"

[state]
url = "{url}"
node_id = "node-{i}"
lease_timeout = "{lease}s"
heartbeat = "{heartbeat}s"

[server]
listen = "{listen}"

[[streams]]
name = "{STREAM}"
[streams.source]
engine = "file"
path = "{input}"
follow = true
[streams.batch]
max_records = 500
max_wait = "200ms"
{dest_toml}"#,
                data = node.p("data"),
                url = state.url,
                lease = LEASE_TIMEOUT.as_secs(),
                heartbeat = HEARTBEAT.as_secs(),
                listen = node.listen(),
                input = input.display(),
            ));
        }
        let mut resources = vec![source_resource()];
        resources.extend(destinations.iter().map(|d| drain_resource(d)));
        Nodes {
            shared,
            instances: vec![None; n],
            nodes,
            state: state.pool.clone(),
            resources,
        }
    }

    fn input(&self) -> PathBuf {
        self.shared.path().join("orders.ndjson")
    }

    fn out(&self, rel: &str) -> PathBuf {
        self.shared.path().join(rel)
    }

    fn node_id(i: usize) -> String {
        format!("node-{i}")
    }

    /// Starts process `i` (waits for /readyz) and notes its instance.
    async fn start(&mut self, i: usize) {
        self.nodes[i].start().await;
        let cluster = self.nodes[i].get("/v1/cluster").await;
        assert_eq!(
            cluster["node_id"],
            Self::node_id(i),
            "node-{i} answers as another node: {cluster}"
        );
        let instance = cluster["instance"]
            .as_str()
            .unwrap_or_else(|| panic!("no instance in /v1/cluster: {cluster}"))
            .to_string();
        self.instances[i] = Some(instance);
    }

    /// SIGKILLs process `i`; returns the moment just before the signal.
    fn kill(&mut self, i: usize) -> Instant {
        self.nodes[i].note("SIGKILL from the test");
        let at = Instant::now();
        self.nodes[i].kill();
        self.instances[i] = None;
        at
    }

    /// Which running process a live lease names, by its instance.
    fn index_of(&self, lease: &Lease) -> Option<usize> {
        let instance = lease.instance.as_deref()?;
        self.instances
            .iter()
            .position(|x| x.as_deref() == Some(instance))
    }

    /// The running process holding `resource` now, with its lease.
    async fn holder(&self, resource: &str) -> (usize, Lease) {
        let lease = live_lease(&self.state, resource)
            .await
            .unwrap_or_else(|| panic!("nobody holds {resource}"));
        let i = self
            .index_of(&lease)
            .unwrap_or_else(|| panic!("{resource} is held by no running process: {lease:?}"));
        assert_eq!(lease.node_id.as_deref(), Some(Self::node_id(i).as_str()));
        (i, lease)
    }

    /// Waits until every resource is held by a running process and every
    /// running process holds at least one (the fair share reached).
    async fn wait_balanced(&self) -> Vec<Lease> {
        let running = self.instances.iter().filter(|i| i.is_some()).count();
        let start = Instant::now();
        loop {
            for n in &self.nodes {
                if n.pid().is_some() {
                    n.assert_alive();
                }
            }
            let last = leases(&self.state).await;
            let held_by_running = self.resources.iter().all(|r| {
                last.iter()
                    .any(|l| &l.resource == r && l.live && self.index_of(l).is_some())
            });
            let per_node: Vec<usize> = (0..self.nodes.len())
                .map(|i| {
                    last.iter()
                        .filter(|l| l.live && self.index_of(l) == Some(i))
                        .count()
                })
                .collect();
            let everyone_works = (0..self.nodes.len())
                .filter(|i| self.instances[*i].is_some())
                .all(|i| per_node[i] >= 1);
            if held_by_running && everyone_works {
                assert_eq!(
                    per_node.iter().sum::<usize>(),
                    self.resources.len(),
                    "a live lease of an unknown resource: {last:?}"
                );
                eprintln!(
                    "[scale_out] balanced after {:?} over {running} processes: {:?}",
                    start.elapsed(),
                    last.iter()
                        .filter(|l| l.live)
                        .map(|l| format!("{}={}", l.resource, l.node_id.as_deref().unwrap_or("-")))
                        .collect::<Vec<_>>()
                );
                return last;
            }
            if start.elapsed() > Duration::from_secs(60) {
                panic!(
                    "the leases never settled on {running} processes (instances {:?}): {last:#?}",
                    self.instances
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Times the takeover of `resource` after its holder (`old`) was killed
    /// at `killed_at`: polls the leases table until another instance holds
    /// it live. Returns the time taken and the new lease.
    async fn time_takeover(
        &self,
        resource: &str,
        old: &Lease,
        killed_at: Instant,
    ) -> (Duration, Lease) {
        loop {
            let now = live_lease(&self.state, resource).await;
            if let Some(l) = now {
                if l.instance != old.instance {
                    let took = killed_at.elapsed();
                    assert!(
                        l.epoch > old.epoch,
                        "a takeover must raise the epoch: {old:?} -> {l:?}"
                    );
                    return (took, l);
                }
            }
            if killed_at.elapsed() > Duration::from_secs(60) {
                panic!(
                    "nobody took {resource} over within 60s of the kill: {:#?}",
                    leases(&self.state).await
                );
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
    }

    /// Any running process.
    fn any(&self) -> &Abrq {
        let i = (0..self.nodes.len())
            .find(|i| self.instances[*i].is_some())
            .expect("a running process");
        &self.nodes[i]
    }

    /// The sum over the running processes of `abrq_node_leases_held`, each
    /// read from its own /metrics under its own node label.
    async fn leases_held_metric(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if self.instances[i].is_none() {
                continue;
            }
            let id = Self::node_id(i);
            let v = n.metric("abrq_node_leases_held", &[("node", &id)]).await;
            out.push((id, v));
        }
        out
    }
}

// ---- the producer ----

fn record(id: u64) -> Value {
    json!({"id": id, "customer": id % 7, "amount": (id * 37) % 1000, "note": "scale-out"})
}

/// Appends records to the followed file from its own thread, `chunk`
/// every `every`, until stopped or `cap` records were written.
struct Appender {
    written: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Appender {
    fn start(path: &Path, from: u64, chunk: u64, every: Duration, cap: u64) -> Appender {
        let written = Arc::new(AtomicU64::new(from));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s, path) = (written.clone(), stop.clone(), path.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let next = w.load(Ordering::SeqCst);
                if next >= cap {
                    break;
                }
                let end = (next + chunk).min(cap);
                append_ndjson(&path, (next..end).map(record));
                w.store(end, Ordering::SeqCst);
                std::thread::sleep(every);
            }
        });
        Appender {
            written,
            stop,
            thread: Some(thread),
        }
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread; returns how many records were written in all.
    fn stop(mut self) -> u64 {
        self.halt();
        self.written()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("the appender thread panicked");
        }
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every `id` of a local destination's records (duplicates folded).
fn local_ids(root: &Path) -> (usize, BTreeSet<u64>) {
    let out = read_dest(root);
    assert!(
        out.other.is_empty(),
        "unexpected files in {}: {:?}",
        root.display(),
        out.other
    );
    let mut n = 0;
    let mut ids = BTreeSet::new();
    for r in out.records() {
        n += 1;
        ids.insert(r["id"].as_u64().unwrap_or_else(|| panic!("no id in {r:?}")));
    }
    (n, ids)
}

fn missing(ids: &BTreeSet<u64>, total: u64) -> Vec<u64> {
    (0..total).filter(|i| !ids.contains(i)).take(20).collect()
}

// ---- the tests ----

const MIN_RECORDS: u64 = 30_000;
const MAX_RECORDS: u64 = 60_000;

#[tokio::test(flavor = "multi_thread")]
async fn three_processes_survive_sigkill_of_holders() {
    // Each runs three processes on a 2-core machine, and the takeover
    // times measured should not be another test's load.
    let alone = Alone::take().await;
    tokio::time::timeout(OVERALL, survive_sigkill(&alone))
        .await
        .expect("the test took longer than its overall deadline");
}

async fn survive_sigkill(alone: &Alone) {
    let state = Database::fresh("state").await;
    let sink = Database::fresh("sink").await;
    let sink_url = reqwest::Url::parse(&sink.url).expect("sink url");
    let dests = format!(
        r#"
[[streams.destinations]]
name = "lake_a"
engine = "local"
database = "{{shared}}/lake_a"
format = "jsonl"

[[streams.destinations]]
name = "lake_b"
engine = "local"
database = "{{shared}}/lake_b"
format = "jsonl"

[[streams.destinations]]
name = "pg"
engine = "postgres"
host = "{host}"
port = {port}
database = "{db}"
username = "{user}"
schema = "public"
table = "orders"
"#,
        host = sink_url.host_str().unwrap_or("127.0.0.1"),
        port = sink_url.port().unwrap_or(5432),
        db = sink.name,
        user = sink_url.username(),
    );
    let mut c = Nodes::new(alone, 3, &state, &["lake_a", "lake_b", "pg"], &dests);
    let input = c.input();
    append_ndjson(&input, (0..2_000).map(record));
    for i in 0..3 {
        c.start(i).await;
    }
    c.wait_balanced().await;

    // ~2500 records a second from here on, while processes die.
    let appender = Appender::start(&input, 2_000, 250, Duration::from_millis(100), MAX_RECORDS);
    let bound = LEASE_TIMEOUT + HEARTBEAT + SLACK;
    let mut rng = rand::rng();
    let mut takeovers = Vec::new();

    for (what, resource) in [
        ("source", source_resource()),
        ("pg drain", drain_resource("pg")),
    ] {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..2_000))).await;
        let (victim, old) = c.holder(&resource).await;
        let held_too: Vec<String> = leases(&c.state)
            .await
            .into_iter()
            .filter(|l| l.live && l.instance == old.instance && l.resource != resource)
            .map(|l| l.resource)
            .collect();
        let before = c.any().status(STREAM).await;
        assert!(
            appender.running(),
            "the producer finished before the {what} holder was killed; the kill must hit a stream still being appended to"
        );
        let killed_at = c.kill(victim);
        eprintln!(
            "[scale_out] SIGKILL node-{victim} holding {resource} (epoch {}, also {held_too:?}) at {} records appended, spool last_seq {}",
            old.epoch,
            appender.written(),
            before["spool"]["last_seq"]
        );
        let (took, new) = c.time_takeover(&resource, &old, killed_at).await;
        let heir = c
            .index_of(&new)
            .unwrap_or_else(|| panic!("{resource} taken by no running process: {new:?}"));
        eprintln!(
            "[scale_out] TAKEOVER of {resource} ({what}) by node-{heir} after {} ms (epoch {} -> {}; bound {} ms = lease_timeout + heartbeat + 1s)",
            took.as_millis(),
            old.epoch,
            new.epoch,
            bound.as_millis()
        );
        takeovers.push((what, resource.clone(), took));
        assert!(
            took <= bound,
            "{resource} was taken over {took:?} after the SIGKILL of its holder; at most {bound:?} expected"
        );
        assert_ne!(heir, victim);

        // The heir's status says it works the resource now; the others
        // name it as the holder once their next heartbeat has read it.
        let heir_id = Nodes::node_id(heir);
        wait_until(
            Duration::from_secs(5),
            &format!("every process to show node-{heir} holding {resource}"),
            async || {
                for i in 0..c.nodes.len() {
                    if c.instances[i].is_none() {
                        continue;
                    }
                    let st = c.nodes[i].status(STREAM).await;
                    let holder = if resource.starts_with("source/") {
                        st["source"]["holder"].clone()
                    } else {
                        dest_of(&st, "pg")["holder"].clone()
                    };
                    if holder["node_id"] != heir_id.as_str() || holder["here"] != (i == heir) {
                        return false;
                    }
                    if resource.starts_with("source/") {
                        let standby = st["source"]["state"] == "standby";
                        if standby != (i != heir) {
                            return false;
                        }
                    }
                }
                true
            },
        )
        .await;

        c.start(victim).await;
        c.wait_balanced().await;
    }

    // The rest of the records, then everything delivered everywhere.
    let mut total = appender.stop();
    eprintln!("[scale_out] {total} records appended while the processes were killed and restarted");
    if total < MIN_RECORDS {
        append_ndjson(&input, (total..MIN_RECORDS).map(record));
        total = MIN_RECORDS;
    }
    eprintln!("[scale_out] {total} records appended in all");
    let drained = c
        .any()
        .wait_drained(STREAM, Duration::from_secs(3), Duration::from_secs(90))
        .await;
    let last_seq = u(&drained["spool"]["last_seq"]);
    for (i, n) in c.nodes.iter().enumerate() {
        let st = n
            .wait_status(
                STREAM,
                &format!("node-{i} to see every mark at {last_seq}"),
                |st| {
                    u(&st["spool"]["last_seq"]) == last_seq
                        && st["destinations"]
                            .as_array()
                            .expect("destinations")
                            .iter()
                            .all(|d| u(&d["high_water_mark"]) == last_seq)
                },
            )
            .await;
        assert_eq!(st["destinations"].as_array().unwrap().len(), 3, "{st}");
    }

    // The relational table: every id exactly once.
    let row = sqlx::query(
        "SELECT count(*)::bigint, count(DISTINCT id)::bigint, min(id)::bigint, max(id)::bigint
         FROM public.orders",
    )
    .fetch_one(&sink.pool)
    .await
    .expect("read the relational table");
    let (count, distinct, min, max): (i64, i64, Option<i64>, Option<i64>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    eprintln!("[scale_out] pg: {count} rows, {distinct} distinct ids, ids {min:?}..={max:?}");
    assert_eq!(distinct, count, "duplicate rows in the relational table");
    assert_eq!(
        count, total as i64,
        "rows missing from the relational table"
    );
    assert_eq!((min, max), (Some(0), Some(total as i64 - 1)));

    // Each local destination: every id at least once.
    for d in ["lake_a", "lake_b"] {
        let (n, ids) = local_ids(&c.out(d));
        eprintln!("[scale_out] {d}: {n} records, {} distinct ids", ids.len());
        assert_eq!(
            ids.len() as u64,
            total,
            "{d} misses ids, e.g. {:?}",
            missing(&ids, total)
        );
        assert!(ids.iter().all(|i| *i < total), "{d} has ids never appended");
    }

    // Every resource held, by exactly one process each, by their metrics.
    wait_until(
        Duration::from_secs(10),
        "abrq_node_leases_held to sum to the number of resources",
        async || {
            let held = c.leases_held_metric().await;
            held.iter().map(|(_, v)| v).sum::<f64>() == c.resources.len() as f64
        },
    )
    .await;

    for (what, resource, took) in &takeovers {
        eprintln!(
            "[scale_out] measured takeover: {what} ({resource}) {} ms",
            took.as_millis()
        );
    }
    for n in &c.nodes {
        n.kill();
    }
    drop(c);
    state.drop().await;
    sink.drop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_actions_through_one_node_reach_the_holder_on_another() {
    // Each runs three processes on a 2-core machine, and the takeover
    // times measured should not be another test's load.
    let alone = Alone::take().await;
    tokio::time::timeout(OVERALL, operator_actions(&alone))
        .await
        .expect("the test took longer than its overall deadline");
}

async fn operator_actions(alone: &Alone) {
    let state = Database::fresh("ops").await;
    let dests = r#"
[[streams.destinations]]
name = "lake_a"
engine = "local"
database = "{shared}/lake_a"
format = "jsonl"

[[streams.destinations]]
name = "lake_b"
engine = "local"
database = "{shared}/lake_b"
format = "jsonl"
"#;
    let mut c = Nodes::new(alone, 3, &state, &["lake_a", "lake_b"], dests);
    let input = c.input();
    append_ndjson(&input, (0..3_000).map(record));
    for i in 0..3 {
        c.start(i).await;
    }
    c.wait_balanced().await;

    // 3 resources on 3 processes: one each, and each process's own gauge
    // says so under its node label.
    wait_until(
        Duration::from_secs(10),
        "each process's abrq_node_leases_held to say 1",
        async || {
            let held = c.leases_held_metric().await;
            held.len() == 3 && held.iter().all(|(_, v)| *v == 1.0)
        },
    )
    .await;
    let held = c.leases_held_metric().await;
    eprintln!("[scale_out] abrq_node_leases_held: {held:?}");
    assert_eq!(held.iter().map(|(_, v)| v).sum::<f64>(), 3.0, "{held:?}");

    let d = "lake_a";
    let resource = drain_resource(d);
    let (holder, lease) = c.holder(&resource).await;
    let others: Vec<usize> = (0..3).filter(|i| *i != holder).collect();
    let (pauser, resumer) = (others[0], others[1]);
    eprintln!(
        "[scale_out] {resource} held by node-{holder} (epoch {}); pause through node-{pauser}, resume through node-{resumer}",
        lease.epoch
    );
    let h = &c.nodes[holder];

    // It drains: its mark reaches the spool's end.
    h.wait_status(STREAM, "the holder to deliver the first records", |st| {
        let last = u(&st["spool"]["last_seq"]);
        last > 0 && u(&dest_of(st, d)["high_water_mark"]) == last
    })
    .await;

    // Pause through another process's API.
    let st = c.nodes[pauser].status(STREAM).await;
    assert_eq!(dest_of(&st, d)["holder"]["here"], false, "{st}");
    assert_eq!(
        dest_of(&st, d)["holder"]["node_id"],
        Nodes::node_id(holder).as_str()
    );
    c.nodes[pauser].act(STREAM, d, "pause").await;
    let paused_at = Instant::now();
    loop {
        let dst = h.dest(STREAM, d).await;
        if dst["paused"] == true {
            assert_eq!(dst["state"], "paused", "{dst}");
            assert_eq!(dst["holder"]["here"], true, "{dst}");
            break;
        }
        assert!(
            paused_at.elapsed() <= Duration::from_secs(1),
            "the pause through node-{pauser} did not show in the holder's status within 1s: {dst}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "[scale_out] pause seen by the holder after {} ms",
        paused_at.elapsed().as_millis()
    );

    // Let a delivery in flight when the switch arrived finish, then the
    // holder must not move its mark while records keep coming.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = h.dest(STREAM, d).await;
    let before_st = h.status(STREAM).await;
    let mut next = 3_000;
    for _ in 0..10 {
        append_ndjson(&input, (next..next + 300).map(record));
        next += 300;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after_st = h.status(STREAM).await;
    let after = dest_of(&after_st, d);
    eprintln!(
        "[scale_out] while paused: {d} mark {} -> {}, delivered_batches {} -> {}; spool last_seq {} -> {}; lake_b mark {}",
        before["high_water_mark"],
        after["high_water_mark"],
        before["delivered_batches"],
        after["delivered_batches"],
        before_st["spool"]["last_seq"],
        after_st["spool"]["last_seq"],
        dest_of(&after_st, "lake_b")["high_water_mark"],
    );
    assert!(
        u(&after_st["spool"]["last_seq"]) > u(&before_st["spool"]["last_seq"]),
        "nothing was staged while paused, so the pause proves nothing: {after_st}"
    );
    assert_eq!(
        after["high_water_mark"], before["high_water_mark"],
        "the paused destination's mark moved on its holder"
    );
    assert_eq!(
        after["delivered_batches"], before["delivered_batches"],
        "the holder delivered batches while paused"
    );
    assert_eq!(after["paused"], true);
    // The unpaused destination took what came meanwhile.
    let other = c.nodes[resumer]
        .wait_status(STREAM, "lake_b to pass the new batches", |st| {
            u(&dest_of(st, "lake_b")["high_water_mark"]) >= u(&after_st["spool"]["last_seq"])
        })
        .await;
    assert_eq!(
        dest_of(&other, d)["high_water_mark"],
        before["high_water_mark"]
    );

    // Resume through the third process: the holder catches up.
    let lease_now = live_lease(&c.state, &resource).await.expect("held");
    assert_eq!(
        lease_now.instance, lease.instance,
        "the drain moved to another process during the test; the check above would mean nothing"
    );
    c.nodes[resumer].act(STREAM, d, "resume").await;
    let resumed_at = Instant::now();
    let caught = h
        .wait_status(STREAM, "the holder to catch up after the resume", |st| {
            let dst = dest_of(st, d);
            dst["paused"] == false
                && u(&dst["high_water_mark"]) == u(&st["spool"]["last_seq"])
                && u(&st["spool"]["last_seq"]) >= u(&after_st["spool"]["last_seq"])
        })
        .await;
    let dst = dest_of(&caught, d);
    eprintln!(
        "[scale_out] resumed through node-{resumer}: caught up to {} in {} ms",
        dst["high_water_mark"],
        resumed_at.elapsed().as_millis()
    );
    assert!(u(&dst["delivered_batches"]) > u(&before["delivered_batches"]));
    assert_eq!(dst["holder"]["here"], true);

    // Everything appended is in both local destinations.
    let total = next;
    for dd in ["lake_a", "lake_b"] {
        let (_, ids) = local_ids(&c.out(dd));
        assert_eq!(
            ids.len() as u64,
            total,
            "{dd} misses ids, e.g. {:?}",
            missing(&ids, total)
        );
    }
    let audit = c.nodes[holder].get("/v1/audit").await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .expect("audit entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(
        actions.contains(&"pause") && actions.contains(&"resume"),
        "the holder's audit log lacks the actions taken through the others: {audit}"
    );

    for n in &c.nodes {
        n.kill();
    }
    drop(c);
    state.drop().await;
}
