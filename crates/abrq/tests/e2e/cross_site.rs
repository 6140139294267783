//! A web page must not drive abrq through a user's browser. On a loopback
//! listener without an admin token, the requests a page can make without a
//! CORS preflight (forms, text/plain fetches), or through a rebound DNS
//! name, are refused and change nothing; the CLI and same-origin JSON
//! calls still work, and probes stay plain GETs.

use crate::common::*;
use reqwest::Method;
use serde_json::Value;

const EVIL: &str = "http://evil.example";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .stream(
            Stream::new("s", Source::http())
                .destination(Destination::local("lake", abrq.p("out/lake")))
                .destination(Destination::local("broken", abrq.p("broken-file")).max_attempts(1)),
        )
        .to_string()
}

/// A request as a browser would send it: no custom header, whatever
/// headers the page could set; (status, body).
async fn browser(
    abrq: &Abrq,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut req = abrq
        .http
        .request(method, format!("{}{path}", abrq.base()))
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// What the refused requests must leave alone.
async fn snapshot(abrq: &Abrq) -> Value {
    let st = abrq.status("s").await;
    let d = |name| {
        let d = dest_of(&st, name);
        serde_json::json!([d["enabled"], d["paused"], d["pending_dead_letters"]])
    };
    serde_json::json!({
        "lake": d("lake"),
        "broken": d("broken"),
        "last_seq": st["spool"]["last_seq"],
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_requests_cannot_pause_disable_discard_or_ingest() {
    let mut abrq = Abrq::new();
    std::fs::write(abrq.path("broken-file"), "not a directory\n").unwrap();
    abrq.write_config(&config(&abrq));
    abrq.start().await;
    abrq.ingest("s", "{\"a\":1}\n").await;
    abrq.wait_status("s", "lake delivered seq 1, broken dead-lettered it", |st| {
        dest_of(st, "broken")["pending_dead_letters"] == 1
            && dest_of(st, "lake")["high_water_mark"] == 1
    })
    .await;
    let id = abrq.dead_letters("s", "broken").await[0]["id"].clone();
    let before = snapshot(&abrq).await;

    let lake = "/v1/streams/s/destinations/lake";
    let dl = "/v1/streams/s/destinations/broken/dead-letters";
    let writes = [
        format!("{lake}/pause"),
        format!("{lake}/disable"),
        format!("{dl}/{id}/discard"),
        format!("{dl}/discard-all"),
        "/v1/streams/s/records".to_string(),
    ];
    let form = ("content-type", "application/x-www-form-urlencoded");
    let text = ("content-type", "text/plain");
    for path in &writes {
        for ct in [form, text] {
            // A page on another site: the browser names it in Origin.
            let (code, body) = browser(
                &abrq,
                Method::POST,
                path,
                &[ct, ("origin", EVIL)],
                "{\"a\":2}\n",
            )
            .await;
            assert_eq!(code, 403, "POST {path} {ct:?} from {EVIL}: {body}");
            // A browser that sends no Origin: the content type gives it away.
            let (code, body) = browser(&abrq, Method::POST, path, &[ct], "{\"a\":2}\n").await;
            assert_eq!(code, 415, "POST {path} {ct:?}: {body}");
        }
        // DNS rebinding: the page's own name, resolved to 127.0.0.1, even
        // with a JSON body the page could send after a preflight.
        let json = ("content-type", "application/json");
        let (code, body) = browser(
            &abrq,
            Method::POST,
            path,
            &[json, ("host", "evil.example")],
            "{}",
        )
        .await;
        assert_eq!(code, 403, "POST {path} with Host evil.example: {body}");
    }
    // Reading the admin API cross-origin or through a rebound name.
    let (code, _) = browser(&abrq, Method::GET, "/v1/streams", &[("origin", EVIL)], "").await;
    assert_eq!(code, 403, "GET /v1/streams from {EVIL}");
    let rebound = [("host", "evil.example:80")];
    let (code, _) = browser(&abrq, Method::GET, "/v1/streams", &rebound, "").await;
    assert_eq!(code, 403, "GET /v1/streams with Host evil.example");
    assert_eq!(
        snapshot(&abrq).await,
        before,
        "a refused request changed something"
    );
    assert!(
        read_dest(&abrq.path("out/lake")).record_count() == 1,
        "a refused ingest was delivered"
    );

    // Probes stay plain GETs.
    for path in ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"] {
        let h = [("origin", EVIL), ("host", "evil.example")];
        let (code, body) = browser(&abrq, Method::GET, path, &h, "").await;
        assert_eq!(code, 200, "GET {path}: {body}");
    }

    // The server's own origin with a JSON body is served.
    let own = format!("http://{}", abrq.listen());
    let h = [
        ("origin", own.as_str()),
        ("content-type", "application/json"),
    ];
    let (code, body) = browser(&abrq, Method::POST, &format!("{lake}/pause"), &h, "").await;
    assert_eq!(code, 200, "same-origin pause: {body}");
    assert_eq!(abrq.dest("s", "lake").await["paused"], true);

    // And the CLI, on loopback without a token, as before.
    let base = abrq.base();
    let target = ["--stream", "s", "--destination", "lake"];
    let args = [
        &["destination", "resume"][..],
        &target,
        &["--server", &base],
    ]
    .concat();
    let (status, _, stderr) = abrq.cli(&args).await;
    assert!(status.success(), "abrq destination resume: {stderr}");
    assert_eq!(abrq.dest("s", "lake").await["paused"], false);
    let broken = ["--stream", "s", "--destination", "broken"];
    let args = [
        &["dead-letters", "discard", "--all"][..],
        &broken,
        &["--server", &base],
    ]
    .concat();
    let (status, stdout, stderr) = abrq.cli(&args).await;
    assert!(status.success(), "abrq dead-letters discard: {stderr}");
    assert!(stdout.contains("discarded 1"), "{stdout}");
}

/// `server.allowed_hosts` closes DNS rebinding on a listener that has a
/// token too, probes included: a page whose name resolves to this server
/// reads not even `/metrics`. Listed names and loopback are served.
#[tokio::test(flavor = "multi_thread")]
async fn allowed_hosts_refuse_other_names_on_every_path() {
    let mut abrq = Abrq::new();
    let text = Config::new(&abrq)
        .admin_token("t0ken")
        .allowed_hosts(&["abrq.internal"])
        .stream(
            Stream::new("s", Source::http())
                .destination(Destination::local("lake", abrq.p("out/lake"))),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.admin_token = Some("t0ken".into());
    abrq.start().await;
    let auth = ("authorization", "Bearer t0ken");
    for path in ["/healthz", "/readyz", "/metrics", "/v1/streams"] {
        for host in [
            "evil.example",
            "evil.example:80",
            "abrq.internal.evil.example",
        ] {
            let (code, body) = browser(&abrq, Method::GET, path, &[auth, ("host", host)], "").await;
            assert_eq!(code, 403, "GET {path} with Host {host}: {body}");
            assert!(body.contains("allowed_hosts"), "{body}");
        }
        for host in ["abrq.internal", "ABRQ.internal:9443"] {
            let (code, body) = browser(&abrq, Method::GET, path, &[auth, ("host", host)], "").await;
            assert_eq!(code, 200, "GET {path} with Host {host}: {body}");
        }
        // the address the process was started on is loopback: served
        let (code, body) = browser(&abrq, Method::GET, path, &[auth], "").await;
        assert_eq!(code, 200, "GET {path} on {}: {body}", abrq.listen());
    }
    let ingest = "/v1/streams/s/records";
    let json = ("content-type", "application/json");
    let h = [auth, json, ("host", "evil.example")];
    let (code, body) = browser(&abrq, Method::POST, ingest, &h, "{\"a\":1}\n").await;
    assert_eq!(code, 403, "ingest with Host evil.example: {body}");
    let h = [auth, json, ("host", "abrq.internal")];
    let (code, body) = browser(&abrq, Method::POST, ingest, &h, "{\"a\":1}\n").await;
    assert!(
        (200..300).contains(&code),
        "ingest with Host abrq.internal: {code} {body}"
    );
    let st = abrq.status("s").await;
    assert_eq!(
        st["spool"]["last_seq"], 1,
        "only the listed host's ingest was staged"
    );
}
