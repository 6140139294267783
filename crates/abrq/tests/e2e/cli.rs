//! The binary's own surface: `abrq check`, the refusal to expose an
//! unauthenticated API, the admin token, the OpenAPI document, `/metrics`,
//! and the operator verbs talking to a running server.

use crate::common::*;
use serde_json::Value;

const TOKEN: &str = "admin-t0ken";

/// A config whose server listens on `listen`, with one healthy and one
/// broken destination (its base directory is a file): the first batch trips
/// its breaker (threshold 1) and is dead-lettered (1 attempt).
fn config(abrq: &Abrq, listen: &str, admin_token: Option<&str>) -> Config {
    let config = Config::new(abrq).listen(listen);
    let config = match admin_token {
        Some(token) => config.admin_token(token),
        None => config,
    };
    config.stream(
        Stream::new("s", Source::http())
            .destination(Destination::local("lake", abrq.p("out/lake")).format("jsonl"))
            .destination(
                Destination::local("broken", abrq.p("broken-file"))
                    .max_attempts(1)
                    .failure_threshold(1)
                    .cooldown("1h"),
            ),
    )
}

/// Runs an operator verb against the test's server (URL and token on the
/// command line); it must succeed. Returns its stdout.
async fn verb(abrq: &Abrq, words: &[&str]) -> String {
    let base = abrq.base();
    let mut args = words.to_vec();
    args.extend(["--server", &base, "--token", TOKEN]);
    let (status, stdout, stderr) = abrq.cli(&args).await;
    assert!(status.success(), "abrq {args:?} failed: {stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn check_names_an_unknown_key_and_its_line() {
    let abrq = Abrq::new();
    let text = config(&abrq, &abrq.listen(), None)
        .to_string()
        .replace("format = \"jsonl\"", "formatt = \"jsonl\"");
    let line = text
        .lines()
        .position(|l| l.starts_with("formatt"))
        .expect("the typo is in the config")
        + 1;
    abrq.write_config(&text);
    let config = abrq.config_path().display().to_string();
    let (status, stdout, stderr) = abrq.cli(&["check", "--config", &config]).await;
    assert!(!status.success(), "check accepted an unknown key");
    let out = format!("{stdout}{stderr}");
    assert!(
        out.contains("formatt"),
        "error does not name the key: {out}"
    );
    assert!(
        out.contains(&format!("line {line}")),
        "error does not name line {line}: {out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn check_proves_each_destination_writable_and_names_the_one_that_is_not() {
    let abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &abrq.listen(), None).to_string());
    let config = abrq.config_path().display().to_string();
    let (status, stdout, stderr) = abrq.cli(&["check", "--config", &config]).await;
    assert!(
        status.success(),
        "check failed on a good config: {stdout}{stderr}"
    );
    assert!(stdout.contains("ok    s/lake (local)"), "{stdout}");
    // The probe objects are gone again.
    for d in ["out/lake", "broken-file"] {
        let out = read_dest(&abrq.path(d));
        assert!(
            out.objects.is_empty() && out.other.is_empty(),
            "{d}: {out:?}"
        );
    }

    // Now break one of them: a plain file where its directory goes.
    std::fs::remove_dir_all(abrq.path("broken-file")).unwrap();
    std::fs::write(abrq.path("broken-file"), "not a directory\n").unwrap();
    let (status, stdout, _) = abrq.cli(&["check", "--config", &config]).await;
    assert!(
        !status.success(),
        "check passed a destination that cannot be written"
    );
    assert!(stdout.contains("FAIL  s/broken (local)"), "{stdout}");
    assert!(
        stdout.contains("hint: `database` must name a directory"),
        "{stdout}"
    );
    assert!(stdout.contains("ok    s/lake (local)"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_refuses_a_non_loopback_listen_without_an_admin_token() {
    let abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &format!("0.0.0.0:{}", abrq.port), None).to_string());
    let config = abrq.config_path().display().to_string();
    let (status, _, stderr) = abrq.cli(&["run", "--config", &config]).await;
    assert!(!status.success(), "run started with an open API");
    assert!(stderr.contains("admin_token"), "{stderr}");
    // Nothing listened meanwhile: the port is still free.
    std::net::TcpListener::bind(("0.0.0.0", abrq.port)).expect("port was left free");
}

#[tokio::test(flavor = "multi_thread")]
async fn token_guards_the_api_and_operator_verbs_work_against_a_server() {
    let mut abrq = Abrq::new();
    std::fs::write(abrq.path("broken-file"), "not a directory\n").unwrap();
    // Off loopback is allowed once there is a token, and plain HTTP there
    // once the config says the network may carry it in clear text.
    abrq.write_config(
        &config(&abrq, &format!("0.0.0.0:{}", abrq.port), Some(TOKEN))
            .allow_plaintext()
            .to_string(),
    );
    abrq.start().await;

    // --- the admin token ---
    let (code, body) = abrq
        .call(reqwest::Method::GET, "/v1/streams", None, &[])
        .await;
    assert_eq!(code, 401, "no token: {body}");
    let wrong = [("authorization", "Bearer nope")];
    let (code, _) = abrq
        .call(reqwest::Method::GET, "/v1/streams", None, &wrong)
        .await;
    assert_eq!(code, 401, "wrong token");
    let (code, _) = abrq
        .call(
            reqwest::Method::POST,
            "/v1/streams/s/destinations/lake/pause",
            None,
            &[],
        )
        .await;
    assert_eq!(code, 401, "an action without a token");
    // Without an ingest_token the admin token guards ingest too.
    let (code, _) = abrq
        .call(
            reqwest::Method::POST,
            "/v1/streams/s/records",
            Some(b"{\"a\":1}".to_vec()),
            &[],
        )
        .await;
    assert_eq!(code, 401, "ingest without a token");
    abrq.admin_token = Some(TOKEN.into());
    let st = abrq.status("s").await;
    assert_eq!(
        dest_of(&st, "lake")["paused"],
        false,
        "the refused pause happened: {st}"
    );

    // --- the OpenAPI document lists the API ---
    let (code, doc) = abrq
        .call(reqwest::Method::GET, "/v1/openapi.json", None, &[])
        .await;
    assert_eq!(code, 200);
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with('3')),
        "{doc}"
    );
    let paths = doc["paths"].as_object().expect("paths");
    let dest = "/v1/streams/{stream}/destinations/{destination}";
    let mut want = vec![
        "/v1/streams".to_string(),
        "/v1/streams/{stream}".into(),
        "/v1/streams/{stream}/records".into(),
        "/v1/audit".into(),
    ];
    for tail in [
        "breaker/reset",
        "enable",
        "disable",
        "pause",
        "resume",
        "dead-letters",
        "dead-letters/{id}",
        "dead-letters/{id}/replay",
        "dead-letters/{id}/discard",
        "dead-letters/replay-all",
        "dead-letters/discard-all",
    ] {
        want.push(format!("{dest}/{tail}"));
    }
    for p in &want {
        assert!(paths.contains_key(p), "openapi.json lacks {p}");
    }

    // --- a batch trips broken's breaker and is dead-lettered ---
    abrq.ingest("s", "{\"a\":1}\n{\"a\":2}\n").await;
    abrq.wait_status("s", "broken dead-lettered seq 1, lake delivered it", |st| {
        dest_of(st, "broken")["pending_dead_letters"] == 1
            && dest_of(st, "lake")["high_water_mark"] == 1
    })
    .await;
    let m = abrq.metrics().await;
    assert!(
        m.has("abrq_stream_fanout_circuit_opened_total"),
        "{}",
        m.text
    );
    assert_eq!(
        m.get(
            "abrq_stream_fanout_circuit_opened_total",
            &[("destination_kind", "local")]
        ),
        1.0
    );

    // --- operator verbs ---
    let table = verb(&abrq, &["status"]).await;
    for word in ["lake", "broken", "open"] {
        assert!(table.contains(word), "status lacks {word:?}:\n{table}");
    }
    let json: Value = serde_json::from_str(&verb(&abrq, &["status", "--json"]).await)
        .expect("status --json is JSON");
    assert_eq!(json["streams"][0]["name"], "s");
    // Without the token the CLI fails and says why.
    let (status, _, stderr) = abrq.cli(&["status", "--server", &abrq.base()]).await;
    assert!(!status.success());
    assert!(stderr.contains("401"), "{stderr}");
    // The server and token can also come from the config.
    let config = abrq.config_path().display().to_string();
    let (status, _, stderr) = abrq.cli(&["status", "--config", &config]).await;
    assert!(status.success(), "status --config: {stderr}");

    let lake = ["--stream", "s", "--destination", "lake"];
    verb(&abrq, &[&["destination", "pause"][..], &lake].concat()).await;
    assert_eq!(abrq.dest("s", "lake").await["paused"], true);
    verb(&abrq, &[&["destination", "resume"][..], &lake].concat()).await;
    assert_eq!(abrq.dest("s", "lake").await["paused"], false);

    let broken = ["--stream", "s", "--destination", "broken"];
    let list = verb(&abrq, &[&["dead-letters", "list"][..], &broken].concat()).await;
    assert!(list.contains("retries_exhausted"), "{list}");
    verb(&abrq, &[&["breaker", "reset"][..], &broken].concat()).await;
    let d = abrq.dest("s", "broken").await;
    assert_eq!(d["breaker"]["state"], "closed", "{d}");
    let out = verb(
        &abrq,
        &[&["dead-letters", "discard", "--all"][..], &broken].concat(),
    )
    .await;
    assert!(out.contains("discarded 1"), "{out}");
    assert_eq!(abrq.dest("s", "broken").await["pending_dead_letters"], 0);

    // Every verb is in the audit log, attributed to the CLI.
    let audit = abrq.get("/v1/audit").await;
    let entries = audit["entries"].as_array().unwrap();
    for action in ["pause", "resume", "breaker_reset", "discard"] {
        assert!(
            entries.iter().any(|e| e["action"] == action
                && e["actor"].as_str().is_some_and(|a| a.starts_with("cli:"))),
            "no CLI audit entry for {action}: {audit}"
        );
    }
}

/// Dashboards and alerts need the contract's counters from the start (a
/// series that appears only after its first event breaks `rate()` and
/// absence alerts), and the user's document names this one explicitly.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_export_the_circuit_counter_before_any_trip() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &abrq.listen(), None).to_string());
    abrq.start().await;
    let m = abrq.metrics().await;
    assert!(
        m.has("abrq_stream_fanout_circuit_opened_total"),
        "{}",
        m.text
    );
    assert_eq!(
        m.get(
            "abrq_stream_fanout_circuit_opened_total",
            &[("destination_kind", "local")]
        ),
        0.0
    );
}
