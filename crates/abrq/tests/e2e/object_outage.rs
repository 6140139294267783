//! An object store cut off mid-run, through the real binary: S3 (moto)
//! sits behind a loopback proxy the test controls, beside a local
//! destination of the same stream.
//!
//! While the link is cut, S3's attempts fail and back off, its breaker
//! opens (the trip is counted) and local keeps delivering the new records.
//! Once the link is back, the breaker's trial succeeds, the backlog drains
//! and the bucket holds every batch exactly once, under the same names as
//! the local copy.

use std::time::{Duration, Instant};

use crate::common::*;
use object_store::ObjectStoreExt;
use serde_json::json;

const STREAM: &str = "orders";
const PER_PHASE: u64 = 5_000;
const BATCH: u64 = 250;

fn append_orders(path: &std::path::Path, ids: std::ops::RangeInclusive<u64>) {
    append_ndjson(
        path,
        ids.map(
            |id| json!({"order_id": id, "customer": format!("c{}", id % 97), "amount": id % 1000}),
        ),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_outage_backs_off_opens_the_breaker_and_drains_once_restored() {
    let s3 = abrq_testkit::S3::from_env();
    let bucket = abrq_testkit::names::bucket("outage");
    s3.create_bucket(&bucket).await.expect("s3 bucket");
    let upstream = s3
        .endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let proxy = abrq_testkit::Proxy::start(upstream).await;

    let mut abrq = Abrq::new();
    let input = abrq.path("in/orders.ndjson");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    append_orders(&input, 1..=PER_PHASE);
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[spool]
gc_interval = "200ms"
[[streams]]
name = "{STREAM}"
[streams.source]
engine = "file"
path = "{input}"
follow = true
[streams.batch]
max_records = {BATCH}
max_wait = "50ms"

[[streams.destinations]]
name = "s3"
engine = "s3"
host = "http://127.0.0.1:{port}"
region = "{region}"
database = "{bucket}"
username = "{user}"
password = "{pass}"
prefix = "orders"
[streams.destinations.retry]
max_attempts = 100000
initial_backoff = "50ms"
max_backoff = "400ms"
[streams.destinations.breaker]
failure_threshold = 4
cooldown = "1s"

[[streams.destinations]]
name = "local"
engine = "local"
database = "{local}"
prefix = "orders"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        input = input.display(),
        port = proxy.port(),
        region = s3.region,
        user = s3.access_key_id,
        pass = s3.secret_access_key.expose(),
        local = abrq.p("out/local"),
    ));
    abrq.start().await;

    let phase1 = PER_PHASE / BATCH;
    abrq.wait_status(STREAM, "both destinations through phase one", |st| {
        u(&st["spool"]["last_seq"]) == phase1
            && ["s3", "local"]
                .iter()
                .all(|d| u(&dest_of(st, d)["high_water_mark"]) == phase1)
    })
    .await;

    // The outage: open connections dropped, the port refusing new ones.
    proxy.cut();
    let cut_at = Instant::now();
    append_orders(&input, PER_PHASE + 1..=2 * PER_PHASE);
    let last = 2 * phase1;
    abrq.wait_circuit_opened("s3").await;
    let st = abrq
        .wait_status(STREAM, "local through phase two while s3 is down", |st| {
            u(&dest_of(st, "local")["high_water_mark"]) == last
        })
        .await;
    let down = dest_of(&st, "s3");
    assert_eq!(
        u(&down["high_water_mark"]),
        phase1,
        "s3 delivered while cut"
    );
    assert_eq!(u(&down["backlog"]), last - phase1, "{down}");
    assert_eq!(u(&down["pending_dead_letters"]), 0, "{down}");
    assert!(
        down["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{down}"
    );
    // Keep it down a while: the breaker, not a hot loop, decides when to
    // try. With threshold 4 and a 1 s cooldown, a few seconds of outage
    // allow the 4 failures that opened it plus about one trial a second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let failures = abrq
        .metric(
            "abrq_stream_fanout_attempts_total",
            &[("destination", "s3"), ("outcome", "failure")],
        )
        .await;
    let outage = cut_at.elapsed().as_secs_f64();
    println!("{failures} failed attempts in {outage:.1}s of outage");
    assert!(failures >= 4.0, "{failures} failed attempts");
    assert!(
        failures <= 4.0 + 2.0 * outage.ceil() + 2.0,
        "{failures} failed attempts in {outage:.1}s: the breaker did not hold back"
    );
    let st = abrq.status(STREAM).await;
    assert_eq!(u(&dest_of(&st, "s3")["high_water_mark"]), phase1);

    proxy.restore();
    let st = abrq
        .wait_status(STREAM, "s3 to drain its backlog after the restore", |st| {
            u(&dest_of(st, "s3")["high_water_mark"]) == last
        })
        .await;
    let up = dest_of(&st, "s3");
    assert_eq!(up["breaker"]["state"], "closed", "{up}");
    assert_eq!(up["last_error"], serde_json::Value::Null, "{up}");
    assert_eq!(u(&up["pending_dead_letters"]), 0, "{up}");
    let m = abrq.metrics().await;
    assert_eq!(
        m.get(
            "abrq_stream_fanout_delivered_records_total",
            &[("stream", STREAM), ("destination", "s3")],
        ) as u64,
        2 * PER_PHASE
    );

    // Every batch exactly once by name, the same names as the local copy.
    let store = sinks::s3_store(&s3, &bucket);
    let listed = sinks::list_store(&store).await;
    let in_s3 = sinks::s3(&s3, &bucket).await;
    assert_eq!(listed.len(), in_s3.objects.len(), "a name listed twice");
    assert_eq!(
        listed.len() as u64,
        last,
        "one object per batch: {listed:?}"
    );
    let local = read_dest(&abrq.path("out/local"));
    assert!(in_s3.objects.keys().eq(local.objects.keys()));
    // And the content: every order once.
    let ids = by_id(&in_s3, "order_id");
    assert!(ids.keys().copied().eq(1..=2 * PER_PHASE));

    abrq.kill();
    for key in &listed {
        let _ = store.delete(&key.as_str().into()).await;
    }
    let _ = s3.delete_bucket(&bucket).await;
}
