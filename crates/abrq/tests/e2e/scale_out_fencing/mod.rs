//! Scale-out on PostgreSQL state: a holder frozen past its lease (SIGSTOP)
//! loses its work to the other process, and once it runs again (SIGCONT)
//! nothing it still had in flight may land in the state: its writes carry
//! an epoch that was taken over, so they are refused. Two real `abrq run`
//! processes share one database, one followed input file and two local
//! destinations; a sampler reads every mark and lease from the database
//! every 30ms for the whole test, so a mark that moves back even for a
//! moment, or an epoch written by a holder that lost it, is seen.
//!
//! Here: the test; `state` reads the shared state's leases and marks,
//! `sampler` samples them through the test and checks the samples.

mod sampler;
mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::feed::{record, Feeder};
use crate::common::*;
use abrq_sinks::relational::sqlx::postgres::PgPool;
use sampler::{check_samples, start_sampler};
use state::{held_by, instance_of, leases, marks, wait_state, Database};

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

/// (resource, holder's instance, epoch)
type Split = (String, Option<String>, i64);

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
    let dests = DESTS.iter().map(|d| {
        Destination::local(d, shared.join("out").join(d))
            .format("jsonl")
            .manifest()
    });
    Config::new(abrq)
        .state_url(url)
        .node_id(node)
        .lease_timeout(&format!("{}s", LEASE_TIMEOUT.as_secs()))
        .heartbeat(&format!("{}s", HEARTBEAT.as_secs()))
        .stream(
            Stream::new(STREAM, Source::file(shared.join("orders.ndjson")).follow())
                .max_records(200)
                .max_wait("100ms")
                .destinations(dests),
        )
        .to_string()
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
