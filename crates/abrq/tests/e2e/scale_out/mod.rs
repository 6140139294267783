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
//!
//! Here: the tests; `nodes` runs the processes, `state` reads the shared
//! state's leases, `producer` appends the input and reads the outputs.

mod nodes;
mod producer;
mod state;

use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::{self, Row};
use rand::Rng;

use crate::common::turns::Alone;
use crate::common::*;
use nodes::Nodes;
use producer::{local_ids, missing, record, Appender};
use state::{drain_resource, leases, live_lease, source_resource, Database};

const STREAM: &str = "orders";
const LEASE_TIMEOUT: Duration = Duration::from_secs(3);
const HEARTBEAT: Duration = Duration::from_secs(1);
/// What a takeover may take past the lease timeout and one heartbeat.
const SLACK: Duration = Duration::from_secs(1);
/// The whole test, whatever it waits for.
const OVERALL: Duration = Duration::from_secs(180);

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
    let mut c = Nodes::new(alone, 3, &state, |shared| {
        vec![
            Destination::local("lake_a", shared.join("lake_a")).format("jsonl"),
            Destination::local("lake_b", shared.join("lake_b")).format("jsonl"),
            Destination::postgres("pg")
                .connection(&sink.url)
                .schema("public")
                .table("orders"),
        ]
    });
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
    let mut c = Nodes::new(alone, 3, &state, |shared| {
        vec![
            Destination::local("lake_a", shared.join("lake_a")).format("jsonl"),
            Destination::local("lake_b", shared.join("lake_b")).format("jsonl"),
        ]
    });
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

    // Pause through another process's API, once its view (read at each
    // heartbeat) names the holder: processes started together claim at
    // once, after the pauser may have read the leases.
    let holder_id = Nodes::node_id(holder);
    wait_until(
        HEARTBEAT * 3,
        &format!("node-{pauser} to show node-{holder} holding {d}"),
        async || {
            let st = c.nodes[pauser].status(STREAM).await;
            dest_of(&st, d)["holder"]["node_id"] == holder_id.as_str()
        },
    )
    .await;
    let st = c.nodes[pauser].status(STREAM).await;
    assert_eq!(dest_of(&st, d)["holder"]["here"], false, "{st}");
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

    // Everything appended reaches both local destinations (the last
    // lines may be staged after the statuses waited on above, so the
    // wait is on what the lakes hold, not on a mark).
    let total = next;
    wait_until(LONG, "every id in both lakes", async || {
        ["lake_a", "lake_b"]
            .iter()
            .all(|dd| local_ids(&c.out(dd)).1.len() as u64 >= total)
    })
    .await;
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
