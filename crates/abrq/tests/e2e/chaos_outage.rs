//! One destination down for a long time must not slow the others.
//!
//! A stream fans a followed NDJSON file out to local, s3, postgres and
//! kafka, the network ones behind proxies. After a warm-up, two equal
//! windows: the first with every destination up, the second with one
//! destination cut for all of it. The feed runs at a fixed rate the
//! healthy destinations can sustain, so each of them should deliver about
//! what was fed in both windows; head-of-line blocking across
//! destinations, or a breaker or retry loop that stalls the process, would
//! show as fewer records delivered in the second window. Then the link is
//! restored, the backlog drains, and every destination is read back and
//! checked by the conservation oracle.
//!
//! Knobs: `ABRQ_CHAOS_OUTAGE_SECS` (each window, 60), `ABRQ_CHAOS_RATE`
//! (records a second, 1,000), `ABRQ_CHAOS_OUTAGE_DEST` (the destination
//! cut: kafka, s3 or postgres; kafka), `ABRQ_CHAOS_UNTHROTTLED=1` (feed
//! as fast as the fastest healthy destination takes records and report
//! raw throughput per window, without the ratio check).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::feed::{knob, record, Feeder};
use crate::common::fleet::{Fleet, Kind};
use crate::common::oracle::{self, Appended};
use crate::common::sinks;
use crate::common::*;

const STREAM: &str = "outage";
const KINDS: [Kind; 4] = [Kind::Local, Kind::S3, Kind::Postgres, Kind::Kafka];
const WARM_UP: Duration = Duration::from_secs(5);
/// Batches of backlog the fastest healthy destination keeps in the
/// unthrottled mode: it never waits for the feed.
const UNTHROTTLED_BACKLOG: u64 = 20;
const BATCH: u64 = 500;

fn config(abrq: &Abrq, input: &std::path::Path, fleet: &Fleet) -> String {
    let dests = fleet.destinations(|_, dest| {
        // Never dead-letter during the outage: the breaker spends no
        // attempts while open.
        dest.max_attempts(100_000)
            .backoff("100ms", "1s")
            .attempt_timeout("5s")
            .failure_threshold(4)
            .cooldown("1s")
    });
    Config::new(abrq)
        .gc_interval("500ms")
        .stream(
            Stream::new(STREAM, Source::file(input).follow())
                .max_records(BATCH as i64)
                .max_wait("500ms")
                .destinations(dests),
        )
        .to_string()
}

/// Records each destination has delivered in this process.
async fn delivered(abrq: &Abrq) -> BTreeMap<&'static str, f64> {
    let m = abrq.metrics().await;
    KINDS
        .iter()
        .map(|k| {
            let d = k.engine();
            let n = m.get(
                "abrq_stream_fanout_delivered_records_total",
                &[("stream", STREAM), ("destination", d)],
            );
            (d, n)
        })
        .collect()
}

/// Keeps the fastest healthy destination's backlog at
/// [`UNTHROTTLED_BACKLOG`] batches or more, until `until`.
async fn top_up(abrq: &Abrq, feeder: &Feeder, healthy: &[&str], until: tokio::time::Instant) {
    while tokio::time::Instant::now() < until {
        let st = abrq.status(STREAM).await;
        let last = u(&st["spool"]["last_seq"]);
        let least = healthy
            .iter()
            .map(|d| last - u(&dest_of(&st, d)["high_water_mark"]))
            .min()
            .unwrap_or(0);
        // records appended but not yet staged count as backlog too
        let unstaged = feeder.limit().saturating_sub(feeder.appended());
        if least < UNTHROTTLED_BACKLOG && unstaged < BATCH * UNTHROTTLED_BACKLOG {
            feeder.set_limit(feeder.limit() + BATCH * UNTHROTTLED_BACKLOG);
        }
        tokio::time::sleep_until(
            until.min(tokio::time::Instant::now() + Duration::from_millis(200)),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_outage_of_one_destination_does_not_slow_the_others() {
    let window = Duration::from_secs(knob("ABRQ_CHAOS_OUTAGE_SECS", 60));
    let rate = knob("ABRQ_CHAOS_RATE", 1_000).max(1);
    let unthrottled = std::env::var("ABRQ_CHAOS_UNTHROTTLED").is_ok_and(|v| v == "1");
    let cut = std::env::var("ABRQ_CHAOS_OUTAGE_DEST").unwrap_or_else(|_| "kafka".into());
    let started = Instant::now();

    let mut abrq = Abrq::new();
    let input = abrq.path("in/records.ndjson");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    std::fs::File::create(&input).unwrap();
    let fleet = Fleet::provision(&KINDS, abrq.path("out/local"), true, Some("customer")).await;
    let down = fleet
        .dests
        .iter()
        .find(|d| d.name() == cut)
        .unwrap_or_else(|| panic!("ABRQ_CHAOS_OUTAGE_DEST={cut}: not one of {KINDS:?}"));
    let proxy = down.proxy().expect("the cut destination has a proxy");
    let healthy: Vec<&str> = KINDS
        .iter()
        .map(|k| k.engine())
        .filter(|d| *d != cut)
        .collect();
    abrq.write_config(&config(&abrq, &input, &fleet));
    abrq.start().await;

    let planned = WARM_UP + 2 * window;
    let (total, feed_rate) = match unthrottled {
        false => ((rate as f64 * planned.as_secs_f64()) as u64, rate),
        // paced by top_up instead
        true => (u64::MAX / 2, 1_000_000),
    };
    let feeder = Feeder::start(input.clone(), total, feed_rate);
    if unthrottled {
        feeder.set_limit(BATCH * UNTHROTTLED_BACKLOG);
    }
    let t0 = tokio::time::Instant::now();
    let pace = async |until: tokio::time::Instant| {
        if unthrottled {
            top_up(&abrq, &feeder, &healthy, until).await;
        } else {
            tokio::time::sleep_until(until).await;
        }
    };

    pace(t0 + WARM_UP).await;
    let before = delivered(&abrq).await;
    pace(t0 + WARM_UP + window).await;
    // Cut first: a delivery finishing in between would count for the
    // window it was not in.
    proxy.cut();
    let middle = delivered(&abrq).await;
    abrq.note(&format!("cut {cut}"));
    pace(t0 + planned).await;
    let after = delivered(&abrq).await;
    let st = abrq.status(STREAM).await;
    feeder.stop();
    let last = feeder.join();
    proxy.restore();
    abrq.note(&format!("restored {cut}"));

    let secs = window.as_secs_f64();
    let mut lines = vec![format!(
        "{:<10} {:>12} {:>12} {:>7} {:>8}",
        "dest", "up rec/s", "outage rec/s", "ratio", "backlog"
    )];
    let mut slow = Vec::new();
    for d in KINDS.iter().map(|k| k.engine()) {
        let up = (middle[d] - before[d]) / secs;
        let out = (after[d] - middle[d]) / secs;
        let ratio = if up > 0.0 { out / up } else { 0.0 };
        let backlog = u(&dest_of(&st, d)["backlog"]);
        lines.push(format!(
            "{d:<10} {up:>12.0} {out:>12.0} {ratio:>7.3} {backlog:>8}"
        ));
        if d != cut && ratio < 0.9 {
            slow.push(format!("{d}: {ratio:.3}"));
        }
    }
    let mode = if unthrottled {
        "unthrottled"
    } else {
        "throttled"
    };
    println!(
        "outage: {cut} cut for {secs:.0}s, {mode}, fed {last} records{}\n{}",
        if unthrottled {
            String::new()
        } else {
            format!(" at {rate}/s")
        },
        lines.join("\n")
    );
    abrq.note(&lines.join("\n"));
    // At most the batch in flight at the cut, which the service may have
    // taken whole before the link went.
    let while_cut = after[cut.as_str()] - middle[cut.as_str()];
    assert!(
        while_cut <= BATCH as f64,
        "{cut} delivered {while_cut} records while cut"
    );
    if !unthrottled {
        assert!(
            slow.is_empty(),
            "healthy destinations slowed by the outage of {cut}: {slow:?}\n{}",
            lines.join("\n")
        );
    }

    // The backlog drains once the link is back; everything lands once.
    let timeout = Duration::from_secs(300 + last / 500);
    let drained_from = Instant::now();
    abrq.wait_drained(STREAM, Duration::from_secs(3), timeout)
        .await;
    println!(
        "{cut} drained its backlog in {:.0}s after the restore",
        drained_from.elapsed().as_secs_f64()
    );
    let ids: Vec<u64> = (1..=last).collect();
    let expected = |id: u64| (1..=last).contains(&id).then(|| record(id));
    let appended = Appended {
        id_field: "id",
        ids: &ids,
        record: &expected,
    };
    let mut report = vec![oracle::report_header()];
    let mut failures = Vec::new();
    for d in &fleet.dests {
        let found = fleet.read(d).await;
        let dead = sinks::dead_letters(&abrq, STREAM, d.name()).await;
        match oracle::reconcile(&appended, &found, &dead) {
            Ok(t) => report.push(oracle::report_line(d.name(), &t)),
            Err(v) => failures.push(format!("{}:\n{v}", d.name())),
        }
    }
    println!(
        "{}\nchecked at {:.0}s",
        report.join("\n"),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    abrq.kill();
    fleet.cleanup().await;
}
