//! The slot is not confirmed before staging, through the binary: a `postgres`
//! cdc stream reads changes it cannot stage (its only destination is
//! paused and the spool is at `spool.max_bytes`), so they sit read and
//! unstaged. Meanwhile the slot's confirmed position on the server stays
//! before them, and status keeps showing the WAL the slot holds. abrq is
//! SIGKILLed right there; after a restart and a resume every change
//! arrives.

use std::collections::BTreeSet;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

const ROWS: i64 = 3_000;

async fn confirmed_flush(pool: &PgPool, slot: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .fetch_one(pool)
    .await
    .expect("the slot")
}

async fn lsn_now(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8")
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_read_and_not_staged_are_read_again_after_a_kill() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("cdc_uns_{tag}"), format!("abrq_uns_{tag}"));
    let table = format!("\"{schema}\".items");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, note text)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }

    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[spool]
max_bytes = "32KiB"

[[streams]]
name = "s"
[streams.source]
engine = "postgres"
mode = "cdc"
{src_conn}
table = "{schema}.items"
slot = "{slot}"
publication = "{slot}"
snapshot = "never"
[streams.batch]
max_records = 200
max_wait = "20ms"

[[streams.destinations]]
name = "history"
engine = "local"
database = "{history}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        src_conn = pg::connection_toml(&pg::cdc_url()),
        history = abrq.p("out/history"),
    ));
    abrq.start().await;
    abrq.wait_status("s", "the slot made and read", |st| {
        !st["source"]["position"]["read_lsn"].is_null()
    })
    .await;
    abrq.post("/v1/streams/s/destinations/history/pause").await;
    let before = confirmed_flush(&src, &slot).await;
    // 30 transactions: the first ones staged whole, the later ones not
    let mut committed = 0;
    for start in (1..=ROWS).step_by(100) {
        let mut tx = src.begin().await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {table} SELECT g, repeat('x', 100) || g FROM generate_series({start}, {start} + 99) AS g"
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        // the last transaction's commit ends after this
        committed = lsn_now(&mut tx).await;
        tx.commit().await.unwrap();
    }
    // the spool fills, and the source holds what it read next
    let st = abrq
        .wait_status("s", "the source held by backpressure", |st| {
            st["source"]["state"] == "paused"
        })
        .await;
    abrq.note(&format!("held: {}", st["source"]));
    let staged_rows = u(&st["spool"]["records"]);
    assert!(
        staged_rows < ROWS as u64,
        "everything staged despite the limit: {st}"
    );
    // the status figures keep coming while the source waits
    abrq.wait_status("s", "the slot's WAL shown", |st| {
        st["source"]["lag_bytes"].as_i64().is_some_and(|b| b > 0)
    })
    .await;
    let confirmed = confirmed_flush(&src, &slot).await;
    assert!(
        confirmed < committed,
        "the slot was confirmed to {confirmed} past changes not staged (the last commit is after {committed}, before {before})"
    );
    abrq.kill();
    assert_eq!(confirmed_flush(&src, &slot).await, confirmed);

    abrq.start().await;
    abrq.post("/v1/streams/s/destinations/history/resume").await;
    abrq.wait_status("s", "every change staged", |st| {
        u(&st["spool"]["last_seq"]) > 0
            && st["source"]["position"]["read_lsn"].is_string()
            && st["source"]["state"] == "running"
    })
    .await;
    let mut ids = BTreeSet::new();
    wait_until(LONG, "every row at the destination", async || {
        let out = read_dest(&abrq.path("out/history"));
        ids = out.records().filter_map(|r| r["id"].as_i64()).collect();
        ids.len() == ROWS as usize
    })
    .await;
    assert_eq!(ids, (1..=ROWS).collect(), "every row, none lost");
    wait_until(LONG, "the slot confirmed past the changes", async || {
        confirmed_flush(&src, &slot).await > committed
    })
    .await;
    abrq.kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
