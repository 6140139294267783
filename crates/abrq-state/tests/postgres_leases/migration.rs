//! A database of schema version 1 gains leases, nodes and the clock.

use abrq_state::lease::drain_resource;
use abrq_state::prelude::*;
use sqlx::Executor as _;

use crate::{claimed, node, setup, Database, LONG};

#[tokio::test]
async fn a_version_1_database_migrates_to_version_2() {
    let db = Database::create().await;
    let store = db.open().await;
    setup(&store).await;
    drop(store);
    // Back to what version 1 had: no leases, no nodes, no clock.
    let mut conn = db.admin().await;
    conn.execute(
        "DROP TABLE abrq.leases, abrq.nodes;
         DROP FUNCTION abrq.clock_ms();
         UPDATE abrq.schema_version SET version = 1",
    )
    .await
    .expect("downgrade to version 1");

    let store = db.open().await;
    let version: i64 = sqlx::query_scalar("SELECT version FROM abrq.schema_version")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    assert_eq!(version, 2);
    // The data of version 1 is still there, and leases work.
    assert_eq!(store.spool_stats("s").await.unwrap().last_seq, 3);
    assert_eq!(store.cursor("s").await.unwrap().as_deref(), Some("c3"));
    let a = node("a");
    let fence = claimed(&store, &drain_resource("s", "d"), &a, LONG).await;
    assert_eq!(fence.epoch, 1);
    store
        .fenced(fence)
        .advance("s", "d", 3)
        .await
        .expect("advance");
    assert_eq!(
        store.destination("s", "d").await.unwrap().high_water_mark,
        3
    );
    store.heartbeat(&a, "h", 1, LONG).await.expect("heartbeat");
    assert_eq!(store.nodes().await.unwrap().len(), 1);
    // Opening again changes nothing.
    db.open().await;
    let version: i64 = sqlx::query_scalar("SELECT version FROM abrq.schema_version")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    assert_eq!(version, 2);
}
