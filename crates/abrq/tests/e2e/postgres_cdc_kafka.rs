//! A PostgreSQL cdc stream into Kafka with no `partition_key`, through the
//! binary, against the real broker: each message is keyed by its row's
//! primary key as a JSON object, so every change of a row lands in one
//! partition of a four-partition topic, in commit order (a consumer reads
//! it back with its own client).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use serde_json::Value;

/// One row's messages: the partitions they are in, and the versions they
/// carry in offset order (a delete carries none).
#[derive(Default)]
struct Row {
    partitions: Vec<i32>,
    versions: Vec<i64>,
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_are_keyed_by_primary_key_so_each_row_keeps_one_partition_in_order() {
    let brokers = std::env::var("ABRQ_TEST_KAFKA_BROKERS").unwrap_or("127.0.0.1:9092".into());
    let topic = sinks::create_topic(&brokers, "e2e-cdc-keys", 4).await;
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("cdckeys_{tag}"), format!("abrq_cdckeys_{tag}"));
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)"),
        format!("INSERT INTO {table} SELECT g, 1 FROM generate_series(1, 20) AS g"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot);
    let text = Config::new(&abrq)
        .stream(
            Stream::new("keys", source)
                .max_records(7)
                .max_wait("20ms")
                .destination(Destination::kafka("events").host(&brokers).database(&topic)),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("keys", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    // 60 transactions, each raising the version of three rows
    for round in 0..60 {
        let ids = [round % 20 + 1, (round * 7) % 20 + 1, (round * 13) % 20 + 1];
        sqlx::query(&format!("UPDATE {table} SET v = v + 1 WHERE id = ANY($1)"))
            .bind(&ids[..])
            .execute(&src)
            .await
            .unwrap();
    }
    sqlx::query(&format!("DELETE FROM {table} WHERE id = 5"))
        .execute(&src)
        .await
        .unwrap();
    let total: i64 = 20
        + sqlx::query_scalar::<_, i64>(&format!("SELECT sum(v - 1)::bigint FROM {table}"))
            .fetch_one(&src)
            .await
            .unwrap()
        + 1;
    let st = abrq.wait_drained("keys", Duration::ZERO, LONG).await;
    assert_eq!(
        u(&dest_of(&st, "events")["pending_dead_letters"]),
        0,
        "{st}"
    );
    let messages = sinks::kafka(&brokers, &topic).await;
    // the deleted row's updates before its delete are counted too
    assert!(
        messages.len() as i64 >= total,
        "{} messages",
        messages.len()
    );
    // per row: its partition(s), and its versions in offset order
    let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
    let mut sorted = messages.clone();
    sorted.sort_by_key(|m| (m.partition, m.offset));
    for m in &sorted {
        let id = m.value["id"].as_i64().expect("an id");
        assert_eq!(m.key.as_deref(), Some(format!("{{\"id\":{id}}}").as_str()));
        let row = rows.entry(id).or_default();
        if !row.partitions.contains(&m.partition) {
            row.partitions.push(m.partition);
        }
        row.versions
            .extend(m.value.get("v").and_then(Value::as_i64));
    }
    assert_eq!(rows.len(), 20);
    let partitions: std::collections::BTreeSet<i32> =
        rows.values().map(|r| r.partitions[0]).collect();
    assert!(partitions.len() > 1, "the rows spread over the partitions");
    for (id, r) in &rows {
        let (parts, vs) = (&r.partitions, &r.versions);
        assert_eq!(parts.len(), 1, "row {id} in partitions {parts:?}");
        assert!(
            vs.windows(2).all(|w| w[1] == w[0] + 1),
            "row {id}: versions out of order {vs:?}"
        );
    }
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
