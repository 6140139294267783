//! Spool GC against disable and pause, the difference the user's document
//! warns about:
//!
//! - Disabling `b` takes it out of the GC minimum: the GC deletes batches
//!   `b` never got, and re-enabling it reports exactly that range (API
//!   response, status, metric) instead of hiding it.
//! - Pausing `b` keeps it in the minimum: the spool holds every batch it
//!   lacks, and after resume it receives them all, with nothing skipped.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const STREAM: &str = "clicks";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .gc_interval("100ms")
        .stream(
            Stream::new(STREAM, Source::http())
                .destination(Destination::local("a", abrq.p("out/a")).format("jsonl"))
                .destination(Destination::local("b", abrq.p("out/b")).format("csv.gz")),
        )
        .to_string()
}

/// One batch: three records tagged with the seq they should get.
async fn ingest_batch(abrq: &Abrq, seq: u64) {
    let body: String = (0..3)
        .map(|i| format!("{{\"batch\":{seq},\"i\":{i}}}\n"))
        .collect();
    let ack = abrq.ingest(STREAM, &body).await;
    assert_eq!(ack["last_seq"], seq, "{ack}");
}

/// Which batches a destination holds (by the records' tag), sorted.
fn batches_in(abrq: &Abrq, d: &str) -> Vec<u64> {
    let out = read_dest(&abrq.path(&format!("out/{d}")));
    assert_eq!(
        out.record_count(),
        out.objects.len() * 3,
        "{d}: whole batches only"
    );
    let mut tags: Vec<u64> = out
        .objects
        .values()
        .map(|o| {
            let t = &o.records[0]["batch"];
            t.as_u64()
                .or_else(|| t.as_str().and_then(|s| s.parse().ok()))
                .expect("batch tag")
        })
        .collect();
    tags.sort();
    tags
}

fn hwm(st: &Value, d: &str) -> u64 {
    u(&dest_of(st, d)["high_water_mark"])
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_skips_a_disabled_destination_visibly_and_keeps_a_paused_ones_batches() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq));
    abrq.start().await;
    let skipped_metric = async || {
        abrq.metric(
            "abrq_stream_fanout_skipped_batches_total",
            &[("stream", STREAM), ("destination", "b")],
        )
        .await
    };

    ingest_batch(&abrq, 1).await;
    abrq.wait_status(STREAM, "a and b delivered seq 1", |st| {
        hwm(st, "a") == 1 && hwm(st, "b") == 1
    })
    .await;

    // --- disable b: the GC passes it ---
    let r = abrq.act(STREAM, "b", "disable").await;
    assert_eq!(r["skipped"], Value::Null, "{r}");
    ingest_batch(&abrq, 2).await;
    ingest_batch(&abrq, 3).await;
    let st = abrq
        .wait_status(
            STREAM,
            "a delivered seq 3 and the GC emptied the spool",
            |st| hwm(st, "a") == 3 && st["spool"]["batches"] == 0,
        )
        .await;
    let b = dest_of(&st, "b");
    assert_eq!(
        (b["enabled"].clone(), u(&b["high_water_mark"])),
        (Value::Bool(false), 1)
    );

    // --- enable b: the skipped range is reported, never hidden ---
    let r = abrq.act(STREAM, "b", "enable").await;
    assert_eq!(r["skipped"]["from_seq"], 2, "{r}");
    assert_eq!(r["skipped"]["to_seq"], 3, "{r}");
    let b = abrq.dest(STREAM, "b").await;
    let ranges = b["skipped_ranges"].as_array().expect("skipped_ranges");
    assert_eq!(ranges.len(), 1, "{b}");
    assert_eq!(
        (u(&ranges[0]["from_seq"]), u(&ranges[0]["to_seq"])),
        (2, 3),
        "{b}"
    );
    assert_eq!(u(&b["skipped_batches"]), 2, "{b}");
    assert_eq!(u(&b["high_water_mark"]), 3, "{b}");
    assert_eq!(u(&b["backlog"]), 0, "{b}");
    assert_eq!(skipped_metric().await, 2.0);
    let audit = abrq.get("/v1/audit").await;
    assert!(
        audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "enable"
                && e["destination"] == "b"
                && e["detail"]["skipped_from_seq"] == 2
                && e["detail"]["skipped_to_seq"] == 3),
        "{audit}"
    );

    // --- pause b: it stays in the GC minimum ---
    abrq.act(STREAM, "b", "pause").await;
    assert_eq!(abrq.dest(STREAM, "b").await["paused"], true);
    ingest_batch(&abrq, 4).await;
    ingest_batch(&abrq, 5).await;
    abrq.wait_status(STREAM, "a delivered seq 5", |st| hwm(st, "a") == 5)
        .await;
    // Showing that something does not happen needs a window: 20 GC
    // intervals in which the spool must keep both batches b lacks. (Were
    // they deleted, the catch-up below would also never finish.)
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(2) {
        let st = abrq.status(STREAM).await;
        assert_eq!(
            st["spool"]["batches"], 2,
            "GC took a paused destination's batches: {st}"
        );
        assert_eq!(st["spool"]["first_seq"], 4, "{st}");
        assert_eq!(hwm(&st, "b"), 3, "a paused destination drained: {st}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // --- resume b: it gets both, nothing new is skipped ---
    abrq.act(STREAM, "b", "resume").await;
    let st = abrq
        .wait_status(STREAM, "b caught up to the last seq", |st| {
            hwm(st, "b") == u(&st["spool"]["last_seq"])
        })
        .await;
    assert_eq!(u(&st["spool"]["last_seq"]), 5);
    let b = dest_of(&st, "b");
    assert_eq!(b["skipped_ranges"].as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(u(&b["skipped_batches"]), 2, "{b}");
    assert_eq!(skipped_metric().await, 2.0);
    assert_eq!(batches_in(&abrq, "a"), vec![1, 2, 3, 4, 5]);
    assert_eq!(batches_in(&abrq, "b"), vec![1, 4, 5]);

    // Everyone is past seq 5 now: the GC may take the rest.
    abrq.wait_status(STREAM, "the GC to empty the spool", |st| {
        st["spool"]["batches"] == 0
    })
    .await;
}
