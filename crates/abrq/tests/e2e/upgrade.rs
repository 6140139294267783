//! Upgrades keep the spool: a state store written by abrq 0.1 (schema 1,
//! spool format 1; see tests/fixtures/state-v1/README.md) is opened by
//! today's binary, migrated at start, and what it held is delivered: a
//! paused destination's backlog, and dead letters replayed once their
//! destination is fixed. A file from a newer abrq is refused with a clear
//! message.

use std::path::Path;

use crate::common::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/state-v1/state.db"
);

fn config(abrq: &Abrq) -> String {
    let out = abrq.path("out");
    // The fixture's request keys were staged when it was made; the default
    // window (24h) would expire them and the duplicate check below with them.
    Config::new(abrq)
        .idempotency_window("100years")
        .stream(
            Stream::new("orders", Source::http())
                .destination(Destination::local("done", out.join("done")).format("jsonl"))
                .destination(Destination::local("lake", out.join("lake")).format("jsonl"))
                .destination(Destination::local("broken", out.join("broken")).format("jsonl")),
        )
        .to_string()
}

fn install_fixture(abrq: &Abrq) {
    std::fs::create_dir_all(abrq.path("data")).unwrap();
    std::fs::copy(FIXTURE, abrq.path("data/state.db")).expect("copy the fixture");
}

fn order_ids(root: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = read_dest(root)
        .records()
        .map(|r| r["order_id"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_one_store_is_migrated_and_what_it_held_is_delivered() {
    let mut abrq = Abrq::new();
    install_fixture(&abrq);
    abrq.write_config(&config(&abrq));
    abrq.start().await;

    let st = abrq.status("orders").await;
    assert_eq!(u(&st["spool"]["last_seq"]), 3, "{st}");
    assert_eq!(u(&dest_of(&st, "lake")["backlog"]), 3, "{st}");
    assert_eq!(dest_of(&st, "lake")["paused"], true, "operator state kept");
    assert_eq!(u(&dest_of(&st, "broken")["pending_dead_letters"]), 3);

    // The paused destination's backlog, spooled in format 1.
    abrq.act("orders", "lake", "resume").await;
    abrq.wait_status("orders", "lake through the backlog", |st| {
        u(&dest_of(st, "lake")["high_water_mark"]) == 3
    })
    .await;
    let expected: Vec<u64> = [11, 12, 13, 14, 15, 21, 22, 23, 24, 25, 31, 32, 33, 34, 35].into();
    assert_eq!(order_ids(&abrq.path("out/lake")), expected);
    let lake = read_dest(&abrq.path("out/lake"));
    let first = lake
        .records()
        .find(|r| r["order_id"] == 11)
        .expect("order 11");
    assert_eq!(first["note"], "line\nbreak");
    assert_eq!(first["tags"][1]["n"], 1);

    // The dead letters, each its own copy in format 1, replayed.
    abrq.post("/v1/streams/orders/destinations/broken/dead-letters/replay-all")
        .await;
    abrq.wait_for("the three dead letters replayed", async || {
        let rows = abrq.dead_letters("orders", "broken").await;
        rows.len() == 3 && rows.iter().all(|r| r["state"] == "replayed")
    })
    .await;
    assert_eq!(order_ids(&abrq.path("out/broken")), expected);
    assert!(
        order_ids(&abrq.path("out/done")).is_empty(),
        "nothing sent twice"
    );

    // A request key staged by 0.1 still answers as a duplicate.
    let (code, body) = abrq
        .call(
            reqwest::Method::POST,
            "/v1/streams/orders/records",
            Some(b"{\"order_id\":99}\n".to_vec()),
            &[
                ("idempotency-key", "req-2"),
                ("content-type", "application/x-ndjson"),
            ],
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["duplicate"], true, "{body}");
    assert_eq!(body["first_seq"], 2, "{body}");

    // New batches are written in today's format beside the old ones.
    let ack = abrq.ingest("orders", "{\"order_id\":41}\n").await;
    assert_eq!(u(&ack["last_seq"]), 4);
    abrq.wait_status("orders", "everyone through seq 4", |st| {
        ["done", "lake", "broken"]
            .iter()
            .all(|d| u(&dest_of(st, d)["high_water_mark"]) == 4)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_from_a_newer_abrq_is_refused() {
    let abrq = Abrq::new();
    install_fixture(&abrq);
    let db = rusqlite::Connection::open(abrq.path("data/state.db")).unwrap();
    db.pragma_update(None, "user_version", 99).unwrap();
    drop(db);
    abrq.write_config(&config(&abrq));
    let cfg = abrq.config_path().display().to_string();
    let (status, _, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
    assert!(!status.success());
    assert!(stderr.contains("newer than this abrq supports"), "{stderr}");
}
