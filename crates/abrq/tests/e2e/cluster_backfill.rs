//! A backfill asked through a process that does not hold the source, on
//! shared PostgreSQL state: it reaches the holder through the shared
//! state and runs there, once. The process it was asked through never
//! runs it itself, not even after it takes the source over from a killed
//! holder (a request parked in that process's memory used to copy the
//! table a second time after a rebalance).
//!
//! And a holder frozen (SIGSTOP) with its replication session open: the
//! other process takes the lease and ends the frozen walsender, so the
//! stream goes on within the lease timeout and a few heartbeats, not the
//! server's `wal_sender_timeout` (60 s on the test cluster).

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

const ROWS: i64 = 300;

/// The process (of two) whose status says it holds the source.
async fn holder(nodes: &[Abrq]) -> Option<usize> {
    for (i, n) in nodes.iter().enumerate() {
        if n.pid().is_none() {
            continue;
        }
        let st = n.status("s").await;
        if st["source"]["holder"]["here"] == true {
            return Some(i);
        }
    }
    None
}

fn copied(out: &std::path::Path) -> Vec<u64> {
    let mut ids: Vec<u64> = read_dest(out).records().map(|r| u(&r["id"])).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_asked_through_any_process_runs_once() {
    let pg = abrq_testkit::Postgres::from_env();
    let admin = PgPool::connect(&pg.url).await.expect("postgres");
    let tag = pg::tag();
    let state_db = format!("abrq_bf_state_{tag}");
    sqlx::query(&format!("CREATE DATABASE {state_db}"))
        .execute(&admin)
        .await
        .unwrap();
    let state_url = pg.url_for(&state_db).expect("a url");
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let (schema, slot) = (format!("cdc_bfc_{tag}"), format!("abrq_bfc_{tag}"));
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE \"{schema}\".items (id bigint PRIMARY KEY, note text)"),
        format!(
            "INSERT INTO \"{schema}\".items SELECT g, 'row ' || g FROM generate_series(1, {ROWS}) g"
        ),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let shared = tempfile::tempdir().unwrap();
    let out = shared.path().join("out");
    let mut nodes = [Abrq::new(), Abrq::new()];
    for (i, n) in nodes.iter().enumerate() {
        n.write_config(
            &Config::new(n)
                .state_url(&state_url)
                .node_id(&format!("node-{i}"))
                .lease_timeout("3s")
                .heartbeat("1s")
                .stream(
                    Stream::new(
                        "s",
                        Source::postgres("cdc")
                            .connection(&pg::cdc_url())
                            .table(&format!("{schema}.items"))
                            .slot(&slot)
                            .publication(&slot)
                            .snapshot("never"),
                    )
                    .max_wait("100ms")
                    .destination(Destination::local("out", &out).format("jsonl")),
                )
                .to_string(),
        );
    }
    for n in nodes.iter_mut() {
        n.start().await;
    }
    wait_until(LONG, "one process holds the source", async || {
        holder(&nodes).await.is_some()
    })
    .await;
    let first = holder(&nodes).await.unwrap();
    let other = 1 - first;

    // asked through the process that does not read the source
    let (code, body) = nodes[other]
        .call(
            reqwest::Method::POST,
            &format!("/v1/streams/s/backfill?table={schema}.items"),
            None,
            &[],
        )
        .await;
    assert_eq!(code, 202, "{body}");
    let all: Vec<u64> = (1..=ROWS as u64).collect();
    wait_until(LONG, "the table copied", async || copied(&out) == all).await;
    nodes[first]
        .wait_status("s", "the backfill done", |st| {
            let b = &st["source"]["position"]["backfill"];
            b["state"] == "idle" && b["asked"].as_u64() == Some(0)
        })
        .await;

    // the holder goes; the process asked takes the source over and must
    // not copy the table again
    nodes[first].kill();
    wait_until(LONG, "the other process takes the source", async || {
        holder(&nodes).await == Some(other)
    })
    .await;
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".items VALUES ({}, 'after')",
        ROWS + 1
    ))
    .execute(&src)
    .await
    .unwrap();
    let mut after = all.clone();
    after.push(ROWS as u64 + 1);
    wait_until(LONG, "a change after the takeover", async || {
        copied(&out).last() == Some(&(ROWS as u64 + 1))
    })
    .await;
    // a second copy would begin within a few heartbeats of the takeover
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(copied(&out), after, "the table was copied again");
    let audit = nodes[other].get("/v1/audit").await;
    let asked = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "backfill")
        .count();
    assert_eq!(asked, 1, "{audit}");
    nodes[other].kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {state_db} WITH (FORCE)"))
        .execute(&admin)
        .await;
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_holder_loses_its_slot_to_the_next_holder() {
    let pg = abrq_testkit::Postgres::from_env();
    let admin = PgPool::connect(&pg.url).await.expect("postgres");
    let tag = pg::tag();
    let state_db = format!("abrq_frz_state_{tag}");
    sqlx::query(&format!("CREATE DATABASE {state_db}"))
        .execute(&admin)
        .await
        .unwrap();
    let state_url = pg.url_for(&state_db).expect("a url");
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let (schema, slot) = (format!("cdc_frz_{tag}"), format!("abrq_frz_{tag}"));
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE \"{schema}\".items (id bigint PRIMARY KEY)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let insert = |id: u64| format!("INSERT INTO \"{schema}\".items VALUES ({id})");
    let shared = tempfile::tempdir().unwrap();
    let out = shared.path().join("out");
    let mut nodes = [Abrq::new(), Abrq::new()];
    for (i, n) in nodes.iter().enumerate() {
        n.write_config(
            &Config::new(n)
                .state_url(&state_url)
                .node_id(&format!("node-{i}"))
                .lease_timeout("3s")
                .heartbeat("1s")
                .stream(
                    Stream::new(
                        "s",
                        Source::postgres("cdc")
                            .connection(&pg::cdc_url())
                            .table(&format!("{schema}.items"))
                            .slot(&slot)
                            .publication(&slot)
                            .snapshot("never"),
                    )
                    .max_wait("100ms")
                    .destination(Destination::local("out", &out).format("jsonl")),
                )
                .to_string(),
        );
    }
    for n in nodes.iter_mut() {
        n.start().await;
    }
    wait_until(LONG, "one process holds the source", async || {
        holder(&nodes).await.is_some()
    })
    .await;
    let first = holder(&nodes).await.unwrap();
    sqlx::query(&insert(1)).execute(&src).await.unwrap();
    wait_until(LONG, "the first row", async || copied(&out) == vec![1]).await;

    let frozen = nodes[first].pid().unwrap();
    signal(frozen, "-STOP");
    let since = std::time::Instant::now();
    sqlx::query(&insert(2)).execute(&src).await.unwrap();
    wait_until(LONG, "the row after the freeze", async || {
        copied(&out).contains(&2)
    })
    .await;
    let took = since.elapsed();
    signal(frozen, "-CONT");
    assert!(
        took < Duration::from_secs(40),
        "the slot came free only after {took:?}"
    );
    for n in &nodes {
        n.kill();
    }
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {state_db} WITH (FORCE)"))
        .execute(&admin)
        .await;
}
