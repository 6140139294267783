//! Scale-out on PostgreSQL state: a holder frozen past its lease (SIGSTOP)
//! loses its work to the other process, and once it runs again (SIGCONT)
//! nothing it still had in flight may land in the state: its writes carry
//! an epoch that was taken over, so they are refused. Two real `abrq run`
//! processes share one database, one followed input file and two local
//! destinations; a sampler reads every mark and lease from the database
//! every 30ms for the whole test, so a mark that moves back even for a
//! moment, or an epoch written by a holder that lost it, is seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::feed::{record, Feeder};
use crate::common::*;
use abrq_sinks::relational::sqlx::{self, postgres::PgPool};

const STREAM: &str = "orders";
const DESTS: [&str; 2] = ["lake", "archive"];
const LEASE_TIMEOUT: Duration = Duration::from_secs(3);
/// A third of the lease timeout: the default, written out.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Records appended to the followed file per second.
const RATE: u64 = 800;
/// The longest a takeover may take after the freeze: the lease timeout
/// and a few heartbeats, with room for a loaded machine.
const TAKEOVER: Duration = Duration::from_secs(45);
/// How often the sampler reads marks and leases.
const SAMPLE_EVERY: Duration = Duration::from_millis(30);

struct Database {
    admin: PgPool,
    name: String,
}

impl Database {
    async fn fresh() -> (Database, String) {
        let pg = abrq_testkit::Postgres::from_env();
        let admin = PgPool::connect(&pg.url)
            .await
            .unwrap_or_else(|e| panic!("connect to postgres ({pg:?}): {e}"));
        let name = format!("abrq_fencing_e2e_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            sqlx::query(&sql).execute(&admin).await.expect(&sql);
        }
        let url = pg.url_for(&name).expect("a url");
        (Database { admin, name }, url)
    }

    async fn drop(self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = sqlx::query(&sql).execute(&self.admin).await;
    }
}

/// One row of `abrq.leases`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lease {
    resource: String,
    node_id: Option<String>,
    instance: Option<String>,
    epoch: i64,
    /// Held and not expired, by the database's clock.
    live: bool,
}

/// (resource, holder's instance, epoch)
type Split = (String, Option<String>, i64);

/// (resource, node_id, instance, epoch, live)
type LeaseTuple = (String, Option<String>, Option<String>, i64, bool);

async fn try_leases(pool: &PgPool) -> Result<Vec<Lease>, sqlx::Error> {
    let rows: Vec<LeaseTuple> = sqlx::query_as(
        "SELECT resource, node_id, instance, epoch,
                instance IS NOT NULL AND expires_at >= abrq.clock_ms()
         FROM abrq.leases ORDER BY resource",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(resource, node_id, instance, epoch, live)| Lease {
            resource,
            node_id,
            instance,
            epoch,
            live,
        })
        .collect())
}

async fn leases(pool: &PgPool) -> Vec<Lease> {
    try_leases(pool).await.expect("read abrq.leases")
}

/// Every destination's mark and the stream's last seq, read in one
/// statement (one snapshot).
async fn try_marks(pool: &PgPool) -> Result<(BTreeMap<String, i64>, i64), sqlx::Error> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT d.name, d.hwm, s.last_seq
         FROM abrq.destinations d JOIN abrq.streams s ON s.id = d.stream_id
         WHERE s.name = $1",
    )
    .bind(STREAM)
    .fetch_all(pool)
    .await?;
    let last_seq = rows.first().map_or(0, |r| r.2);
    Ok((
        rows.into_iter().map(|(d, hwm, _)| (d, hwm)).collect(),
        last_seq,
    ))
}

async fn marks(pool: &PgPool) -> (BTreeMap<String, i64>, i64) {
    try_marks(pool).await.expect("read abrq.destinations")
}

/// The sessions on the state database: what each runs or waits for, and
/// which sessions block it (an `idle in transaction` session of a frozen
/// process holds its locks until it runs again).
async fn sessions(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        r"SELECT format('pid %s port %s %s (xact %s) wait %s/%s blocked by %s: %s',
                        pid, client_port, state, clock_timestamp() - xact_start,
                        wait_event_type, wait_event, pg_blocking_pids(pid),
                        left(regexp_replace(query, '\s+', ' ', 'g'), 240))
          FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()
          ORDER BY pid",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_else(|e| vec![format!("(cannot read pg_stat_activity: {e})")])
}

/// Polls `f` until it holds; at the deadline panics with the leases and
/// the sessions on the state database.
async fn wait_state(
    pool: &PgPool,
    timeout: Duration,
    what: &str,
    mut f: impl AsyncFnMut() -> bool,
) {
    let start = Instant::now();
    loop {
        if f().await {
            return;
        }
        if start.elapsed() > timeout {
            let ls = leases(pool).await;
            let (hwm, last_seq) = marks(pool).await;
            panic!(
                "timed out after {timeout:?} waiting for: {what}\nleases: {ls:#?}\nmarks {hwm:?}, last_seq {last_seq}\nsessions on the state database:\n{}",
                sessions(pool).await.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the sampler read at one moment.
#[derive(Debug)]
struct Sample {
    at: Instant,
    hwm: BTreeMap<String, i64>,
    last_seq: i64,
    leases: Vec<Lease>,
}

/// Reads marks and leases every [`SAMPLE_EVERY`] until told to stop; until
/// the first process has made the schema, a failed read is retried.
fn start_sampler(pool: PgPool, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let read =
                async { Ok::<_, sqlx::Error>((try_marks(&pool).await?, try_leases(&pool).await?)) };
            match read.await {
                Ok(((hwm, last_seq), leases)) => samples.push(Sample {
                    at: Instant::now(),
                    hwm,
                    last_seq,
                    leases,
                }),
                Err(e) if samples.is_empty() => {
                    let _ = e; // no schema yet
                }
                Err(e) => panic!("the sampler cannot read the state: {e}"),
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        samples
    })
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}: {status}");
}

/// Sends SIGCONT to a stopped process when dropped, so that a failing
/// assertion never leaves it stopped (its `Abrq` kills it afterwards).
struct Frozen(u32);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn config(abrq: &Abrq, node: &str, url: &str, shared: &Path) -> String {
    let dests: String = DESTS
        .iter()
        .map(|d| {
            format!(
                r#"
[[streams.destinations]]
name = "{d}"
engine = "local"
database = "{root}"
format = "jsonl"
manifest = true
"#,
                root = shared.join("out").join(d).display()
            )
        })
        .collect();
    format!(
        r#"
data_dir = "{data}"

[state]
url = "{url}"
node_id = "{node}"
lease_timeout = "{lease}s"
heartbeat = "{beat}s"

[server]
listen = "{listen}"

[[streams]]
name = "{STREAM}"
[streams.source]
engine = "file"
path = "{input}"
follow = true
[streams.batch]
max_records = 200
max_wait = "100ms"
{dests}"#,
        data = abrq.p("data"),
        lease = LEASE_TIMEOUT.as_secs(),
        beat = HEARTBEAT.as_secs(),
        listen = abrq.listen(),
        input = shared.join("orders.ndjson").display(),
    )
}

fn held_by<'a>(ls: &'a [Lease], instance: &str) -> Vec<&'a Lease> {
    ls.iter()
        .filter(|l| l.live && l.instance.as_deref() == Some(instance))
        .collect()
}

fn instance_of(ls: &[Lease], node: &str) -> Option<String> {
    ls.iter()
        .find(|l| l.node_id.as_deref() == Some(node))
        .and_then(|l| l.instance.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn freezing_a_holder_past_its_lease_cannot_move_marks() {
    let started = Instant::now();
    let (db, url) = Database::fresh().await;
    let pool = PgPool::connect(&url).await.expect("connect to the state");
    let shared = tempfile::Builder::new()
        .prefix("abrq-fencing-")
        .tempdir()
        .expect("a temp dir");
    let input = shared.path().join("orders.ndjson");
    std::fs::File::create(&input).expect("create the input file");
    let resources: BTreeSet<String> = [format!("source/{STREAM}")]
        .into_iter()
        .chain(DESTS.iter().map(|d| format!("drain/{STREAM}/{d}")))
        .collect();

    let mut a = Abrq::new();
    let mut b = Abrq::new();
    a.write_config(&config(&a, "a", &url, shared.path()));
    b.write_config(&config(&b, "b", &url, shared.path()));

    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = start_sampler(pool.clone(), stop_sampling.clone());
    let feeder = Feeder::start(input.clone(), 10_000_000, RATE);
    wait_until(LONG, "the first records appended", async || {
        feeder.appended() > 0
    })
    .await;

    // A alone: it holds every lease.
    a.start().await;
    wait_state(&pool, LONG, "A to hold every lease", async || {
        let ls = leases(&pool).await;
        ls.len() == resources.len()
            && ls
                .iter()
                .all(|l| l.live && l.node_id.as_deref() == Some("a"))
    })
    .await;
    let ls = leases(&pool).await;
    assert_eq!(
        ls.iter()
            .map(|l| l.resource.clone())
            .collect::<BTreeSet<_>>(),
        resources,
        "{ls:?}"
    );
    let a_instance = instance_of(&ls, "a").expect("A's instance");
    println!(
        "[test] A holds every lease after {:?}: {ls:?}",
        started.elapsed()
    );

    // B joins: the fair share is 2 of 3, so A hands leases back and B
    // takes them, until the split (2 + 1 either way) holds still for a few
    // heartbeats.
    b.start().await;
    // the split last read (resource, holder, epoch), and since when
    let mut settled: Option<(Vec<Split>, Instant)> = None;
    wait_state(&pool, LONG, "A and B to share the leases", async || {
        let ls = leases(&pool).await;
        let b_instance = instance_of(&ls, "b").unwrap_or_default();
        let shared = ls.len() == resources.len()
            && ls.iter().all(|l| l.live)
            && !held_by(&ls, &a_instance).is_empty()
            && !held_by(&ls, &b_instance).is_empty();
        if !shared {
            settled = None;
            return false;
        }
        let split: Vec<_> = ls
            .iter()
            .map(|l| (l.resource.clone(), l.instance.clone(), l.epoch))
            .collect();
        match &settled {
            Some((prev, since)) if *prev == split => since.elapsed() >= 3 * HEARTBEAT,
            _ => {
                settled = Some((split, Instant::now()));
                false
            }
        }
    })
    .await;
    wait_state(
        &pool,
        LONG,
        "every destination to pass a batch",
        async || {
            let (hwm, _) = marks(&pool).await;
            hwm.len() == DESTS.len() && hwm.values().all(|&m| m > 0)
        },
    )
    .await;

    // Freeze A while it holds leases and the feed goes on.
    let before = leases(&pool).await;
    let b_instance = instance_of(&before, "b").expect("B's instance");
    let a_held: BTreeMap<String, i64> = held_by(&before, &a_instance)
        .into_iter()
        .map(|l| (l.resource.clone(), l.epoch))
        .collect();
    assert!(!a_held.is_empty(), "A holds nothing to lose: {before:?}");
    let (frozen_marks, frozen_seq) = marks(&pool).await;
    let a_pid = a.pid().expect("A runs");
    println!(
        "[test] freezing A (pid {a_pid}) after {:?}; leases: {before:?}; marks {frozen_marks:?}, last_seq {frozen_seq}",
        started.elapsed()
    );
    signal(a_pid, "-STOP");
    let frozen_at = Instant::now();
    let thaw = Frozen(a_pid);

    // B takes every lease over: A's at a higher epoch, its own kept.
    // A lease expires LEASE_TIMEOUT after its last renewal: B must hold
    // all of them within a few heartbeats after that, whatever A was
    // doing when it froze.
    wait_state(&pool, TAKEOVER, "B to take over every lease", async || {
        let ls = leases(&pool).await;
        ls.len() == resources.len()
            && ls.iter().all(|l| {
                l.live
                    && l.instance.as_deref() == Some(b_instance.as_str())
                    && a_held.get(&l.resource).is_none_or(|&e| l.epoch > e)
            })
    })
    .await;
    let takeover = frozen_at.elapsed();
    let taken = leases(&pool).await;
    let taken_epochs: BTreeMap<String, i64> = taken
        .iter()
        .map(|l| (l.resource.clone(), l.epoch))
        .collect();
    for l in &before {
        let now = taken_epochs[&l.resource];
        if a_held.contains_key(&l.resource) {
            assert_eq!(
                now,
                l.epoch + 1,
                "{}: B's claim of A's expired lease takes the next epoch",
                l.resource
            );
        } else {
            assert_eq!(now, l.epoch, "{}: B kept its own lease", l.resource);
        }
    }
    assert!(
        takeover >= LEASE_TIMEOUT - HEARTBEAT,
        "B took over after {takeover:?}, before A's lease ({LEASE_TIMEOUT:?}) could expire"
    );
    println!("[test] B took over every lease {takeover:?} after A froze: {taken:?}");

    // B delivers meanwhile: it stages and every mark moves past where it
    // stood at the takeover; A stays frozen at least lease_timeout plus
    // two heartbeats.
    let (taken_marks, taken_seq) = marks(&pool).await;
    wait_state(
        &pool,
        LONG,
        "B to stage and deliver while A is frozen",
        async || {
            let (hwm, last_seq) = marks(&pool).await;
            last_seq > taken_seq
                && hwm.iter().all(|(d, m)| *m > taken_marks[d])
                && frozen_at.elapsed() >= LEASE_TIMEOUT + 2 * HEARTBEAT
        },
    )
    .await;
    let st = b
        .wait_status(STREAM, "B's status to show it holds everything", |st| {
            st["source"]["holder"]["node_id"] == "b"
                && st["source"]["holder"]["here"] == true
                && DESTS.iter().all(|d| {
                    let h = &dest_of(st, d)["holder"];
                    h["node_id"] == "b" && h["here"] == true
                })
        })
        .await;
    for d in DESTS {
        let h = &dest_of(&st, d)["holder"];
        assert_eq!(
            h["epoch"].as_i64(),
            Some(taken_epochs[&format!("drain/{STREAM}/{d}")]),
            "{d}: B's status shows another epoch than the database: {h}"
        );
    }
    let (moved_marks, moved_seq) = marks(&pool).await;
    println!(
        "[test] while A was frozen ({:?}) B moved last_seq {frozen_seq} -> {moved_seq}, marks {frozen_marks:?} -> {moved_marks:?}",
        frozen_at.elapsed()
    );

    // Thaw A: whatever it had in flight is refused; it notices the loss.
    drop(thaw);
    let thawed_at = Instant::now();
    println!("[test] A thawed after {:?} frozen", frozen_at.elapsed());
    a.wait_for("A to count its lost leases", async || {
        a.metric("abrq_node_leases_lost_total", &[("node", "a")])
            .await
            > 0.0
    })
    .await;
    println!(
        "[test] A counted lost leases {:?} after the thaw",
        thawed_at.elapsed()
    );
    // A few more heartbeats with the feed going on.
    tokio::time::sleep(3 * HEARTBEAT).await;
    let lost = a
        .metric("abrq_node_leases_lost_total", &[("node", "a")])
        .await;
    a.assert_alive();
    b.assert_alive();
    let log = a.log();
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("was refused")).collect();
    let lost_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("lease lost to another process"))
        .collect();
    println!(
        "[test] A's log: {} refused writes, {} lost leases",
        refused.len(),
        lost_lines.len()
    );
    for l in refused.iter().chain(&lost_lines).take(12) {
        println!("[test]   A: {l}");
    }
    assert!(
        !refused.is_empty() || !lost_lines.is_empty(),
        "A's log says nothing of refused writes or lost leases"
    );
    assert_eq!(
        lost as usize,
        a_held.len(),
        "A lost every lease it held when frozen, once each"
    );
    assert_eq!(
        lost_lines.len(),
        a_held.len(),
        "one 'lease lost' line per lease A held when frozen"
    );
    // Each lease A lost is B's at the epoch B took, or A's again at a
    // newer one (handed back by B for the fair share), never A's old one.
    let after = leases(&pool).await;
    for l in &after {
        let took = taken_epochs[&l.resource];
        match l.instance.as_deref() {
            Some(i) if i == a_instance => assert!(
                l.epoch > took,
                "{}: A holds it at epoch {} after B took it at {took}: {after:?}",
                l.resource,
                l.epoch
            ),
            _ => assert!(
                l.epoch >= took,
                "{}: epoch went back: {after:?}",
                l.resource
            ),
        }
    }
    println!("[test] leases after the thaw: {after:?}");

    // A takes part again: B is above the fair share and hands a lease back.
    wait_state(&pool, LONG, "A to hold a lease again", async || {
        a.assert_alive();
        !held_by(&leases(&pool).await, &a_instance).is_empty()
    })
    .await;
    let rejoined = leases(&pool).await;
    println!(
        "[test] A holds a lease again {:?} after the thaw: {rejoined:?}",
        thawed_at.elapsed()
    );

    // The feed ends; everything appended is delivered everywhere.
    feeder.stop();
    let appended = feeder.join();
    println!(
        "[test] appended {appended} records; draining after {:?}",
        started.elapsed()
    );
    let (mut last, mut since) = (-1, Instant::now());
    wait_state(
        &pool,
        LONG,
        "every destination to pass every batch",
        async || {
            a.assert_alive();
            b.assert_alive();
            let (hwm, last_seq) = marks(&pool).await;
            if last_seq != last {
                (last, since) = (last_seq, Instant::now());
            }
            since.elapsed() >= Duration::from_secs(2)
                && hwm.values().all(|&m| m == last_seq)
                && DESTS.iter().all(|d| {
                    read_dest(&shared.path().join("out").join(d)).record_count() as u64 >= appended
                })
        },
    )
    .await;
    let (final_marks, last_seq) = marks(&pool).await;
    println!(
        "[test] drained after {:?}: last_seq {last_seq}, marks {final_marks:?}",
        started.elapsed()
    );
    a.assert_alive();
    b.assert_alive();

    stop_sampling.store(true, Ordering::SeqCst);
    let samples = sampler.await.expect("the sampler");
    check_samples(&samples, &a_instance, &taken_epochs, frozen_at, thawed_at);

    // Each destination holds every record exactly once, each batch seq in
    // one object: the spool was staged gaplessly, without a batch staged
    // twice by A after the thaw.
    let mut placement: Option<BTreeMap<u64, u64>> = None;
    for d in DESTS {
        let out = read_dest(&shared.path().join("out").join(d));
        let seqs = out.verify_manifests(STREAM);
        let want: Vec<u64> = (1..=last_seq as u64).collect();
        assert_eq!(
            seqs.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            want,
            "{d}: one object per staged batch, every seq from 1 to last_seq"
        );
        let ids = by_id(&out, "id");
        assert_eq!(
            ids.keys().copied().collect::<Vec<_>>(),
            (1..=appended).collect::<Vec<_>>(),
            "{d}: every appended record, once"
        );
        for (id, r) in &ids {
            assert_eq!(*r, &record(*id), "{d}: record {id} altered");
        }
        let mut seq_of = BTreeMap::new();
        for (key, o) in &out.objects {
            let seq = u(&out.manifests[key]["seq"]);
            for r in &o.records {
                seq_of.insert(u(&r["id"]), seq);
            }
        }
        match &placement {
            None => placement = Some(seq_of),
            Some(p) => assert!(
                *p == seq_of,
                "{d}: records sit in other batches than at {}",
                DESTS[0]
            ),
        }
        if !out.temp_files.is_empty() {
            println!("[test] {d}: temporary files left: {:?}", out.temp_files);
        }
    }
    let b_lost = b
        .metric("abrq_node_leases_lost_total", &[("node", "b")])
        .await;
    println!(
        "[test] B lost {} leases (it was never frozen)",
        b_lost as u64
    );
    println!(
        "[test] summary: takeover {takeover:?} after the freeze; {} refused writes and {} lost leases in A's log; {} samples; {appended} records in {last_seq} batches; total {:?}",
        refused.len(),
        lost_lines.len(),
        samples.len(),
        started.elapsed()
    );

    a.kill();
    b.kill();
    pool.close().await;
    db.drop().await;
}

/// Marks and last_seq never went back, a mark never passed last_seq, each
/// lease's epoch only grew and named one holder, and after the thaw A's
/// instance shows on a lease only at an epoch above the one B took it at.
fn check_samples(
    samples: &[Sample],
    a_instance: &str,
    taken_epochs: &BTreeMap<String, i64>,
    frozen_at: Instant,
    thawed_at: Instant,
) {
    let during = samples
        .iter()
        .filter(|s| s.at > frozen_at && s.at < thawed_at)
        .count();
    println!(
        "[test] {} samples, {during} while A was frozen",
        samples.len()
    );
    assert!(samples.len() >= 100, "too few samples: {}", samples.len());
    assert!(during >= 20, "too few samples while A was frozen: {during}");
    for w in samples.windows(2) {
        let (p, n) = (&w[0], &w[1]);
        assert!(
            n.last_seq >= p.last_seq,
            "last_seq went back: {} -> {}",
            p.last_seq,
            n.last_seq
        );
        for (d, m) in &p.hwm {
            let next = n.hwm.get(d).copied().unwrap_or(i64::MIN);
            assert!(next >= *m, "{d}: high-water mark went back {m} -> {next}");
        }
        for l in &p.leases {
            if let Some(nl) = n.leases.iter().find(|x| x.resource == l.resource) {
                assert!(
                    nl.epoch >= l.epoch,
                    "{}: epoch went back {} -> {}",
                    l.resource,
                    l.epoch,
                    nl.epoch
                );
            }
        }
    }
    for s in samples {
        for (d, m) in &s.hwm {
            assert!(
                *m <= s.last_seq,
                "{d}: mark {m} past last_seq {}",
                s.last_seq
            );
        }
    }
    // (resource, epoch) -> the one instance that held it
    let mut holder: BTreeMap<(String, i64), String> = BTreeMap::new();
    for s in samples {
        for l in &s.leases {
            let Some(i) = &l.instance else { continue };
            let prev = holder
                .entry((l.resource.clone(), l.epoch))
                .or_insert_with(|| i.clone());
            assert_eq!(
                prev, i,
                "{} epoch {} held by two instances",
                l.resource, l.epoch
            );
        }
    }
    // Once thawed, A shows on a lease only at an epoch above the one B
    // took it over at: never back at the epoch it held when frozen.
    for s in samples.iter().filter(|s| s.at >= thawed_at) {
        for l in &s.leases {
            if l.instance.as_deref() == Some(a_instance) {
                let took = taken_epochs[&l.resource];
                assert!(
                    l.epoch > took,
                    "{}: A shows at epoch {} after the thaw; B took it at {took}",
                    l.resource,
                    l.epoch
                );
            }
        }
    }
}
