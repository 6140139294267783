//! Each engine's own keys, through the real binary: a key of another
//! engine fails `abrq check` and `abrq run` at startup naming the key, the
//! engine and the line, for destinations and sources alike; and `abrq
//! check` says what each connection field was taken to mean, with the
//! password shown as `***`.

use crate::common::*;

/// An HTTP-fed stream `s` with a local destination and an s3 one; `s3`
/// holds the s3 destination's connection lines.
fn config(abrq: &Abrq, s3: &str) -> String {
    format!(
        r#"data_dir = "{data}"
[server]
listen = "{listen}"

[[streams]]
name = "s"
[streams.source]
engine = "http"

[[streams.destinations]]
name = "lake"
engine = "local"
database = "{lake}"
format = "jsonl"

[[streams.destinations]]
name = "archive"
engine = "s3"
{s3}
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        lake = abrq.p("out/lake"),
    )
}

/// `text` with `line` put after the line that starts with `after`; and
/// the 1-based line it lands on.
fn with_line(text: &str, after: &str, line: &str) -> (String, usize) {
    let at = text
        .lines()
        .position(|l| l.starts_with(after))
        .expect("the anchor is in the config")
        + 1;
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(at, line);
    (lines.join("\n") + "\n", at + 1)
}

const DEAD_S3: &str = "host = \"http://127.0.0.1:9\"\ndatabase = \"bucket\"";

#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_another_engine_fails_check_and_run_naming_key_engine_and_line() {
    let abrq = Abrq::new();
    let good = config(&abrq, DEAD_S3);
    let cases = [
        (
            with_line(&good, "engine = \"s3\"", "partition_key = \"customer_id\""),
            "streams.destinations.partition_key: not a key of engine \"s3\" \
             (destination \"archive\"); its keys are prefix, format, date_partitioning, \
             manifest, region",
        ),
        (
            with_line(&good, "engine = \"http\"", "records = 100"),
            "streams.source.records: not a key of engine \"http\" (stream \"s\"); \
             its keys are ingest_token, max_body",
        ),
    ];
    let config = abrq.config_path().display().to_string();
    for ((text, line), says) in cases {
        abrq.write_config(&text);
        for verb in ["check", "run"] {
            let (status, stdout, stderr) = abrq.cli(&[verb, "--config", &config]).await;
            assert!(!status.success(), "{verb} accepted:\n{text}");
            let out = format!("{stdout}{stderr}");
            assert!(
                out.contains(&format!("line {line}: {says}")),
                "{verb} does not say line {line}: {says}\n{out}"
            );
        }
    }
    // Nothing was started: no state store was made.
    assert!(!abrq.path("data/state.db").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn check_says_what_each_connection_field_means_and_hides_the_password() {
    let s3 = abrq_testkit::S3::from_env();
    let bucket = abrq_testkit::names::bucket("check");
    s3.create_bucket(&bucket).await.expect("s3 bucket");
    // the emulator checks no signature, so a secret of our own, which
    // appears nowhere else, is the one to look for
    let secret = "hunter2-s3cret-value";
    let abrq = Abrq::new();
    let lines = format!(
        "host = {:?}\ndatabase = {bucket:?}\nusername = {:?}\npassword = {secret:?}\nregion = {:?}",
        s3.endpoint, s3.access_key_id, s3.region
    );
    abrq.write_config(&config(&abrq, &lines));
    let config = abrq.config_path().display().to_string();
    let (status, stdout, stderr) = abrq.cli(&["check", "--verbose", "--config", &config]).await;
    assert!(status.success(), "check failed: {stdout}{stderr}");
    // each entry: its checklist line, then (verbose) its fields, indented
    let block = |label: &str| -> String {
        let head = format!("ok    {label}");
        let mut lines = stdout.lines().skip_while(|l| !l.starts_with(&head));
        let first = lines
            .next()
            .unwrap_or_else(|| panic!("no {head:?} in:\n{stdout}"));
        let fields: Vec<&str> = lines.take_while(|l| l.starts_with("        ")).collect();
        format!("{first}\n{}", fields.join("\n"))
    };
    let lake = block("s/lake (local)");
    let archive = block("s/archive (s3)");
    for (block, line) in [
        (
            &lake,
            format!("database = base directory {:?}", abrq.p("out/lake")),
        ),
        (&archive, format!("host = endpoint URL {:?}", s3.endpoint)),
        (&archive, format!("database = bucket {bucket:?}")),
        (
            &archive,
            format!("username = access key id {:?}", s3.access_key_id),
        ),
        (&archive, "password = secret access key ***".to_string()),
    ] {
        assert!(block.contains(&line), "no {line:?} in:\n{block}");
    }
    assert!(!lake.contains("host ="), "{lake}");
    assert!(!format!("{stdout}{stderr}").contains(secret));
}
