//! HTTP ingest: 200 only once staged; a request is staged whole or not at
//! all. Malformed bodies (400 naming the line), bodies over `max_body`
//! (413, whether declared or chunked), and missing or wrong tokens (401,
//! before any content rule answers 415) stage nothing; an `Idempotency-Key` retry stages nothing twice; NDJSON
//! and JSON arrays both work, and what was staged is what arrives.

use crate::common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STREAM: &str = "signups";
const TOKEN: &str = "ingest-s3cret";
const PATH: &str = "/v1/streams/signups/records";

fn config(abrq: &Abrq) -> String {
    Config::new(abrq)
        .stream(
            Stream::new(STREAM, Source::http().ingest_token(TOKEN).max_body("1KiB"))
                .max_records(2)
                .destination(Destination::local("out", abrq.p("out")).format("jsonl")),
        )
        .to_string()
}

/// POST `body` to the ingest endpoint with the given token and headers.
async fn post(
    abrq: &Abrq,
    body: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut h: Vec<(&str, &str)> = headers.to_vec();
    if let Some(a) = &auth {
        h.push(("authorization", a));
    }
    abrq.call(
        reqwest::Method::POST,
        PATH,
        Some(body.as_bytes().to_vec()),
        &h,
    )
    .await
}

/// The same POST over a raw socket with a chunked body (no Content-Length),
/// so the limit must be enforced while reading. Returns the status code.
async fn post_chunked(abrq: &Abrq, body: &[u8]) -> u16 {
    let mut req = format!(
        "POST {PATH} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        abrq.listen()
    )
    .into_bytes();
    for chunk in body.chunks(200) {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let mut s = tokio::net::TcpStream::connect(abrq.listen()).await.unwrap();
    // One write, well under the server's read buffer: nothing is left
    // unread in the socket when it answers early and closes.
    s.write_all(&req).await.unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp).await;
    let text = String::from_utf8_lossy(&resp);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

/// Nothing staged beyond `last_seq` / `records` so far.
async fn assert_staged(abrq: &Abrq, last_seq: u64, records: f64, after: &str) {
    let st = abrq.status(STREAM).await;
    assert_eq!(u(&st["spool"]["last_seq"]), last_seq, "after {after}: {st}");
    let staged = abrq
        .metric("abrq_stream_records_staged_total", &[("stream", STREAM)])
        .await;
    assert_eq!(staged, records, "records staged after {after}");
}

fn ndjson(records: &[Value]) -> String {
    records.iter().map(|r| format!("{r}\n")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_stages_whole_requests_only() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq));
    abrq.start().await;

    // --- malformed: the whole request is refused, naming the line ---
    let body = "{\"user\":1}\n{\"user\":2}\n{\"user\": }\n{\"user\":4}\n";
    let (code, err) = post(&abrq, body, Some(TOKEN), &[]).await;
    assert_eq!(code, 400, "{err}");
    let msg = err["error"].as_str().unwrap_or_default();
    assert!(msg.contains("line 3"), "error does not name line 3: {err}");
    // valid JSON that is not an object is malformed too
    let (code, err) = post(&abrq, "{\"user\":1}\n[1,2]\n", Some(TOKEN), &[]).await;
    assert_eq!(code, 400, "{err}");
    assert!(
        err["error"].as_str().unwrap_or_default().contains("line 2"),
        "{err}"
    );
    assert_staged(&abrq, 0, 0.0, "malformed bodies").await;

    // --- over max_body (1 KiB): declared, and chunked ---
    let big = ndjson(
        &(0..40)
            .map(|i| json!({"user": i, "pad": "x".repeat(20)}))
            .collect::<Vec<_>>(),
    );
    assert!(big.len() > 1024);
    let (code, err) = post(&abrq, &big, Some(TOKEN), &[]).await;
    assert_eq!(code, 413, "{err}");
    assert_eq!(post_chunked(&abrq, big.as_bytes()).await, 413);
    assert_staged(&abrq, 0, 0.0, "oversized bodies").await;

    // --- tokens ---
    let good = ndjson(&[
        json!({"user": "ada"}),
        json!({"user": "bob"}),
        json!({"user": "cy"}),
    ]);
    let (code, err) = post(&abrq, &good, None, &[]).await;
    assert_eq!(code, 401, "no token: {err}");
    let (code, err) = post(&abrq, &good, Some("wrong-token"), &[]).await;
    assert_eq!(code, 401, "wrong token: {err}");
    // a form a browser could send: the token is checked first, so 401
    // rather than 415 (with the right token the request is served: a form
    // cannot send an Authorization header)
    for (token, want) in [(None, 401), (Some("wrong-token"), 401)] {
        let mut req = abrq
            .http
            .post(format!("{}{PATH}", abrq.base()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(good.clone());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("request");
        assert_eq!(resp.status().as_u16(), want, "a form with token {token:?}");
    }
    assert_staged(&abrq, 0, 0.0, "unauthorized requests").await;

    // --- a good request with an Idempotency-Key, then its retry ---
    let key = [("idempotency-key", "k1")];
    let (code, ack) = post(&abrq, &good, Some(TOKEN), &key).await;
    assert_eq!(code, 200, "{ack}");
    // 3 records at max_records = 2: two batches, staged together.
    assert_eq!(ack["records"], 3, "{ack}");
    assert_eq!(ack["batches"], 2, "{ack}");
    assert_eq!(
        (ack["first_seq"].as_u64(), ack["last_seq"].as_u64()),
        (Some(1), Some(2)),
        "{ack}"
    );
    assert_eq!(ack["duplicate"], false, "{ack}");
    assert_staged(&abrq, 2, 3.0, "the first k1 request").await;
    let (code, ack) = post(&abrq, &good, Some(TOKEN), &key).await;
    assert_eq!(code, 200, "{ack}");
    assert_eq!(ack["duplicate"], true, "{ack}");
    // nothing staged now, and the seqs the first request got
    assert_eq!(
        (ack["records"].as_u64(), ack["batches"].as_u64()),
        (Some(0), Some(0)),
        "{ack}"
    );
    assert_eq!(
        (ack["first_seq"].as_u64(), ack["last_seq"].as_u64()),
        (Some(1), Some(2)),
        "{ack}"
    );
    assert_staged(&abrq, 2, 3.0, "the k1 retry").await;

    // A refused request does not burn its key: the corrected retry stages.
    let key = [("idempotency-key", "k2")];
    let (code, _) = post(&abrq, "{\"user\":\"dee\"}\n{oops\n", Some(TOKEN), &key).await;
    assert_eq!(code, 400);
    assert_staged(&abrq, 2, 3.0, "a malformed k2 request").await;

    // --- a JSON array body (and k2's first good attempt) ---
    let array = json!([{"user": "dee", "n": 1.5}, {"user": "eve", "tags": ["x"]}]).to_string();
    let (code, ack) = post(&abrq, &array, Some(TOKEN), &key).await;
    assert_eq!(code, 200, "{ack}");
    assert_eq!(
        (ack["records"].as_u64(), ack["last_seq"].as_u64()),
        (Some(2), Some(3)),
        "{ack}"
    );
    assert_eq!(ack["duplicate"], false, "{ack}");
    assert_staged(&abrq, 3, 5.0, "the array request").await;

    // What arrives is exactly what was acknowledged, once.
    abrq.wait_status(STREAM, "out delivered seq 3", |st| {
        dest_of(st, "out")["high_water_mark"] == 3
    })
    .await;
    let out = read_dest(&abrq.path("out"));
    assert_eq!(out.objects.len(), 3);
    let mut got: Vec<Value> = out.records().map(|r| Value::Object(r.clone())).collect();
    got.sort_by_key(|v| v["user"].as_str().unwrap().to_string());
    assert_eq!(
        got,
        vec![
            json!({"user": "ada"}),
            json!({"user": "bob"}),
            json!({"user": "cy"}),
            json!({"user": "dee", "n": 1.5}),
            json!({"user": "eve", "tags": ["x"]}),
        ]
    );
}
