//! Property tests of config loading: arbitrary text, and a valid config
//! using every section whose lines are randomly deleted, duplicated, moved
//! and altered. `Config::parse` never panics, and an error never shows a
//! secret: neither a value written for a secret key nor what a `${VAR}` or
//! `${file:..}` brought in.
//!
//! Small by default, so CI stays fast; `PROPTEST_CASES=100000` goes further.

use std::sync::OnceLock;

use abrq_core::config::Config;
use proptest::prelude::*;
use proptest::sample::Index;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig {
        // a failure is kept as a named test beside the code it found
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 1024;
    }
    c
}

/// Secret values: written in the text, and brought in by interpolation.
/// Their letters appear nowhere else in the config or its messages.
const WRITTEN: [&str; 3] = ["QxwVbzKpA1", "QjwHyzTmB2", "QkwRdzNsC3"];
const FROM_ENV: &str = "QvwGfzLqD4";
const FROM_FILE: &str = "QuwJczXeE5";

/// A valid config with every section and every secret key, the
/// interpolated ones included; `{file}` is the secret file's path.
const VALID: &str = r#"data_dir = "/tmp/abrq-fuzz"

[state]
url = "sqlite:///tmp/abrq-fuzz/state.db"

[server]
listen = "127.0.0.1:8480"
admin_token = "QxwVbzKpA1"

[spool]
max_bytes = "10GiB"
gc_interval = "1s"

[[streams]]
name = "ingest"
[streams.source]
engine = "http"
ingest_token = "QjwHyzTmB2"
max_body = "16MiB"
[streams.batch]
max_records = 1000
max_bytes = "4MiB"
max_wait = "1s"

[[streams.destinations]]
name = "lake"
engine = "s3"
host = "http://127.0.0.1:9000"
region = "us-east-1"
database = "bucket"
username = "key-id"
password = "${ABRQ_FUZZ_SECRET}"
prefix = "exports/orders"
format = "jsonl.gz"
date_partitioning = true
manifest = true
[streams.destinations.retry]
max_attempts = 10
initial_backoff = "500ms"
max_backoff = "60s"
attempt_timeout = "30s"
[streams.destinations.breaker]
failure_threshold = 5
cooldown = "30s"

[[streams.destinations]]
name = "events"
engine = "kafka"
host = "broker-1:9093"
database = "orders"
partition_key = "customer_id"
username = "abrq"
password = "${file:{file}}"
sasl_mechanism = "SCRAM-SHA-512"
tls = true
tls_ca_file = "/etc/abrq/ca.pem"

[[streams]]
name = "replica"
[streams.source]
engine = "postgres"
host = "db"
port = 5432
database = "app"
username = "reader"
password = "QkwRdzNsC3"
table = "orders"
cursor = "updated_at"
poll_interval = "5s"
mode = "cdc"

[[streams.destinations]]
name = "warehouse"
engine = "postgres"
host = "wh"
port = 5432
database = "dw"
username = "writer"
table = "orders"
schema = "public"
schema_drift = { columns = "evolve", types = "widen" }
truncate = "apply"
mode = "upsert"
primary_key = ["id"]

[[streams]]
name = "files"
[streams.source]
engine = "file"
path = "data/orders.csv"
format = "csv"
follow = true

[[streams.destinations]]
name = "reports"
engine = "local"
database = "/tmp/abrq-fuzz/out"
format = "csv"
enabled = false

[[streams]]
name = "synthetic"
[streams.source]
engine = "generate"
records = 100
[[streams.destinations]]
name = "ftp"
engine = "ftps"
host = "ftp.example"
database = "/in"
tls_ca_file = "/etc/abrq/ftp-ca.pem"
"#;

/// The valid config with the secret file's path filled in; sets the
/// secret variable and writes the secret file once.
fn valid() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("abrq-fuzz-secret-{}", std::process::id()));
        std::fs::write(&path, format!("{FROM_FILE}\n")).unwrap();
        std::env::set_var("ABRQ_FUZZ_SECRET", FROM_ENV);
        VALID.replace("{file}", &path.display().to_string())
    })
}

/// Fails if `error` shows any secret, or any 4 letters of one.
fn assert_no_secret(text: &str, error: &str) {
    for s in WRITTEN.iter().chain([&FROM_ENV, &FROM_FILE]) {
        let chars: Vec<char> = s.chars().collect();
        for w in chars.windows(4) {
            let w: String = w.iter().collect();
            assert!(
                !error.contains(&w),
                "the error shows {w:?} of a secret\n--- error\n{error}\n--- text\n{text}"
            );
        }
    }
}

#[test]
fn the_valid_config_parses() {
    let c = Config::parse(valid(), "fuzz.toml").unwrap();
    let shown = format!("{c:?}");
    assert_no_secret(valid(), &shown);
    assert_eq!(c.streams.len(), 4);
}

/// What a mutation may put into a line.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "\"",
        "'",
        "\"\"\"",
        "'''",
        "=",
        " = ",
        "[",
        "]",
        "[[",
        "]]",
        "{",
        "}",
        ",",
        "#",
        "\\",
        "\\q",
        "${",
        "}",
        "${NOPE_NOT_SET}",
        "${file:/nonexistent}",
        "\n",
        "\r",
        " x",
        "1",
        "-1",
        "99999999999999999999",
        "1.5",
        "true",
        "1979-05-27T07:32:00Z",
        "é",
        "\u{0}",
        ".",
        "password",
        "admin_token",
        "ingest_token",
        "engine",
        "streams",
        "destinations",
        "name",
        "\"ms\"",
        "\"10 lightyears\"",
    ])
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(Index),
    Duplicate(Index),
    Swap(Index, Index),
    /// Cut the line at a character, dropping the rest.
    Truncate(Index, Index),
    Insert(Index, Index, &'static str),
    /// Replace what follows the line's `=` with a token.
    Value(Index, &'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Delete),
        any::<Index>().prop_map(Mutation::Duplicate),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Truncate(a, b)),
        (any::<Index>(), any::<Index>(), token()).prop_map(|(a, b, t)| Mutation::Insert(a, b, t)),
        (any::<Index>(), token()).prop_map(|(a, t)| Mutation::Value(a, t)),
    ]
}

fn char_at(line: &str, i: &Index) -> usize {
    let n = line.chars().count();
    line.char_indices()
        .map(|(b, _)| b)
        .chain([line.len()])
        .nth(i.index(n + 1))
        .unwrap()
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for m in mutations {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match m {
            Mutation::Delete(i) => {
                lines.remove(i.index(n));
            }
            Mutation::Duplicate(i) => {
                let l = lines[i.index(n)].clone();
                lines.insert(i.index(n), l);
            }
            Mutation::Swap(a, b) => lines.swap(a.index(n), b.index(n)),
            Mutation::Truncate(i, at) => {
                let l = &mut lines[i.index(n)];
                let at = char_at(l, at);
                l.truncate(at);
            }
            Mutation::Insert(i, at, t) => {
                let l = &mut lines[i.index(n)];
                let at = char_at(l, at);
                l.insert_str(at, t);
            }
            Mutation::Value(i, t) => {
                let l = &mut lines[i.index(n)];
                if let Some(eq) = l.find('=') {
                    l.truncate(eq + 1);
                    l.push(' ');
                    l.push_str(t);
                }
            }
        }
    }
    lines.join("\n")
}

fn toml_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![token().prop_map(str::to_string), "[a-z_]{1,8}"],
        0..60,
    )
    .prop_map(|ps| ps.concat())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_text_parses_or_fails_without_panic(
        text in prop_oneof![any::<String>(), toml_soup()],
    ) {
        if let Err(e) = Config::parse(&text, "fuzz.toml") {
            assert_no_secret(&text, &e.to_string());
        }
    }

    #[test]
    fn a_mutated_config_never_shows_a_secret(
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let text = mutate(valid(), &mutations);
        // (a config that parses may hold a secret in another value, when a
        // mutation opened a multi-line string over its line: that is the
        // text's meaning, and nothing is printed)
        if let Err(e) = Config::parse(&text, "fuzz.toml") {
            assert_no_secret(&text, &e.to_string());
        }
    }
}
