//! A config with a syntax error on a secret's line, through the real
//! binary: `abrq check` and `abrq run` refuse it naming the line and the
//! key, and the secret's value appears nowhere in what they print.

use crate::common::*;

/// A good config with `line` put in place of line `at` (1-based).
fn config_with(abrq: &Abrq, at: usize, line: &str) -> String {
    let good = format!(
        r#"data_dir = "{data}"
[server]
listen = "{listen}"
admin_token = "Adm1n-t0ken-value"

[[streams]]
name = "orders"
[streams.source]
engine = "http"
ingest_token = "1ngest-t0ken-value"

[[streams.destinations]]
name = "lake"
engine = "s3"
host = "http://127.0.0.1:9"
database = "bucket"
username = "key-id"
password = "hunter2-s3cret-value"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
    );
    let mut lines: Vec<&str> = good.lines().collect();
    lines[at - 1] = line;
    lines.join("\n") + "\n"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_secret_line_is_named_but_its_value_never_printed() {
    let abrq = Abrq::new();
    let config = abrq.config_path().display().to_string();
    let cases = [
        (
            18,
            "password = \"hunter2-s3cret-value",
            "hunter2",
            "password",
        ),
        (
            4,
            "admin_token = \"Adm1n-t0ken-value\" x",
            "Adm1n",
            "admin_token",
        ),
        (
            10,
            "ingest_token = 1ngest-t0ken-value",
            "1ngest",
            "ingest_token",
        ),
    ];
    for (at, line, secret, key) in cases {
        abrq.write_config(&config_with(&abrq, at, line));
        for verb in ["check", "run"] {
            let (status, stdout, stderr) = abrq.cli(&[verb, "--config", &config]).await;
            assert!(!status.success(), "{verb} accepted {line:?}");
            let out = format!("{stdout}{stderr}");
            assert!(!out.contains(secret), "{verb} printed the secret:\n{out}");
            assert!(
                out.contains(&format!("line {at},")),
                "{verb}: no line {at}:\n{out}"
            );
            assert!(out.contains(key), "{verb}: no key {key}:\n{out}");
        }
    }
}
