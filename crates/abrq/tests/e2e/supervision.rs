//! No error path ends a task silently, through the real binary:
//!
//! - a dead letter discarded while its replay hangs on a slow destination
//!   does not stop the drain loop: later records are still delivered;
//! - a state store that cannot be written (another process holds its write
//!   lock) makes the source and the mark writer fail visibly: `/readyz`
//!   answers 503 naming them, status shows `failing` with the error, the
//!   restarts are counted; once the lock is gone they recover by
//!   themselves and every record arrives exactly once.

use std::time::Duration;

use crate::common::*;
use serde_json::json;

const STREAM: &str = "orders";

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_discarded_during_its_replay_does_not_stop_the_loop() {
    let s3 = abrq_testkit::S3::from_env();
    let bucket = abrq_testkit::names::bucket("replay-race");
    s3.create_bucket(&bucket).await.expect("s3 bucket");
    let upstream = s3
        .endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let proxy = abrq_testkit::Proxy::start(upstream).await;

    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "http"

[[streams.destinations]]
name = "s3"
engine = "s3"
host = "http://127.0.0.1:{port}"
region = "{region}"
database = "{bucket}"
username = "{user}"
password = "{pass}"
format = "jsonl"
[streams.destinations.retry]
max_attempts = 2
initial_backoff = "10ms"
max_backoff = "20ms"
attempt_timeout = "3s"
[streams.destinations.breaker]
failure_threshold = 1000
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        port = proxy.port(),
        region = s3.region,
        user = s3.access_key_id,
        pass = s3.secret_access_key.expose(),
    ));
    abrq.start().await;

    // A dead letter: the first batch exhausts its attempts while s3 is cut.
    proxy.cut();
    abrq.ingest(STREAM, "{\"n\":1}\n").await;
    let dl = "/v1/streams/orders/destinations/s3/dead-letters";
    abrq.wait_for("the batch to be dead-lettered", async || {
        abrq.dead_letters(STREAM, "s3").await.len() == 1
    })
    .await;
    let id = abrq.dead_letters(STREAM, "s3").await[0]["id"]
        .as_i64()
        .unwrap();

    // The replay hangs on a stalled s3; the operator discards meanwhile.
    proxy.restore();
    proxy.stall();
    let failed_before = abrq
        .metric(
            "abrq_stream_fanout_attempts_total",
            &[("destination", "s3"), ("outcome", "failure")],
        )
        .await;
    abrq.post(&format!("{dl}/{id}/replay")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    abrq.post(&format!("{dl}/{id}/discard")).await;
    // The hung attempt times out and its replay ends on a discarded letter.
    abrq.wait_for("the replay attempt to time out", async || {
        abrq.metric(
            "abrq_stream_fanout_attempts_total",
            &[("destination", "s3"), ("outcome", "failure")],
        )
        .await
            > failed_before
    })
    .await;

    proxy.unstall();
    let ack = abrq.ingest(STREAM, "{\"n\":2}\n").await;
    let seq = u(&ack["last_seq"]);
    wait_until(
        Duration::from_secs(30),
        "a later batch to reach s3",
        async || {
            abrq.assert_alive();
            u(&abrq.dest(STREAM, "s3").await["high_water_mark"]) >= seq
        },
    )
    .await;
    let d = abrq.dest(STREAM, "s3").await;
    assert_eq!(d["state"], "draining", "{d}");
    assert_eq!(u(&d["restarts"]), 0, "handled without a restart: {d}");
    let rows = abrq.dead_letters(STREAM, "s3").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["state"], "discarded", "the discard stands");
    let (code, body) = abrq.call(reqwest::Method::GET, "/readyz", None, &[]).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_state_store_fails_tasks_visibly_and_they_recover() {
    let mut abrq = Abrq::new();
    let input = abrq.path("in/orders.ndjson");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    let orders = |ids: std::ops::RangeInclusive<u64>| ids.map(|id| json!({"order_id": id}));
    append_ndjson(&input, orders(1..=100));
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "file"
path = "{input}"
follow = true
[streams.batch]
max_records = 10
max_wait = "20ms"
[[streams.destinations]]
name = "local"
engine = "local"
database = "{out}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        input = input.display(),
        out = abrq.p("out"),
    ));
    abrq.start().await;
    abrq.wait_status(STREAM, "the first 100 records delivered", |st| {
        u(&dest_of(st, "local")["high_water_mark"]) == 10
    })
    .await;

    // Another process takes the state file's write lock and keeps it.
    let db = rusqlite::Connection::open(abrq.path("data/state.db")).expect("open state.db");
    db.execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    append_ndjson(&input, orders(101..=200));

    let base = abrq.base();
    let mut readyz = String::new();
    abrq.wait_for("/readyz to report the failing source", async || {
        let r = abrq
            .http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap();
        readyz = r.text().await.unwrap();
        readyz.contains("stream orders, source")
    })
    .await;
    assert!(readyz.contains("locked"), "{readyz}");
    let st = abrq.status(STREAM).await;
    assert_eq!(st["source"]["state"], "failing", "{st}");
    assert!(
        st["source"]["error"].as_str().unwrap().contains("locked"),
        "{st}"
    );
    assert!(st["source"]["failing_since"].is_string(), "{st}");
    let restarts = abrq
        .metric(
            "abrq_stream_loop_restarts_total",
            &[("stream", STREAM), ("loop", "source")],
        )
        .await;
    assert!(restarts >= 1.0, "restarts counted: {restarts}");
    let (code, _) = abrq.call(reqwest::Method::GET, "/readyz", None, &[]).await;
    assert_eq!(code, 503);

    // The other process lets go: everything recovers by itself.
    db.execute_batch("ROLLBACK").expect("release the lock");
    drop(db);
    let st = abrq
        .wait_status(STREAM, "all 200 records delivered", |st| {
            u(&dest_of(st, "local")["high_water_mark"]) == 20 && st["source"]["state"] == "running"
        })
        .await;
    assert!(st["source"]["error"].is_null(), "{st}");
    abrq.wait_for("/readyz to answer 200 again", async || {
        abrq.call(reqwest::Method::GET, "/readyz", None, &[])
            .await
            .0
            == 200
    })
    .await;
    let out = read_dest(&abrq.path("out"));
    let ids: Vec<u64> = out
        .records()
        .map(|r| r["order_id"].as_u64().unwrap())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, (1..=200).collect::<Vec<_>>());
    assert_eq!(ids.len(), 200, "no record twice");
}
