//! Dead letters end to end: a batch that exhausts its retry budget on a
//! broken destination becomes a `retries_exhausted` dead letter for that
//! destination only; replay re-drives it to that one destination once it is
//! fixed (exactly one object, never a resend to the healthy one); discard is
//! recorded as data loss (audit entry, metric, state). Then the same for
//! replay-all and discard-all.
//!
//! `bad`'s base directory is broken by making it a plain file.

use std::path::Path;

use crate::common::*;
use serde_json::Value;

const STREAM: &str = "events";
const DL: &str = "/v1/streams/events/destinations/bad/dead-letters";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .gc_interval("100ms")
        .stream(
            Stream::new(STREAM, Source::http())
                .destination(Destination::local("good", abrq.p("out/good")).format("jsonl"))
                .destination(
                    Destination::local("bad", abrq.p("out/bad"))
                        .format("jsonl")
                        .max_attempts(3)
                        .backoff("10ms", "20ms")
                        .failure_threshold(1000),
                ),
        )
        .to_string()
}

/// Ten NDJSON records tagged with `tag`.
fn body(tag: &str) -> String {
    (0..10)
        .map(|i| format!("{{\"tag\":\"{tag}\",\"i\":{i}}}\n"))
        .collect()
}

/// A plain file where the base directory goes (whatever was there before).
fn break_dir(dir: &Path) {
    if dir.is_dir() {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::write(dir, "not a directory\n").unwrap();
}

/// The directory back, empty (a break removed what was in it).
fn fix_dir(dir: &Path) {
    if dir.is_file() {
        std::fs::remove_file(dir).unwrap();
    }
    std::fs::create_dir_all(dir).unwrap();
}

/// Waits until bad has `n` pending dead letters; returns them.
async fn wait_pending(abrq: &Abrq, n: usize) -> Vec<Value> {
    let mut found = Vec::new();
    abrq.wait_for(&format!("{n} pending dead letters for bad"), async || {
        found = abrq
            .dead_letters(STREAM, "bad")
            .await
            .into_iter()
            .filter(|d| d["state"] == "pending")
            .collect();
        found.len() == n
    })
    .await;
    found
}

async fn wait_state(abrq: &Abrq, id: &Value, state: &str) -> Value {
    let mut row = Value::Null;
    abrq.wait_for(&format!("dead letter {id} to be {state}"), async || {
        row = abrq
            .dead_letters(STREAM, "bad")
            .await
            .into_iter()
            .find(|d| &d["id"] == id)
            .expect("dead letter listed");
        row["state"] == state
    })
    .await;
    row
}

/// The tags of the records in bad's output, sorted, with their counts.
fn tags(out: &DestOutput) -> Vec<(String, usize)> {
    let mut m = std::collections::BTreeMap::new();
    for r in out.records() {
        *m.entry(r["tag"].as_str().unwrap().to_string()).or_insert(0) += 1;
    }
    m.into_iter().collect()
}

fn discard_audited(audit: &Value, id: &Value) -> bool {
    audit["entries"].as_array().unwrap().iter().any(|e| {
        e["action"] == "discard"
            && e["destination"] == "bad"
            && &e["detail"]["id"] == id
            && e["detail"]["records"] == 10
            && e["actor"] == "e2e-operator"
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_replay_and_discard_one_and_all() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq));
    let bad_dir = abrq.path("out/bad");
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    break_dir(&bad_dir);
    abrq.start().await;
    let operator = [("x-abrq-actor", "e2e-operator")];

    // --- one batch exhausts its 3 attempts and is dead-lettered ---
    let ack = abrq.ingest(STREAM, &body("a")).await;
    assert_eq!(ack["records"], 10, "{ack}");
    assert_eq!(ack["last_seq"], 1, "{ack}");
    let dl = wait_pending(&abrq, 1).await.remove(0);
    assert_eq!(dl["reason_class"], "retries_exhausted", "{dl}");
    assert_eq!(
        (u(&dl["seq"]), u(&dl["records"]), u(&dl["attempts"])),
        (1, 10, 3),
        "{dl}"
    );
    let id = dl["id"].clone();
    // The healthy destination got it; bad moved past it (no head-of-line).
    let st = abrq
        .wait_status(STREAM, "good delivered seq 1", |st| {
            dest_of(st, "good")["high_water_mark"] == 1
        })
        .await;
    let bad = dest_of(&st, "bad");
    assert_eq!(
        (u(&bad["high_water_mark"]), u(&bad["pending_dead_letters"])),
        (1, 1)
    );
    let m = abrq.metrics().await;
    let dead = |m: &Metrics, class| {
        m.get(
            "abrq_stream_fanout_dead_lettered_batches_total",
            &[("destination", "bad"), ("reason_class", class)],
        )
    };
    assert_eq!(dead(&m, "retries_exhausted"), 1.0);
    assert_eq!(
        m.get(
            "abrq_stream_fanout_dead_letters_pending",
            &[("destination", "bad")]
        ),
        1.0
    );

    // Both destinations passed seq 1, so the GC drops it from the spool: a
    // replay must work from the dead letter's own copy.
    abrq.wait_status(STREAM, "the GC to empty the spool", |st| {
        st["spool"]["batches"] == 0
    })
    .await;

    // --- fixed, replayed: exactly one object with the 10 records in bad ---
    fix_dir(&bad_dir);
    let r = abrq.post(&format!("{DL}/{id}/replay")).await;
    assert_eq!(r["requested"], 1, "{r}");
    wait_state(&abrq, &id, "replayed").await;
    let out = read_dest(&bad_dir);
    assert_eq!(out.objects.len(), 1, "{:?}", out.objects.keys());
    assert_eq!(tags(&out), vec![("a".to_string(), 10)]);
    let m = abrq.metrics().await;
    let delivered = |m: &Metrics, d| {
        m.get(
            "abrq_stream_fanout_delivered_batches_total",
            &[("destination", d)],
        )
    };
    assert_eq!(
        delivered(&m, "good"),
        1.0,
        "replay is targeted: good got nothing again"
    );
    assert_eq!(delivered(&m, "bad"), 1.0);
    assert_eq!(read_dest(&abrq.path("out/good")).objects.len(), 1);
    // A replayed dead letter is no longer pending: replaying again conflicts.
    let (code, _) = abrq
        .call(
            reqwest::Method::POST,
            &format!("{DL}/{id}/replay"),
            None,
            &[],
        )
        .await;
    assert_eq!(code, 409);

    // --- broken again: the next batch is dead-lettered, then discarded ---
    break_dir(&bad_dir);
    abrq.ingest(STREAM, &body("b")).await;
    let dl = wait_pending(&abrq, 1).await.remove(0);
    assert_eq!(
        (u(&dl["seq"]), dl["reason_class"].as_str()),
        (2, Some("retries_exhausted"))
    );
    let id = dl["id"].clone();
    let (code, r) = abrq
        .call(
            reqwest::Method::POST,
            &format!("{DL}/{id}/discard"),
            None,
            &operator,
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["discarded"][0]["state"], "discarded", "{r}");
    assert_eq!(wait_state(&abrq, &id, "discarded").await["records"], 10);
    let audit = abrq.get("/v1/audit").await;
    assert!(
        discard_audited(&audit, &id),
        "no discard audit entry for {id}: {audit}"
    );
    let m = abrq.metrics().await;
    assert_eq!(
        m.get(
            "abrq_stream_fanout_discarded_records_total",
            &[("destination", "bad")]
        ),
        10.0
    );
    assert_eq!(
        m.get(
            "abrq_stream_fanout_dead_letters_pending",
            &[("destination", "bad")]
        ),
        0.0
    );

    // --- two more dead letters, replayed with replay-all ---
    abrq.ingest(STREAM, &body("c")).await;
    abrq.ingest(STREAM, &body("d")).await;
    let two = wait_pending(&abrq, 2).await;
    fix_dir(&bad_dir);
    let r = abrq.post(&format!("{DL}/replay-all")).await;
    assert_eq!(r["requested"], 2, "{r}");
    for dl in &two {
        wait_state(&abrq, &dl["id"], "replayed").await;
    }
    let out = read_dest(&bad_dir);
    assert_eq!(out.objects.len(), 2, "{:?}", out.objects.keys());
    assert_eq!(
        tags(&out),
        vec![("c".to_string(), 10), ("d".to_string(), 10)]
    );

    // --- two more, dropped with discard-all ---
    break_dir(&bad_dir);
    abrq.ingest(STREAM, &body("e")).await;
    abrq.ingest(STREAM, &body("f")).await;
    let two = wait_pending(&abrq, 2).await;
    let (code, r) = abrq
        .call(
            reqwest::Method::POST,
            &format!("{DL}/discard-all"),
            None,
            &operator,
        )
        .await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["discarded"].as_array().map(Vec::len), Some(2), "{r}");
    let audit = abrq.get("/v1/audit").await;
    for dl in &two {
        assert_eq!(
            wait_state(&abrq, &dl["id"], "discarded").await["state"],
            "discarded"
        );
        assert!(
            discard_audited(&audit, &dl["id"]),
            "no audit for {}: {audit}",
            dl["id"]
        );
    }
    let m = abrq.metrics().await;
    assert_eq!(
        m.get(
            "abrq_stream_fanout_discarded_records_total",
            &[("destination", "bad")]
        ),
        30.0
    );
    assert_eq!(dead(&m, "retries_exhausted"), 6.0);
    let bad = abrq.dest(STREAM, "bad").await;
    assert_eq!(
        (u(&bad["high_water_mark"]), u(&bad["pending_dead_letters"])),
        (6, 0)
    );

    // good got all six batches once each, untouched by any of this.
    abrq.wait_status(STREAM, "good delivered all 6 batches", |st| {
        dest_of(st, "good")["high_water_mark"] == 6
    })
    .await;
    let good = read_dest(&abrq.path("out/good"));
    assert_eq!(good.objects.len(), 6);
    assert_eq!(
        tags(&good),
        ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|t| (t.to_string(), 10))
            .collect::<Vec<_>>()
    );
}
