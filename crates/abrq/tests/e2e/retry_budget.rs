//! A failed grouped attempt is an attempt of its first batch: with
//! `max_attempts = 2` the first batch is dead-lettered after two failed
//! attempts, whatever the breaker's threshold, and one batch's attempt
//! numbers never repeat (in the log or the dead letter's `attempts`).
//!
//! Three streams, each with one broken local destination (its directory
//! is a plain file: every write fails, transiently), `max_attempts = 2`
//! and a failure threshold below, equal to and above it, with a cooldown
//! of an hour so an open breaker holds. Each destination is paused while
//! three one-record batches are staged, so its first attempt carries all
//! three.

use std::collections::BTreeMap;

use crate::common::*;

const CASES: [(&str, i64); 3] = [("below", 1), ("equal", 2), ("above", 3)];

fn config(abrq: &Abrq) -> String {
    let mut config = Config::new(abrq);
    for (name, threshold) in CASES {
        config = config.stream(
            Stream::new(name, Source::http())
                .max_records(1)
                .destination(
                    Destination::local("broken", abrq.p(&format!("out/{name}")))
                        .format("jsonl")
                        .max_attempts(2)
                        .backoff("10ms", "20ms")
                        .failure_threshold(threshold)
                        .cooldown("1h"),
                ),
        );
    }
    config.to_string()
}

/// (seq, attempt) of every failed attempt the log shows for `stream`.
fn failed_attempts(log: &str, stream: &str) -> Vec<(u64, u64)> {
    let field = |line: &str, key: &str| -> Option<u64> {
        let at = line.find(&format!(" {key}="))? + key.len() + 2;
        let digits: String = line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    log.lines()
        .filter(|l| {
            l.contains("delivery attempt failed") && l.contains(&format!("stream={stream} "))
        })
        .map(|l| (field(l, "seq").expect(l), field(l, "attempt").expect(l)))
        .collect()
}

fn assert_no_repeats(attempts: &[(u64, u64)], stream: &str) {
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (seq, n) in attempts {
        seen.entry(*seq).or_default().push(*n);
    }
    for (seq, ns) in seen {
        let want: Vec<u64> = (1..=ns.len() as u64).collect();
        assert_eq!(ns, want, "{stream}: attempts at seq {seq} repeat or skip");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grouped_attempt_counts_in_the_first_batch_budget() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq));
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    for (name, _) in CASES {
        std::fs::write(abrq.path(&format!("out/{name}")), "not a directory\n").unwrap();
    }
    abrq.start().await;
    for (name, _) in CASES {
        abrq.act(name, "broken", "pause").await;
        for i in 1..=3 {
            abrq.ingest(name, &format!("{{\"i\":{i}}}\n")).await;
        }
        let st = abrq.status(name).await;
        assert_eq!(st["spool"]["last_seq"], 3, "{name}: three batches staged");
        abrq.act(name, "broken", "resume").await;
    }

    // equal (threshold 2): the grouped attempt and one single attempt
    // spend batch 1's budget as the breaker opens.
    // above (threshold 3): batch 1 goes after two attempts, batch 2's first
    // attempt opens the breaker.
    for name in ["equal", "above"] {
        abrq.wait_status(name, "batch 1 dead-lettered, breaker open", |st| {
            let d = dest_of(st, "broken");
            d["pending_dead_letters"] == 1 && d["breaker"]["state"] == "open"
        })
        .await;
    }
    // below (threshold 1): the grouped attempt opens the breaker; batch 1
    // has one attempt left, spent after the operator's reset.
    abrq.wait_status("below", "breaker open after the grouped attempt", |st| {
        dest_of(st, "broken")["breaker"]["state"] == "open"
    })
    .await;
    assert_eq!(
        dest_of(&abrq.status("below").await, "broken")["pending_dead_letters"],
        0,
        "below: batch 1 had one attempt only"
    );
    abrq.post("/v1/streams/below/destinations/broken/breaker/reset")
        .await;
    abrq.wait_status("below", "batch 1 dead-lettered after the reset", |st| {
        let d = dest_of(st, "broken");
        d["pending_dead_letters"] == 1 && d["breaker"]["state"] == "open"
    })
    .await;

    let log = abrq.log();
    let want = [
        ("below", vec![(1, 1), (1, 2)]),
        ("equal", vec![(1, 1), (1, 2)]),
        ("above", vec![(1, 1), (1, 2), (2, 1)]),
    ];
    for (name, attempts) in want {
        let dls = abrq.dead_letters(name, "broken").await;
        assert_eq!(dls.len(), 1, "{name}: {dls:?}");
        assert_eq!(u(&dls[0]["seq"]), 1, "{name}: {dls:?}");
        assert_eq!(u(&dls[0]["attempts"]), 2, "{name}: {dls:?}");
        assert_eq!(
            dls[0]["reason_class"], "retries_exhausted",
            "{name}: {dls:?}"
        );
        let seen = failed_attempts(&log, name);
        assert_no_repeats(&seen, name);
        assert_eq!(seen, attempts, "{name}: failed attempts (seq, attempt)");
        let d = abrq.dest(name, "broken").await;
        assert_eq!(u(&d["high_water_mark"]), 1, "{name}: {d}");
    }
}
