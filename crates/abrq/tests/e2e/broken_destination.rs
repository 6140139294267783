//! A broken destination must not hold up a healthy one, must not lose data
//! while it is broken, and must catch up once fixed.
//!
//! `bad`'s base directory is a plain file, so every write fails with a
//! transient disk error: the breaker opens after 3 failures and (cooldown 1h)
//! stays open, spending no attempts; `good` drains everything meanwhile and
//! the spool keeps every batch `bad` lacks. Then the operator fixes the disk
//! and resets the breaker: `bad` catches up, both hold all records exactly
//! once, and the spool GC empties the spool.

use crate::common::*;
use serde_json::Value;

const RECORDS: u64 = 20_000;
const STREAM: &str = "orders";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .gc_interval("100ms")
        .stream(
            Stream::new(STREAM, Source::generate(RECORDS as i64))
                .max_records(500)
                .destination(Destination::local("good", abrq.p("out/good")).format("jsonl.gz"))
                .destination(
                    Destination::local("bad", abrq.p("out/bad"))
                        .format("jsonl")
                        .max_attempts(100_000)
                        .backoff("10ms", "50ms")
                        .failure_threshold(3)
                        .cooldown("1h"),
                ),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_destination_opens_its_breaker_and_catches_up_after_reset() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq));
    // A plain file where bad's base directory goes.
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    std::fs::write(abrq.path("out/bad"), "not a directory\n").unwrap();
    abrq.start().await;

    // good drains the whole source while bad's circuit is open.
    abrq.wait_circuit_opened("local").await;
    let st = abrq
        .wait_status(
            STREAM,
            "good past the last seq of the exhausted source",
            |st| {
                st["source"]["done"] == true
                    && dest_of(st, "good")["high_water_mark"] == st["spool"]["last_seq"]
            },
        )
        .await;
    let last_seq = u(&st["spool"]["last_seq"]);
    assert_eq!(last_seq, RECORDS / 500, "batches of 500");
    let bad = dest_of(&st, "bad");
    let bad_hwm = u(&bad["high_water_mark"]);
    assert_eq!(bad_hwm, 0, "bad cannot have delivered anything");
    assert_eq!(bad["breaker"]["state"], "open", "{bad}");
    assert_eq!(u(&bad["backlog"]), last_seq - bad_hwm);
    assert!(
        bad["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{bad}"
    );
    // Nothing was dead-lettered: the retry budget is far from spent and an
    // open circuit spends none of it.
    assert_eq!(u(&bad["pending_dead_letters"]), 0);

    // The spool holds exactly what bad still needs, even with the GC running
    // every 100ms (wait for a GC pass that saw good's final mark).
    let st = abrq
        .wait_status(STREAM, "spool GC to account for good's progress", |st| {
            st["spool"]["batches"] == last_seq - bad_hwm
        })
        .await;
    assert_eq!(st["spool"]["first_seq"], bad_hwm + 1, "{st}");
    let m = abrq.metrics().await;
    let failures = m.get(
        "abrq_stream_fanout_attempts_total",
        &[("destination", "bad"), ("outcome", "failure")],
    );
    assert_eq!(failures, 3.0, "an open circuit makes no attempts");
    assert_eq!(
        m.get(
            "abrq_stream_fanout_circuit_state",
            &[("destination", "bad")]
        ),
        1.0
    );
    // the gauge is the GC pass's own count, which may be one pass behind
    // the status read above
    let want = (last_seq - bad_hwm) as f64;
    wait_until(
        LONG,
        "the spool gauge to count what bad needs",
        async || {
            abrq.metrics()
                .await
                .get("abrq_stream_spool_batches", &[("stream", STREAM)])
                == want
        },
    )
    .await;

    // The operator fixes the disk and resets the breaker.
    std::fs::remove_file(abrq.path("out/bad")).unwrap();
    std::fs::create_dir(abrq.path("out/bad")).unwrap();
    abrq.post(&format!(
        "/v1/streams/{STREAM}/destinations/bad/breaker/reset"
    ))
    .await;
    let st = abrq
        .wait_status(STREAM, "bad to catch up after the reset", |st| {
            dest_of(st, "bad")["high_water_mark"] == last_seq
        })
        .await;
    let bad = dest_of(&st, "bad");
    assert_eq!(bad["breaker"]["state"], "closed", "{bad}");
    assert_eq!(bad["last_error"], Value::Null, "{bad}");
    assert_eq!(u(&bad["pending_dead_letters"]), 0);

    // Both hold every record exactly once, and the same records.
    let good_out = read_dest(&abrq.path("out/good"));
    let bad_out = read_dest(&abrq.path("out/bad"));
    for (name, out) in [("good", &good_out), ("bad", &bad_out)] {
        assert!(out.other.is_empty(), "{name}: {:?}", out.other);
        assert!(out.temp_files.is_empty(), "{name}: {:?}", out.temp_files);
        assert_eq!(
            out.objects.len() as u64,
            last_seq,
            "{name}: one object per batch"
        );
        let ids = by_id(out, "order_id");
        assert!(
            ids.keys().copied().eq(1..=RECORDS),
            "{name}: order_ids are not 1..={RECORDS}"
        );
    }
    assert_eq!(by_id(&good_out, "order_id"), by_id(&bad_out, "order_id"));
    // Same batches under the same names (format aside).
    let parts = |o: &DestOutput| {
        o.objects
            .values()
            .map(|x| x.part.clone())
            .collect::<Vec<_>>()
    };
    let (mut g, mut b) = (parts(&good_out), parts(&bad_out));
    g.sort();
    b.sort();
    assert_eq!(g, b);

    // With every destination past the last seq, the GC empties the spool.
    abrq.wait_status(STREAM, "spool GC to empty the spool", |st| {
        st["spool"]["batches"] == 0
    })
    .await;
    let audit = abrq.get("/v1/audit").await;
    assert!(
        audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["action"] == "breaker_reset" && e["destination"] == "bad"),
        "{audit}"
    );
}
