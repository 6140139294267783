//! `heartbeat_interval` on a PostgreSQL cdc source, through the binary:
//! while the captured table is idle, abrq writes a logical message into
//! the source database at that interval (a `test_decoding` slot beside
//! abrq's sees them, with abrq's prefix), and its own slot confirms past
//! them, so the slot has a position to move to however long the tables
//! stay quiet. The messages stage nothing: the destination gets exactly
//! the one row written.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

/// The heartbeats the probe slot has seen: their LSNs, as numbers.
async fn heartbeats(pool: &PgPool, probe: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT (lsn - '0/0'::pg_lsn)::int8 FROM pg_logical_slot_peek_changes($1, NULL, NULL) \
         WHERE data LIKE 'message: transactional: 0 prefix: abrq.heartbeat%'",
    )
    .bind(probe)
    .fetch_all(pool)
    .await
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_stream_writes_heartbeats_and_confirms_past_them() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot, probe) = (
        format!("hb_{tag}"),
        format!("abrq_hb_{tag}"),
        format!("hb_probe_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY)"),
        format!("SELECT 1 FROM pg_create_logical_replication_slot('{probe}', 'test_decoding')"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot)
        .heartbeat_interval("1s");
    let text = Config::new(&abrq)
        .stream(
            Stream::new("hb", source)
                .max_wait("20ms")
                .destination(Destination::local("out", abrq.p("out")).format("jsonl")),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    sqlx::query(&format!("INSERT INTO {table} VALUES (1)"))
        .execute(&src)
        .await
        .unwrap();
    wait_until(LONG, "three heartbeats", async || {
        heartbeats(&src, &probe).await.len() >= 3
    })
    .await;
    let seen = heartbeats(&src, &probe).await;
    let second = seen[1];
    wait_until(LONG, "abrq's slot confirmed past a heartbeat", async || {
        let confirmed: Option<i64> = sqlx::query_scalar(
            "SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::int8 FROM pg_replication_slots \
             WHERE slot_name = $1",
        )
        .bind(&slot)
        .fetch_one(&src)
        .await
        .unwrap_or(None);
        confirmed.is_some_and(|c| c > second)
    })
    .await;
    // about one a second, not one per wait
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = heartbeats(&src, &probe).await;
    let span = later.len() - seen.len();
    assert!((1..=6).contains(&span), "{span} heartbeats in about 3 s");
    abrq.wait_drained("hb", Duration::ZERO, LONG).await;
    let out = read_dest(&abrq.path("out"));
    assert_eq!(out.record_count(), 1, "heartbeats stage nothing");
    abrq.kill();
    sqlx::query(&format!("SELECT pg_drop_replication_slot('{probe}')"))
        .execute(&src)
        .await
        .unwrap();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
