//! Poison among honest records, through the real binary: one stream over
//! HTTP ingest fans out to all nine destination kinds, and some requests
//! carry one poison record of four kinds:
//!
//! - nested deeper than the JSON parser takes: ingest refuses the whole
//!   request (400, naming the line); the client sends it again without;
//! - a value of the wrong type for a declared table (the relational
//!   tables are created beforehand with typed columns, `types =
//!   "widen_strict"`): a `schema_drift` dead letter at postgres and mysql;
//! - a value larger than Kafka takes: a `rejected` dead letter at kafka;
//! - a field name MySQL cannot take as a column: `rejected` at mysql.
//!
//! Each poison record ends refused at ingest or in a dead letter of every
//! destination that cannot take it, a dead letter naming it; no batch
//! without a poison record is dead-lettered anywhere; every other record is
//! delivered everywhere, once (after folding redelivered copies by key).
//!
//! Knobs: `ABRQ_CHAOS_RECORDS` (100,000), `ABRQ_CHAOS_POISON` (100),
//! `ABRQ_CHAOS_SEED` (random, printed).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::common::feed::{knob, record};
use crate::common::fleet::{Fleet, Kind};
use crate::common::oracle::{self, Appended};
use crate::common::sinks::{self, Found};
use crate::common::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};

const STREAM: &str = "poison";
/// Records per request; one request is one batch.
const PER: u64 = 250;
/// Kafka's default `message.max.bytes` is 1,000,000.
const OVERSIZE: usize = 2 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Poison {
    TooDeep,
    BadType,
    Oversize,
    BadName,
}

impl Poison {
    const ALL: [Poison; 4] = [
        Poison::TooDeep,
        Poison::BadType,
        Poison::Oversize,
        Poison::BadName,
    ];

    /// The destinations that cannot take it (none: ingest refuses it).
    fn refused_by(self) -> &'static [Kind] {
        match self {
            Poison::TooDeep => &[],
            Poison::BadType => &[Kind::Postgres, Kind::Mysql],
            Poison::Oversize => &[Kind::Kafka],
            Poison::BadName => &[Kind::Mysql],
        }
    }

    /// Record `id` made into this poison.
    fn apply(self, id: u64) -> Map<String, Value> {
        let mut r = record(id);
        match self {
            Poison::TooDeep => {
                let mut v = json!(1);
                for _ in 0..300 {
                    v = json!({ "a": v });
                }
                r.insert("deep".into(), v);
            }
            Poison::BadType => {
                r.insert("amount".into(), json!("a lot"));
            }
            Poison::Oversize => {
                r.insert("blob".into(), json!("x".repeat(OVERSIZE)));
            }
            Poison::BadName => {
                r.insert("caf\u{1F600}".into(), json!("emoji"));
            }
        }
        r
    }
}

fn config(abrq: &Abrq, fleet: &Fleet) -> String {
    let dests = fleet.destinations(|d, dest| {
        let dest = dest
            .max_attempts(1000)
            .backoff("100ms", "1s")
            .failure_threshold(1000);
        if matches!(d.kind, Kind::Postgres | Kind::Mysql) {
            dest.drift_types("widen_strict")
        } else {
            dest
        }
    });
    Config::new(abrq)
        .gc_interval("500ms")
        .stream(
            Stream::new(STREAM, Source::http().max_body("64MiB"))
                .max_records(PER as i64)
                .max_bytes("64MiB")
                .destinations(dests),
        )
        .to_string()
}

/// Posts one request until it is staged: a request refused for a record
/// (400, "line N") is sent again without that record. Returns the seq it
/// got and the ids refused.
async fn send(abrq: &Abrq, n: u64, mut lines: Vec<(u64, String)>) -> (u64, Vec<u64>) {
    let mut refused = Vec::new();
    loop {
        let body: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
        let key = format!("req-{n}-{}", refused.len());
        let (code, ack) = abrq
            .call(
                reqwest::Method::POST,
                &format!("/v1/streams/{STREAM}/records"),
                Some(body.into_bytes()),
                &[
                    ("content-type", "application/x-ndjson"),
                    ("idempotency-key", &key),
                ],
            )
            .await;
        match code {
            200 => {
                let (first, last) = (u(&ack["first_seq"]), u(&ack["last_seq"]));
                assert_eq!(first, last, "one request, one batch: {ack}");
                return (first, refused);
            }
            400 => {
                let msg = ack["error"].as_str().unwrap_or_default().to_string();
                let line: usize = msg
                    .strip_prefix("line ")
                    .and_then(|r| r.split(':').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("a 400 that names no line: {msg}"));
                assert!(msg.contains("recursion limit"), "{msg}");
                let (id, _) = lines.remove(line - 1);
                refused.push(id);
            }
            _ => panic!("ingest answered {code}: {ack}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_ends_refused_or_dead_lettered_where_it_cannot_go_and_nothing_else_does() {
    let records = knob("ABRQ_CHAOS_RECORDS", 100_000);
    let poison_n = knob("ABRQ_CHAOS_POISON", 100);
    let seed = knob("ABRQ_CHAOS_SEED", rand::rng().random());
    let requests = records.div_ceil(PER);
    assert!(poison_n <= requests, "at most one poison record a request");
    let started = Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    // Which request carries which poison, and where in it.
    let mut carriers: Vec<u64> = (1..=requests).collect();
    carriers.shuffle(&mut rng);
    let mut poison: BTreeMap<u64, (Poison, u64)> = BTreeMap::new(); // id -> kind
    for (i, &req) in carriers.iter().take(poison_n as usize).enumerate() {
        let first = (req - 1) * PER + 1;
        let last = (req * PER).min(records);
        let id = rng.random_range(first..=last);
        poison.insert(id, (Poison::ALL[i % 4], req));
    }

    let mut abrq = Abrq::new();
    abrq.note(&format!(
        "poison: seed {seed} (ABRQ_CHAOS_SEED), {records} records, {poison_n} poison"
    ));
    let fleet = Fleet::provision(&Kind::ALL, abrq.path("out/local"), false, Some("customer")).await;
    fleet
        .declare_table("id bigint, customer text, amount bigint, payload text")
        .await;
    abrq.write_config(&config(&abrq, &fleet));
    abrq.start().await;

    let make = |id: u64| match poison.get(&id) {
        Some((p, _)) => p.apply(id),
        None => record(id),
    };
    // seq -> (poison kind, its index in the batch), for batches with one.
    let mut poisoned: HashMap<u64, (Poison, usize, u64)> = HashMap::new();
    let mut refused: BTreeSet<u64> = BTreeSet::new();
    for req in 1..=requests {
        let ids = (req - 1) * PER + 1..=(req * PER).min(records);
        let lines: Vec<(u64, String)> = ids
            .map(|id| (id, Value::Object(make(id)).to_string()))
            .collect();
        let (seq, out) = send(&abrq, req, lines.clone()).await;
        refused.extend(out.iter().copied());
        let kept: Vec<u64> = lines
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !out.contains(id))
            .collect();
        if let Some((pos, id)) = kept
            .iter()
            .enumerate()
            .find(|(_, id)| poison.contains_key(id))
        {
            poisoned.insert(seq, (poison[id].0, pos, *id));
        }
    }
    let fed = started.elapsed();

    let st = abrq
        .wait_drained(STREAM, Duration::from_secs(2), Duration::from_secs(900))
        .await;
    let drained = started.elapsed();

    let expect_refused: BTreeSet<u64> = poison
        .iter()
        .filter(|(_, (p, _))| *p == Poison::TooDeep)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(
        refused, expect_refused,
        "ingest refuses exactly the too-deep records"
    );

    let ids: Vec<u64> = (1..=records).filter(|id| !refused.contains(id)).collect();
    let expected =
        |id: u64| ((1..=records).contains(&id) && !refused.contains(&id)).then(|| make(id));
    let appended = Appended {
        id_field: "id",
        ids: &ids,
        record: &expected,
    };
    let mut report = vec![oracle::report_header()];
    let mut failures = Vec::new();
    for d in &fleet.dests {
        let name = d.name();
        let ds = dest_of(&st, name);
        assert!(ds["task_failure"].is_null(), "{name}: {ds}");
        let dead = sinks::dead_letters(&abrq, STREAM, name).await;

        // Exactly the batches whose poison this destination cannot take.
        let want: BTreeSet<u64> = poisoned
            .iter()
            .filter(|(_, (p, _, _))| p.refused_by().contains(&d.kind))
            .map(|(seq, _)| *seq)
            .collect();
        let got: BTreeSet<u64> = dead.rows.iter().map(|r| u(&r["seq"])).collect();
        if got != want {
            failures.push(format!(
                "{name}: dead-lettered seqs {:?}, expected {:?}",
                got.difference(&want).collect::<Vec<_>>(),
                want.difference(&got).collect::<Vec<_>>()
            ));
        }
        for row in &dead.rows {
            let seq = u(&row["seq"]);
            let Some((p, pos, id)) = poisoned.get(&seq) else {
                continue;
            };
            let error = row["error"].as_str().unwrap_or_default();
            let class = row["reason_class"].as_str().unwrap_or_default();
            let want_class = match p {
                Poison::BadType => "schema_drift",
                _ => "rejected",
            };
            if !error.contains(&format!("record {pos}")) || class != want_class {
                failures.push(format!(
                    "{name}: seq {seq} (poison {p:?}, id {id} at index {pos}): {class}: {error}"
                ));
            }
        }

        // Rows of a table hold every column the table has; files a cell
        // for every column of their batch: a key the record never had
        // reads back null or empty.
        let mut found: Vec<Found> = fleet.read(d).await;
        for f in &mut found {
            if let Some(exp) = f
                .record
                .get("id")
                .and_then(|v| match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                })
                .and_then(expected)
            {
                f.record
                    .retain(|k, v| exp.contains_key(k) || !(v.is_null() || v == ""));
            }
        }
        match oracle::reconcile(&appended, &found, &dead) {
            Ok(t) => report.push(oracle::report_line(name, &t)),
            Err(v) => {
                report.push(format!("{name:<10} FAILED"));
                failures.push(format!("{name}:\n{v}"));
            }
        }
    }
    println!(
        "poison: seed {seed}, {records} records, {poison_n} poison ({} refused at ingest), \
         {} poisoned batches; fed in {:.0}s, drained at {:.0}s\n{}",
        refused.len(),
        poisoned.len(),
        fed.as_secs_f64(),
        drained.as_secs_f64(),
        report.join("\n")
    );
    assert!(failures.is_empty(), "seed {seed}:\n{}", failures.join("\n"));
    abrq.kill();
    fleet.cleanup().await;
}
