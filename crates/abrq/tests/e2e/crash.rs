//! Crash safety: SIGKILL abrq at random moments while it stages an NDJSON
//! file and fans it out to two local destinations, restart it each time on
//! the same config and data dir, then let a final `run --until-drained`
//! finish. Afterwards each destination must hold every source record exactly
//! once (replays overwrite the same object name, so deduplicating by name is
//! all a consumer needs), in complete objects whose manifests match them,
//! with gapless seqs.
//!
//! The kill delays come from a seeded RNG; the seed is in the test output
//! and the log. Set ABRQ_CRASH_SEED to replay a run.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::time::Duration;

use crate::common::*;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

const RECORDS: u64 = 120_000;
const KILLS: usize = 12;
const STREAM: &str = "orders";

/// Record `i`: about 190 bytes of JSON with the things encoders get wrong:
/// quotes, commas, newlines, non-ASCII, nulls, floats, arrays, objects.
fn source_record(i: u64) -> Map<String, Value> {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    let v = json!({
        "id": i,
        "payload": format!("order {i}: \"quoted\", with a comma, café ☕ {h:06x}"),
        "amount": (h % 100_000) as f64 / 4.0,
        "tags": ["a", format!("t{}", h % 7)],
        "ok": h & 1 == 1,
        "note": if (h >> 3) & 7 == 0 { Value::Null } else { json!("line one\nline two") },
        "nested": {"k": h % 1000, "s": "x"},
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .stream(
            Stream::new(STREAM, Source::file(abrq.path("orders.ndjson")))
                .max_records(500)
                .destination(
                    Destination::local("lake", abrq.p("out/lake"))
                        .prefix("exports/orders")
                        .format("jsonl.gz")
                        .date_partitioning()
                        .manifest(),
                )
                .destination(
                    Destination::local("reports", abrq.p("out/reports"))
                        .prefix("orders")
                        .format("csv")
                        .date_partitioning()
                        .manifest(),
                ),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_at_random_moments_loses_and_duplicates_nothing() {
    let mut abrq = Abrq::new();
    let expected: Vec<Map<String, Value>> = (0..RECORDS).map(source_record).collect();
    {
        let f = std::fs::File::create(abrq.path("orders.ndjson")).unwrap();
        let mut w = BufWriter::new(f);
        for r in &expected {
            serde_json::to_writer(&mut w, r).unwrap();
            w.write_all(b"\n").unwrap();
        }
        w.flush().unwrap();
    }
    abrq.write_config(&config(&abrq));

    let seed: u64 = match std::env::var("ABRQ_CRASH_SEED") {
        Ok(s) => s.parse().expect("ABRQ_CRASH_SEED is a u64"),
        Err(_) => rand::random(),
    };
    abrq.note(&format!(
        "crash test seed {seed} (ABRQ_CRASH_SEED={seed} replays it)"
    ));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    for k in 1..=KILLS {
        abrq.start().await;
        // Where this run resumed from, to show the kills land mid-work.
        let st = abrq.status(STREAM).await;
        let delay = rng.random_range(100..=1500u64);
        abrq.note(&format!(
            "kill {k}/{KILLS} in {delay} ms; at start: last_seq {}, lake hwm {}, reports hwm {}",
            st["spool"]["last_seq"],
            dest_of(&st, "lake")["high_water_mark"],
            dest_of(&st, "reports")["high_water_mark"],
        ));
        tokio::time::sleep(Duration::from_millis(delay)).await;
        abrq.kill();
    }

    let config = abrq.config_path().display().to_string();
    abrq.spawn(&[
        "run",
        "--config",
        &config,
        "--until-drained",
        "--no-progress",
    ]);
    let exit = abrq.wait_exit(Duration::from_secs(600)).await;
    assert!(
        exit.success(),
        "final run --until-drained exited with {exit}"
    );
    abrq.note(&format!(
        "final run summary:\n{}",
        abrq.stdout_of_run(abrq.runs())
    ));

    let mut batches_per_dest = Vec::new();
    for (name, format) in [("lake", Format::JsonlGz), ("reports", Format::Csv)] {
        let out = read_dest(&abrq.path(&format!("out/{name}")));
        abrq.note(&format!(
            "{name}: {} objects, {} manifests, {} temp files left by killed writes (ignored)",
            out.objects.len(),
            out.manifests.len(),
            out.temp_files.len()
        ));
        assert!(
            out.other.is_empty(),
            "{name}: unexpected files {:?}",
            out.other
        );
        for o in out.objects.values() {
            assert_eq!(o.format, format, "{name}: {}", o.rel);
        }

        // Each manifest matches its object; then deduplicate by object name
        // (the idempotency key): a batch written twice, e.g. into two date
        // partitions, must be the same batch with the same bytes.
        let mut by_seq: BTreeMap<u64, &Object> = BTreeMap::new();
        for (seq, key) in out.verify_manifests(STREAM) {
            let o = &out.objects[&key];
            if let Some(prev) = by_seq.insert(seq, o) {
                abrq.note(&format!(
                    "{name}: seq {seq} stored twice: {} and {key}",
                    prev.rel
                ));
                assert_eq!(prev.part, o.part, "{name}: seq {seq} under two names");
                assert_eq!(prev.raw, o.raw, "{name}: seq {seq} with different bytes");
            }
        }
        let n = by_seq.len() as u64;
        assert!(
            by_seq.keys().copied().eq(1..=n),
            "{name}: manifest seqs are not 1..={n}: {:?}",
            by_seq.keys().collect::<Vec<_>>()
        );

        // Seq order is source order: the batches laid end to end must be
        // the source file, record for record.
        let mut next = 0usize;
        for (seq, o) in &by_seq {
            for r in &o.records {
                assert!(
                    next < expected.len(),
                    "{name}: more records than the source"
                );
                let want = if format == Format::Csv {
                    csv_cells(&expected[next])
                } else {
                    expected[next].clone()
                };
                assert_eq!(r, &want, "{name}: record {next} (seq {seq}, {})", o.rel);
                next += 1;
            }
        }
        assert_eq!(next as u64, RECORDS, "{name}: record count");
        batches_per_dest.push(
            by_seq
                .iter()
                .map(|(s, o)| (*s, o.part.clone(), o.records.len()))
                .collect::<Vec<_>>(),
        );
    }
    // Both destinations got the same batches under the same names.
    assert_eq!(
        batches_per_dest[0], batches_per_dest[1],
        "lake and reports disagree"
    );
}
