//! A partitioned PostgreSQL table captured as its root, through the
//! binary: the copy reads every partition; changes in any partition,
//! one created while the stream runs among them, and an update that moves
//! a row to another partition, arrive under the root's name; the upsert
//! replica (one table, made by abrq) ends equal to the source.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

async fn rows(pool: &PgPool, table: &str) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT id || ',' || region || ',' || v FROM {table} ORDER BY id"
    ))
    .fetch_all(pool)
    .await
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_table_arrives_as_its_root_with_partitions_added_while_streaming() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("parts_{tag}"),
        format!("abrq_parts_{tag}"),
        format!("parts_dst_{tag}"),
    );
    let root = format!("\"{schema}\".m");
    let part = |name: &str, region: &str| {
        format!("CREATE TABLE \"{schema}\".{name} PARTITION OF {root} FOR VALUES IN ('{region}')")
    };
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!(
            "CREATE TABLE {root} (id int, region text, v int, PRIMARY KEY (id, region)) \
             PARTITION BY LIST (region)"
        ),
        part("m_eu", "eu"),
        part("m_us", "us"),
        format!("INSERT INTO {root} SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 500) AS g"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.m"))
        .slot(&slot)
        .publication(&slot);
    let text = Config::new(&abrq)
        .stream(
            Stream::new("parts", source)
                .max_records(100)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("replica")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("m")
                        .mode("upsert"),
                )
                .destination(
                    Destination::local("history", abrq.p("out"))
                        .format("jsonl")
                        .manifest(),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("parts", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    for sql in [
        format!("INSERT INTO {root} VALUES (501, 'eu', 501), (502, 'us', 502)"),
        part("m_ap", "ap"),
        format!("INSERT INTO {root} VALUES (503, 'ap', 503)"),
        format!("UPDATE {root} SET region = 'ap' WHERE id = 2"),
        format!("UPDATE {root} SET v = -3 WHERE id = 3"),
        format!("DELETE FROM {root} WHERE id = 4"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let want = rows(&src, &root).await;
    let replica = format!("\"{dst_schema}\".m");
    wait_until(LONG, "the replica equals the source", async || {
        rows(&dst, &replica).await == want
    })
    .await;
    let st = abrq.wait_drained("parts", Duration::ZERO, LONG).await;
    for d in ["replica", "history"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    // every record names the root; the row moved to another partition
    // is the old row's delete, then the new row
    let out = read_dest(&abrq.path("out"));
    let records: Vec<_> = out
        .verify_manifests("parts")
        .iter()
        .flat_map(|(_, key)| out.objects[key].records.clone())
        .collect();
    let root_name = format!("{schema}.m");
    assert!(
        records
            .iter()
            .all(|r| r["_abrq_table"] == root_name.as_str()),
        "a record names a partition"
    );
    assert_eq!(
        records.len(),
        500 + 3 + 2 + 1 + 1,
        "copied rows and changes"
    );
    let moved: Vec<(&str, &str)> = records
        .iter()
        .filter(|r| r["id"] == 2)
        .map(|r| (op_of(r), r["region"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        moved,
        [("insert", "eu"), ("delete", "eu"), ("insert", "ap")]
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
