//! The monitoring files under `deploy/` against promtool and a running
//! abrq: the config and alerting rules check and pass their unit tests,
//! the dashboard's queries parse, `/metrics` lints clean, and every
//! `abrq_*` metric the dashboard and the rules query is one abrq exports.
//!
//! promtool comes from Debian's `prometheus` package, which
//! `scripts/services.sh up` installs; `ABRQ_TEST_PROMTOOL` names another.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const STREAM: &str = "events";

/// Only database sources set these, so an HTTP stream never exports them:
/// they are checked against the engine's metric definitions instead.
const DATABASE_ONLY: &[&str] = &["abrq_source_lag_seconds", "abrq_source_lag_bytes"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Runs promtool in the repository root, feeding it `stdin`.
fn promtool(args: &[&str], stdin: &str) -> Output {
    let bin = std::env::var("ABRQ_TEST_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut child = Command::new(&bin)
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("run {bin}: {e} (`scripts/services.sh up` installs promtool, Debian package prometheus)")
        });
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(stdin.as_bytes())
        .expect("write promtool's stdin");
    child.wait_with_output().expect("wait for promtool")
}

/// promtool must exit 0; returns what it printed.
fn promtool_ok(args: &[&str], stdin: &str) -> String {
    let out = promtool(args, stdin);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {} -> {}\n{printed}",
        args.join(" "),
        out.status
    );
    printed
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana/abrq-dashboard.json")).expect("dashboard is JSON")
}

/// Every string under an `expr` key: the panels' queries.
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match v {
                    Value::String(s) if k == "expr" => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// The `abrq_*` words in `text`.
fn abrq_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("abrq_"))
        .map(str::to_string)
        .collect()
}

/// Every `abrq_*` name the dashboard (queries and variables) and the rules
/// use. The rules file is read whole: it names metrics only in its exprs.
fn used_names() -> BTreeSet<String> {
    let dash = dashboard();
    let mut queries = Vec::new();
    exprs(&dash, &mut queries);
    for var in dash["templating"]["list"].as_array().expect("variables") {
        queries.extend(var["definition"].as_str().map(str::to_string));
    }
    let mut names = abrq_names(&queries.join("\n"));
    names.extend(abrq_names(&read("deploy/prometheus/abrq-alerts.yml")));
    names
}

/// The names in `used` that `scrape` has no family for: a histogram's
/// series (`_bucket`, `_sum`, `_count`) count for their family.
fn missing(used: &BTreeSet<String>, scrape: &str) -> Vec<String> {
    // `# TYPE` lines: the prometheus crate prints one per family that has
    // a series.
    let families: BTreeMap<&str, &str> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    let defined = read("crates/abrq-engine/src/metrics.rs");
    used.iter()
        .filter(|name| {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .find(|base| families.get(base) == Some(&"histogram"))
                .unwrap_or(name);
            let exported = families.contains_key(family);
            let database_only =
                DATABASE_ONLY.contains(&name.as_str()) && defined.contains(&format!("\"{name}\""));
            !(exported || database_only)
        })
        .cloned()
        .collect()
}

#[test]
fn alert_rules_check_and_pass_their_unit_tests() {
    promtool_ok(&["check", "config", "deploy/prometheus/prometheus.yml"], "");
    promtool_ok(&["check", "rules", "deploy/prometheus/abrq-alerts.yml"], "");
    promtool_ok(
        &["test", "rules", "deploy/prometheus/abrq-alerts.test.yml"],
        "",
    );
}

#[test]
fn dashboard_queries_parse() {
    let dash = dashboard();
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(vars, ["datasource", "stream", "destination"]);
    let mut queries = Vec::new();
    exprs(&dash, &mut queries);
    assert!(queries.len() >= 15, "{queries:?}");
    // Each query as a recording rule, Grafana's variables filled in, so
    // promtool parses it as PromQL.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        let q = q
            .replace("$__rate_interval", "5m")
            .replace("$stream", ".*")
            .replace("$destination", ".*");
        let q = serde_json::to_string(&q).expect("JSON string is a YAML string");
        rules.push_str(&format!(
            "      - record: dashboard:q{i}\n        expr: {q}\n"
        ));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("dashboard-rules.yml");
    std::fs::write(&file, rules).expect("write rules");
    promtool_ok(&["check", "rules", &file.display().to_string()], "");
}

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
                        .failure_threshold(2)
                        .cooldown("50ms"),
                ),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_lint_clean_and_cover_dashboard_and_rules() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq));
    // bad's base directory is a plain file: every attempt fails, so its
    // breaker trips and the batch is dead-lettered.
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    std::fs::write(abrq.path("out/bad"), "not a directory\n").unwrap();
    abrq.start().await;

    let body: String = (0..10).map(|i| format!("{{\"i\":{i}}}\n")).collect();
    abrq.ingest(STREAM, &body).await;
    abrq.wait_for("good to deliver the 10 records", async || {
        abrq.metric(
            "abrq_stream_fanout_delivered_records_total",
            &[("destination", "good")],
        )
        .await
            == 10.0
    })
    .await;
    abrq.wait_circuit_opened("local").await;
    abrq.wait_for("a dead letter pending for bad", async || {
        abrq.metric(
            "abrq_stream_fanout_dead_letters_pending",
            &[("destination", "bad")],
        )
        .await
            == 1.0
    })
    .await;

    // Gauges the spool GC sets may land a moment later: poll.
    let used = used_names();
    assert!(used.len() >= 15, "{used:?}");
    let start = Instant::now();
    let scrape = loop {
        let text = abrq.metrics().await.text;
        let gone = missing(&used, &text);
        if gone.is_empty() {
            break text;
        }
        assert!(
            start.elapsed() < LONG,
            "used by deploy/ but not in /metrics: {gone:?}\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let lint = promtool_ok(&["check", "metrics"], &scrape);
    assert_eq!(lint, "", "promtool check metrics:\n{lint}");
}
