//! One bad record or one bad payload never stops a stream, through the real
//! binary:
//!
//! - records nested as deep as the JSON parser takes are staged and
//!   delivered, from HTTP ingest and from a file (the spool adds no depth);
//!   deeper ones are refused at ingest with the line named;
//! - a spooled batch that cannot be decoded (corrupted on disk here) is
//!   dead-lettered with reason `encoding` for the destination that meets
//!   it, and the batches after it are delivered.

use crate::common::*;
use serde_json::Value;

/// `{"a":{"a":...{"a":1}...}}`, `depth` objects deep, with an id beside.
fn nested(id: u64, depth: usize) -> String {
    let inner = format!("{}1{}", "{\"a\":".repeat(depth - 1), "}".repeat(depth - 1));
    format!("{{\"id\":{id},\"a\":{inner}}}")
}

fn depth_of(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth_of).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deep_records_are_delivered_or_refused_at_ingest() {
    let mut abrq = Abrq::new();
    let input = abrq.path("in/deep.ndjson");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    std::fs::write(
        &input,
        format!("{}\n{}\n{}\n", nested(1, 2), nested(2, 126), nested(3, 3)),
    )
    .unwrap();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"

[[streams]]
name = "api"
[streams.source]
engine = "http"
[[streams.destinations]]
name = "out"
engine = "local"
database = "{api_out}"
format = "jsonl"

[[streams]]
name = "file"
[streams.source]
engine = "file"
path = "{input}"
[[streams.destinations]]
name = "out"
engine = "local"
database = "{file_out}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        api_out = abrq.p("out/api"),
        file_out = abrq.p("out/file"),
        input = input.display(),
    ));
    abrq.start().await;

    let ack = abrq
        .ingest("api", &format!("{}\n{}\n", nested(1, 1), nested(2, 126)))
        .await;
    assert_eq!(u(&ack["records"]), 2);
    let (code, body) = abrq
        .call(
            reqwest::Method::POST,
            "/v1/streams/api/records",
            Some(format!("{}\n{}\n", nested(3, 1), nested(4, 300)).into_bytes()),
            &[],
        )
        .await;
    assert_eq!(code, 400, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(
        msg.contains("line 2") && msg.contains("recursion limit"),
        "{msg}"
    );
    let last = u(&abrq.ingest("api", &nested(5, 1)).await["last_seq"]);

    for (stream, ids, seq) in [("api", vec![1, 2, 5], last), ("file", vec![1, 2, 3], 1)] {
        abrq.wait_status(stream, "every staged record delivered", |st| {
            u(&dest_of(st, "out")["high_water_mark"]) == seq
        })
        .await;
        let out = read_dest(&abrq.path(&format!("out/{stream}")));
        let mut got: Vec<(u64, usize)> = out
            .records()
            .map(|r| (r["id"].as_u64().unwrap(), depth_of(&r["a"])))
            .collect();
        got.sort_unstable();
        let deep = got
            .iter()
            .find(|(id, _)| *id == 2)
            .expect("the deep record");
        assert_eq!(deep.1, 125, "{stream}: delivered whole");
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), ids, "{stream}");
        assert!(abrq.dead_letters(stream, "out").await.is_empty());
    }
    let (code, body) = abrq.call(reqwest::Method::GET, "/readyz", None, &[]).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_batch_is_dead_lettered_and_the_rest_delivered() {
    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "s"
[streams.source]
engine = "http"
[[streams.destinations]]
name = "a"
engine = "local"
database = "{a}"
format = "jsonl"
[[streams.destinations]]
name = "b"
engine = "local"
database = "{b}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        a = abrq.p("out/a"),
        b = abrq.p("out/b"),
    ));
    abrq.start().await;
    abrq.act("s", "b", "pause").await;
    for i in 1..=3 {
        abrq.ingest("s", &format!("{{\"i\":{i}}}\n")).await;
    }
    abrq.wait_status("s", "a through all three batches", |st| {
        u(&dest_of(st, "a")["high_water_mark"]) == 3
    })
    .await;
    abrq.kill();

    // Batch 2 rots on disk while abrq is down (b still needs it).
    abrq.rot_spooled(2, b"I{\"i\":2}\nI{\"i\":");

    abrq.start().await;
    abrq.act("s", "b", "resume").await;
    let st = abrq
        .wait_status("s", "b past all three batches", |st| {
            u(&dest_of(st, "b")["high_water_mark"]) == 3
        })
        .await;
    let b = dest_of(&st, "b");
    assert_eq!(b["state"], "draining", "{b}");
    assert_eq!(u(&b["pending_dead_letters"]), 1, "{b}");
    let rows = abrq.dead_letters("s", "b").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["seq"], 2);
    assert_eq!(rows[0]["reason_class"], "encoding");
    let error = rows[0]["error"].as_str().unwrap();
    assert!(
        error.contains("seq 2") && error.contains("line 2"),
        "{error}"
    );
    let got: Vec<u64> = read_dest(&abrq.path("out/b"))
        .records()
        .map(|r| r["i"].as_u64().unwrap())
        .collect();
    assert_eq!(got.len(), 2);
    assert!(got.contains(&1) && got.contains(&3), "{got:?}");
    assert_eq!(
        abrq.metric(
            "abrq_stream_fanout_dead_lettered_batches_total",
            &[("destination", "b"), ("reason_class", "encoding")],
        )
        .await,
        1.0
    );
    // Showing it explains why its records cannot be listed.
    let id = rows[0]["id"].as_i64().unwrap();
    let (code, body) = abrq
        .call(
            reqwest::Method::GET,
            &format!("/v1/streams/s/destinations/b/dead-letters/{id}"),
            None,
            &[],
        )
        .await;
    assert_eq!(code, 422, "{body}");
    let (code, body) = abrq.call(reqwest::Method::GET, "/readyz", None, &[]).await;
    assert_eq!(code, 200, "{body}");
    // An operator can still discard it.
    abrq.post(&format!(
        "/v1/streams/s/destinations/b/dead-letters/{id}/discard"
    ))
    .await;
}
