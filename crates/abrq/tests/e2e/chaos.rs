//! Conservation under SIGKILL and network faults, through the real binary.
//!
//! One stream fans a followed NDJSON file out to all nine destination
//! kinds at once, every network one behind its own proxy. The test appends
//! records at a steady pace while it SIGKILLs abrq at random moments (and
//! restarts it, sometimes killing it again before it is ready) and cuts or
//! stalls random proxies for random spells. Then it stops feeding,
//! restores every link, lets abrq drain, and reads every destination back:
//! each appended record must be there exactly once after folding
//! redelivered copies by their key (objects by name, Kafka by
//! `abrq_idempotency_key`; relational rows are not folded, the ledger must
//! prevent a second row), or be in that destination's dead letters; nothing
//! else may be there, and everything must read back as appended.
//!
//! Knobs: `ABRQ_CHAOS_RECORDS` (100,000), `ABRQ_CHAOS_KILLS` (20),
//! `ABRQ_CHAOS_RATE` (records a second, 1,000), `ABRQ_CHAOS_SEED` (random,
//! printed). The seed fixes the schedule of kills and faults and the
//! records; the interleaving with abrq's own timing cannot be replayed
//! exactly.

use std::time::{Duration, Instant};

use crate::common::feed::{knob, record, Feeder};
use crate::common::fleet::{Fleet, Kind};
use crate::common::oracle::{self, Appended, Tally};
use crate::common::sinks::{self, Cells, DeadLetters, Found};
use crate::common::*;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const STREAM: &str = "chaos";

#[derive(Debug, Clone, Copy)]
enum Action {
    /// SIGKILL, `down` later restart; `early`: do not wait until ready, so
    /// the next kill may land during startup.
    Kill {
        down: Duration,
        early: bool,
    },
    Fault {
        proxy: usize,
        stall: bool,
    },
    Heal {
        proxy: usize,
        stall: bool,
    },
}

/// The seeded schedule: `kills` kills spread over `span`, and for each
/// proxy a sequence of cuts and stalls of 0.3-8 s, 3-20 s apart.
fn plan(seed: u64, kills: u64, span: Duration, proxies: usize) -> Vec<(Duration, Action)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let span_ms = span.as_millis().max(1000) as u64;
    let mut events = Vec::new();
    for _ in 0..kills {
        let at = Duration::from_millis(rng.random_range(span_ms / 50..span_ms * 49 / 50));
        let down = Duration::from_millis(rng.random_range(0..1500));
        let early = rng.random_bool(0.25);
        events.push((at, Action::Kill { down, early }));
    }
    for proxy in 0..proxies {
        let mut t = rng.random_range(500..8_000u64);
        while t < span_ms {
            let spell = rng.random_range(300..8_000u64);
            let stall = rng.random_bool(0.4);
            events.push((Duration::from_millis(t), Action::Fault { proxy, stall }));
            events.push((
                Duration::from_millis(t + spell),
                Action::Heal { proxy, stall },
            ));
            t += spell + rng.random_range(3_000..20_000u64);
        }
    }
    events.sort_by_key(|(at, _)| *at);
    events
}

/// How many destinations have a backlog, without failing when abrq does
/// not answer (it may still be starting).
async fn busy_destinations(abrq: &Abrq) -> Option<usize> {
    let url = format!("{}/v1/streams/{STREAM}", abrq.base());
    let resp = abrq
        .http
        .get(url)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    let st: Value = resp.json().await.ok()?;
    let ds = st["destinations"].as_array()?;
    Some(
        ds.iter()
            .filter(|d| d["backlog"].as_u64() > Some(0))
            .count(),
    )
}

fn config(abrq: &Abrq, input: &std::path::Path, fleet: &Fleet) -> String {
    let dests = fleet.destinations(|d, dest| {
        // Quick retries and a short attempt timeout, so a stall costs
        // seconds. gcs gives up after four attempts, so its cuts
        // dead-letter batches and the oracle accounts for dead letters
        // too; the others hold on through any fault of this schedule.
        let attempts = if d.kind == Kind::Gcs { 4 } else { 1000 };
        dest.max_attempts(attempts)
            .backoff("100ms", "1s")
            .attempt_timeout("5s")
            .failure_threshold(4)
            .cooldown("1s")
    });
    Config::new(abrq)
        .gc_interval("500ms")
        .stream(
            Stream::new(STREAM, Source::file(input).follow())
                .max_records(500)
                .max_wait("500ms")
                .destinations(dests),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkills_and_network_faults_lose_nothing_at_nine_destinations() {
    let records = knob("ABRQ_CHAOS_RECORDS", 100_000);
    let kills = knob("ABRQ_CHAOS_KILLS", 20);
    let rate = knob("ABRQ_CHAOS_RATE", 1_000).max(1);
    let seed = knob("ABRQ_CHAOS_SEED", rand::rng().random());
    let started = Instant::now();

    let mut abrq = Abrq::new();
    abrq.note(&format!(
        "chaos: seed {seed} (ABRQ_CHAOS_SEED), {records} records at {rate}/s, {kills} kills"
    ));
    let input = abrq.path("in/records.ndjson");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    std::fs::File::create(&input).unwrap();
    let fleet = Fleet::provision(&Kind::ALL, abrq.path("out/local"), true, Some("customer")).await;
    abrq.write_config(&config(&abrq, &input, &fleet));
    let proxies: Vec<(&str, &abrq_testkit::Proxy)> = fleet
        .dests
        .iter()
        .filter_map(|d| d.proxy().map(|p| (d.name(), p)))
        .collect();
    assert_eq!(proxies.len(), 8, "every network destination has a proxy");
    abrq.start().await;

    let span = Duration::from_secs_f64(records as f64 / rate as f64);
    let feeder = Feeder::start(input.clone(), records, rate);
    let schedule = plan(seed, kills, span, proxies.len());
    let mut faulted: Vec<Option<bool>> = vec![None; proxies.len()];
    let (mut ready, mut in_flight, mut faults) = (true, 0, 0);
    let t0 = tokio::time::Instant::now();
    for (at, action) in schedule {
        tokio::time::sleep_until(t0 + at).await;
        match action {
            Action::Kill { down, early } => {
                if ready && busy_destinations(&abrq).await.is_some_and(|n| n > 0) {
                    in_flight += 1;
                }
                abrq.kill();
                tokio::time::sleep(down).await;
                if early {
                    let config = abrq.config_path().display().to_string();
                    abrq.spawn(&["run", "--config", &config]);
                } else {
                    abrq.start().await;
                }
                ready = !early;
            }
            Action::Fault { proxy, stall } => {
                let (name, p) = proxies[proxy];
                abrq.note(&format!("{} {name}", if stall { "stall" } else { "cut" }));
                if stall {
                    p.stall();
                } else {
                    p.cut();
                }
                faulted[proxy] = Some(stall);
                faults += 1;
            }
            Action::Heal { proxy, stall } => {
                let (name, p) = proxies[proxy];
                abrq.note(&format!("heal {name}"));
                if stall {
                    p.unstall();
                } else {
                    p.restore();
                }
                faulted[proxy] = None;
            }
        }
    }
    while !feeder.done() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = feeder.join();
    assert_eq!(last, records, "the feeder appended everything");
    for (i, f) in faulted.iter().enumerate() {
        match f {
            Some(true) => proxies[i].1.unstall(),
            Some(false) => proxies[i].1.restore(),
            None => {}
        }
    }
    if !ready {
        abrq.wait_ready().await;
    }
    let fed = started.elapsed();
    abrq.note("fed; every link restored; draining");

    // Generous: a long run's slowest destination may have a backlog.
    let timeout = Duration::from_secs(300 + records / 500);
    let st = abrq
        .wait_drained(STREAM, Duration::from_secs(3), timeout)
        .await;
    let drained = started.elapsed();

    let ids: Vec<u64> = (1..=records).collect();
    let expected = |id: u64| (1..=records).contains(&id).then(|| record(id));
    let appended = Appended {
        id_field: "id",
        ids: &ids,
        record: &expected,
    };
    let mut report = vec![oracle::report_header()];
    let mut failures = Vec::new();
    let mut totals = Tally::default();
    for d in &fleet.dests {
        let name = d.name();
        let ds = dest_of(&st, name);
        assert!(ds["task_failure"].is_null(), "{name}: {ds}");
        let dead = sinks::dead_letters(&abrq, STREAM, name).await;
        if let Some(out) = fleet.read_objects(d).await {
            assert!(out.other.is_empty(), "{name}: unexpected {:?}", out.other);
            // A dead-lettered batch may have left its object without the
            // manifest that follows it; otherwise every object has one.
            if !out.manifests.is_empty() && dead.rows.is_empty() {
                out.verify_manifests(STREAM);
            }
        }
        let found = fleet.read(d).await;
        match oracle::reconcile(&appended, &found, &dead) {
            Ok(t) => {
                report.push(oracle::report_line(name, &t));
                totals.deduped += t.deduped;
                totals.dead_letters += t.dead_letters;
            }
            Err(v) => {
                report.push(format!("{name:<10} FAILED"));
                failures.push(format!("{name}:\n{v}"));
            }
        }
    }
    let checked = started.elapsed();
    println!(
        "chaos: seed {seed}, {records} records, {kills} kills ({in_flight} with a backlog \
         at some destination), {faults} faults, {} copies folded, {} dead letters; fed in \
         {:.0}s, drained at {:.0}s, checked at {:.0}s\n{}",
        totals.deduped,
        totals.dead_letters,
        fed.as_secs_f64(),
        drained.as_secs_f64(),
        checked.as_secs_f64(),
        report.join("\n")
    );
    abrq.note(&report.join("\n"));
    assert!(
        failures.is_empty(),
        "seed {seed}: conservation violated\n{}",
        failures.join("\n")
    );
    abrq.kill();
    fleet.cleanup().await;
}

// ---- the oracle itself, on doctored input ----

fn ids(n: u64) -> Vec<u64> {
    (1..=n).collect()
}

fn as_found(id: u64, key: Option<&str>, cells: Cells) -> Found {
    let r = record(id);
    Found {
        key: key.map(str::to_string),
        record: match cells {
            Cells::Json => r,
            Cells::Text => csv_cells(&r),
            // a text column holds a number as its JSON text
            Cells::Typed => {
                let mut t = r;
                t["amount"] = json!(t["amount"].to_string());
                t
            }
        },
        cells,
    }
}

fn objects(n: u64) -> Vec<Found> {
    (1..=n)
        .map(|i| {
            as_found(
                i,
                Some(&format!("part-{}.jsonl#{}", i / 4, i % 4)),
                Cells::Json,
            )
        })
        .collect()
}

fn check(n: u64, found: &[Found], dead: &DeadLetters) -> Result<Tally, Box<oracle::Violations>> {
    let ids = ids(n);
    let expected = |id: u64| (1..=n).contains(&id).then(|| record(id));
    let appended = Appended {
        id_field: "id",
        ids: &ids,
        record: &expected,
    };
    oracle::reconcile(&appended, found, dead)
}

#[test]
fn oracle_passes_a_faithful_copy_in_every_cell_form() {
    let none = DeadLetters::default();
    let t = check(20, &objects(20), &none).unwrap();
    assert_eq!((t.found, t.deduped, t.delivered), (20, 0, 20));
    for cells in [Cells::Text, Cells::Typed] {
        let found: Vec<Found> = (1..=20).map(|i| as_found(i, None, cells)).collect();
        check(20, &found, &none).unwrap();
    }
}

#[test]
fn oracle_folds_redelivered_copies_by_key() {
    let mut found = objects(20);
    found.push(found[3].clone());
    found.push(found[7].clone());
    let t = check(20, &found, &DeadLetters::default()).unwrap();
    assert_eq!((t.found, t.deduped, t.delivered), (22, 2, 20));
}

#[test]
fn oracle_catches_a_lost_record() {
    let mut found = objects(20);
    found.remove(4);
    let v = check(20, &found, &DeadLetters::default()).unwrap_err();
    assert_eq!(v.lost, [5]);
}

#[test]
fn oracle_accepts_a_dead_lettered_record_missing_or_present_once() {
    let mut found = objects(20);
    found.remove(4);
    let dead = DeadLetters {
        rows: vec![json!({"id": 1})],
        records: vec![record(5), record(6)],
        unreadable: Vec::new(),
    };
    let t = check(20, &found, &dead).unwrap();
    assert_eq!((t.delivered, t.dead_lettered_present), (19, 1));
}

#[test]
fn oracle_catches_a_duplicate_row_and_a_record_in_two_objects() {
    let mut rows: Vec<Found> = (1..=20).map(|i| as_found(i, None, Cells::Json)).collect();
    rows.push(as_found(9, None, Cells::Json));
    let v = check(20, &rows, &DeadLetters::default()).unwrap_err();
    assert_eq!(v.duplicated, [(9, 2)]);

    let mut found = objects(20);
    found.push(as_found(3, Some("part-other.jsonl#0"), Cells::Json));
    let v = check(20, &found, &DeadLetters::default()).unwrap_err();
    assert_eq!(v.duplicated, [(3, 2)]);
}

#[test]
fn oracle_catches_foreign_altered_and_conflicting_records() {
    let mut found = objects(20);
    // never appended
    found.push(as_found(21, Some("part-x.jsonl#0"), Cells::Json));
    // changed in a JSON object and in a CSV row
    found[0].record["payload"] = json!("changed");
    let mut csv = as_found(2, found[1].key.as_deref(), Cells::Text);
    csv.record["amount"] = json!("-1");
    found[1] = csv;
    // a second copy under one key that differs from the first
    let mut copy = found[2].clone();
    copy.record["amount"] = json!(-1);
    found.push(copy);
    let v = check(20, &found, &DeadLetters::default()).unwrap_err();
    assert_eq!(v.foreign.len(), 1, "{v}");
    assert_eq!(v.altered.len(), 2, "{v}");
    assert_eq!(v.conflicting.len(), 1, "{v}");
    assert!(v.lost.is_empty() && v.duplicated.is_empty(), "{v}");
}

#[test]
fn oracle_refuses_dead_letters_it_cannot_read() {
    let dead = DeadLetters {
        unreadable: vec![7],
        ..DeadLetters::default()
    };
    let v = check(20, &objects(20), &dead).unwrap_err();
    assert_eq!(v.unreadable_dead_letters, [7]);
}
