//! The API answers exactly what `/v1/openapi.json` says: schemathesis
//! (PyPI, installed by `scripts/services.sh up`) fuzzes every operation
//! with the admin token, runs every check (status codes, response schemas,
//! content types, schema-violating requests refused, valid ones accepted,
//! missing auth refused, no 5xx), and must find nothing. The server has a
//! healthy destination and a broken one with dead letters, and the fuzzer
//! is pointed at their real names, so the calls reach past the 404s.
//!
//! Also, by hand: every error, a 404 for an unknown path and a 405
//! included, has the one JSON shape `{"error": "..."}`.

use std::process::Command;

use crate::common::*;
use reqwest::Method;

const TOKEN: &str = "contract-token";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .admin_token(TOKEN)
        .stream(
            Stream::new("events", Source::http())
                .destination(Destination::local("lake", abrq.p("out/lake")).format("jsonl"))
                .destination(
                    Destination::local("bad", abrq.p("out/bad"))
                        .format("jsonl")
                        .max_attempts(1),
                ),
        )
        .to_string()
}

/// The server, with two pending dead letters (ids 1 and 2) on `bad`.
async fn server() -> Abrq {
    let mut abrq = Abrq::new();
    abrq.admin_token = Some(TOKEN.into());
    abrq.write_config(&config(&abrq));
    std::fs::create_dir_all(abrq.path("out")).unwrap();
    // a plain file where bad's directory goes: every write fails
    std::fs::write(abrq.path("out/bad"), "not a directory\n").unwrap();
    abrq.start().await;
    for tag in ["a", "b"] {
        abrq.ingest("events", &format!("{{\"tag\":\"{tag}\"}}\n"))
            .await;
    }
    abrq.wait_for("two dead letters", async || {
        abrq.dead_letters("events", "bad").await.len() == 2
    })
    .await;
    abrq
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_nothing() {
    let abrq = server().await;
    let st = std::env::var("ABRQ_TEST_SCHEMATHESIS").unwrap_or_else(|_| "st".into());
    let settings = abrq.path("schemathesis.toml");
    std::fs::write(
        &settings,
        "[parameters]\n\"path.stream\" = \"events\"\n\"path.destination\" = \"bad\"\n\"path.id\" = 1\n",
    )
    .unwrap();
    // A fixed seed, so a run is repeatable; ABRQ_SCHEMATHESIS_SEED explores.
    let seed = std::env::var("ABRQ_SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261202".into());
    let examples = std::env::var("ABRQ_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "50".into());
    let out = Command::new(&st)
        .arg("--config-file")
        .arg(&settings)
        .args(["run", &format!("{}/v1/openapi.json", abrq.base())])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args([
            "--checks",
            "all",
            "--max-examples",
            &examples,
            "--seed",
            &seed,
        ])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .env("NO_COLOR", "1")
        .current_dir(abrq.dir())
        .output()
        .unwrap_or_else(|e| panic!("run {st}: {e} (scripts/services.sh up installs schemathesis)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found failures:\n{text}");
    assert!(text.contains("23/23"), "every operation tested:\n{text}");
    abrq.assert_alive();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_error_has_one_json_shape() {
    let abrq = server().await;
    let cases = [
        (Method::GET, "/v1/nope", 404),
        (Method::GET, "/nope", 404),
        (Method::DELETE, "/v1/streams", 405),
        (
            Method::GET,
            "/v1/streams/events/destinations/bad/pause",
            405,
        ),
        (Method::GET, "/v1/streams/nope", 404),
        (
            Method::GET,
            "/v1/streams/events/destinations/bad/dead-letters/9223372036854775808",
            400,
        ),
        (
            Method::GET,
            "/v1/streams/events/destinations/bad/dead-letters?state=lost",
            400,
        ),
        (Method::GET, "/v1/audit?limit=0", 400),
        (Method::GET, "/v1/audit?limit=10001", 400),
        (Method::GET, "/v1/audit?limit=ten", 400),
        (
            Method::POST,
            "/v1/streams/events/destinations/bad/explode",
            404,
        ),
        (Method::POST, "/v1/streams/events/backfill", 409),
        (
            Method::POST,
            "/v1/streams/events/destinations/lake/dead-letters/1/replay",
            404,
        ),
    ];
    for (method, path, want) in cases {
        let (code, body) = abrq.call(method.clone(), path, None, &[]).await;
        assert_eq!(code, want, "{method} {path}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            !error.is_empty() && body.as_object().is_some_and(|o| o.len() == 1),
            "{method} {path}: not {{\"error\": ...}}: {body}"
        );
    }
    // replaying one twice: the second is a conflict, in the same shape
    let replay = "/v1/streams/events/destinations/bad/dead-letters/1/discard";
    assert_eq!(abrq.call(Method::POST, replay, None, &[]).await.0, 200);
    let (code, body) = abrq.call(Method::POST, replay, None, &[]).await;
    assert_eq!(code, 409, "{body}");
    assert!(body["error"].is_string(), "{body}");
}
