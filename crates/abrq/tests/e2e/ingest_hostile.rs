//! HTTP ingest against clients that misbehave, through the real binary:
//! memory stays bounded by the body (one request and several at once),
//! requests beyond `server.max_ingest_requests` are turned away with
//! Retry-After, Idempotency-Keys are checked (bytes, length, a reused key
//! with another body) and expire, and a client without the token learns
//! nothing about which streams exist.

use std::time::Duration;

use crate::common::*;

const MAX_BODY: u64 = 2 << 20;

fn config(abrq: &Abrq) -> Config {
    Config::new(abrq).stream(
        Stream::new("s", Source::http().max_body(MAX_BODY as i64))
            .destination(Destination::local("out", abrq.p("out")).format("jsonl")),
    )
}

/// `{}` lines up to the body limit: the most records per byte.
fn empty_records_body() -> Vec<u8> {
    b"{}\n".repeat((MAX_BODY / 3) as usize)
}

/// (VmRSS, VmHWM) of a process, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

async fn post(
    abrq: &Abrq,
    body: Vec<u8>,
    headers: &[(&str, &[u8])],
) -> (u16, String, Option<String>) {
    let mut req = abrq
        .http
        .post(format!("{}/v1/streams/s/records", abrq.base()))
        .header("content-type", "application/x-ndjson")
        .timeout(Duration::from_secs(300))
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, reqwest::header::HeaderValue::from_bytes(v).unwrap());
    }
    let resp = req.send().await.expect("ingest request");
    let code = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (code, resp.text().await.unwrap(), retry)
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_stays_within_a_few_bodies_and_extra_requests_wait() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq).max_ingest_requests(2).to_string());
    abrq.start().await;
    let pid = abrq.pid().unwrap();
    // Nothing delivered meanwhile: the measure is ingest's alone.
    abrq.act("s", "out", "pause").await;

    let (before, _) = memory(pid);
    let (code, body, _) = post(&abrq, empty_records_body(), &[]).await;
    assert_eq!(code, 200, "{body}");
    let (_, peak) = memory(pid);
    let grew = peak.saturating_sub(before);
    println!("one {MAX_BODY}-byte body: peak grew by {grew} bytes");
    assert!(grew < 4 * MAX_BODY, "one request took {grew} bytes");

    // Six at once with room for two: the others are told to retry, and
    // memory stays within the two admitted.
    let (before, _) = memory(pid);
    let posts = (0..6).map(|_| post(&abrq, empty_records_body(), &[]));
    let answers = futures::future::join_all(posts).await;
    let (_, peak) = memory(pid);
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    let busy: Vec<_> = answers.iter().filter(|a| a.0 == 503).collect();
    assert_eq!(ok + busy.len(), 6, "{answers:?}");
    assert!(ok >= 1 && !busy.is_empty(), "{answers:?}");
    for b in &busy {
        assert_eq!(b.2.as_deref(), Some("1"), "Retry-After: {b:?}");
        assert!(b.1.contains("max_ingest_requests"), "{}", b.1);
    }
    let grew = peak.saturating_sub(before);
    println!("six bodies, two at a time: peak grew by {grew} bytes");
    assert!(grew < 2 * 4 * MAX_BODY, "{ok} requests took {grew} bytes");
    let records = (MAX_BODY / 3) * (ok as u64 + 1);
    let st = abrq.status("s").await;
    assert_eq!(u(&st["spool"]["records"]), records, "{st}");
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotency_keys_are_checked_and_expire() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq).idempotency_window("2s").to_string());
    abrq.start().await;
    let one = b"{\"a\":1}\n".to_vec();
    let two = b"{\"a\":2}\n".to_vec();

    // Not visible ASCII, or too long: refused, nothing staged.
    for bad in [&b"caf\xc3\xa9"[..], b"\xff\xfe", &[b'k'; 1025][..]] {
        let (code, body, _) = post(&abrq, one.clone(), &[("idempotency-key", bad)]).await;
        assert_eq!(code, 400, "{bad:?}: {body}");
        assert!(body.contains("Idempotency-Key"), "{body}");
    }
    assert_eq!(u(&abrq.status("s").await["spool"]["last_seq"]), 0);

    let long = [b'k'; 1024];
    let (code, body, _) = post(&abrq, one.clone(), &[("idempotency-key", &long)]).await;
    assert_eq!(code, 200, "1024 bytes is fine: {body}");

    let (code, body, _) = post(&abrq, one.clone(), &[("idempotency-key", b"req-1")]).await;
    assert_eq!(code, 200, "{body}");
    let first: serde_json::Value = serde_json::from_str(&body).unwrap();
    let (code, body, _) = post(&abrq, one.clone(), &[("idempotency-key", b"req-1")]).await;
    assert_eq!(code, 200, "{body}");
    let again: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["first_seq"], first["first_seq"]);
    // The same key with another body is a client bug: 409, nothing staged.
    let (code, body, _) = post(&abrq, two.clone(), &[("idempotency-key", b"req-1")]).await;
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("different body"), "{body}");
    assert_eq!(u(&abrq.status("s").await["spool"]["last_seq"]), 2);

    // After the window the key is forgotten: the same request stages again.
    let mut staged_again = false;
    wait_until(Duration::from_secs(30), "the key to expire", async || {
        let (code, body, _) = post(&abrq, one.clone(), &[("idempotency-key", b"req-1")]).await;
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        staged_again = v["duplicate"] == false;
        staged_again
    })
    .await;
    assert!(staged_again);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_token_unknown_streams_are_not_revealed() {
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq).admin_token("t0ken").to_string());
    abrq.admin_token = Some("t0ken".into());
    abrq.start().await;
    for stream in ["s", "nope"] {
        let resp = abrq
            .http
            .post(format!("{}/v1/streams/{stream}/records", abrq.base()))
            .header("content-type", "application/x-ndjson")
            .body("{}\n")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{stream}: the same answer");
    }
    let (code, body) = abrq
        .call(
            reqwest::Method::POST,
            "/v1/streams/nope/records",
            Some(b"{}\n".to_vec()),
            &[("content-type", "application/x-ndjson")],
        )
        .await;
    assert_eq!(code, 404, "with the token: {body}");
}
