//! `deletes = "soft"` on relational destinations, through the binary: a
//! PostgreSQL cdc stream into a PostgreSQL and a MariaDB replica. A
//! deleted row stays with `_abrq_deleted_at` set; a row inserted again
//! under its key is live again. The oracle reads the source and each
//! replica through their own clients: the live rows equal the source's
//! rows, and the rows marked deleted are exactly the keys deleted and not
//! written again.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};

#[tokio::test(flavor = "multi_thread")]
async fn deleted_rows_stay_marked_and_come_back_when_written_again() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let my = MySqlPool::connect(&mysqlcdc::url()).await.expect("mariadb");
    let tag = pg::tag();
    let (schema, slot, dst_schema, my_db) = (
        format!("soft_{tag}"),
        format!("abrq_soft_{tag}"),
        format!("soft_dst_{tag}"),
        format!("soft_dst_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)"),
        format!("INSERT INTO {table} SELECT g, g FROM generate_series(1, 40) AS g"),
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
            Stream::new("soft", source)
                .max_records(10)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("pg")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("t")
                        .mode("upsert")
                        .deletes("soft"),
                )
                .destination(
                    Destination::mysql("my")
                        .connection(&mysqlcdc::url())
                        .database(&my_db)
                        .table("t")
                        .mode("upsert")
                        .deletes("soft"),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    // the rows are deleted once the copy holds them: a delete committed
    // before the slot's snapshot would leave nothing to mark
    abrq.wait_status("soft", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    for sql in [
        format!("DELETE FROM {table} WHERE id BETWEEN 1 AND 10"),
        format!("UPDATE {table} SET v = -v WHERE id BETWEEN 5 AND 15"),
        format!("INSERT INTO {table} VALUES (3, 300), (41, 41)"),
        format!("DELETE FROM {table} WHERE id IN (20, 41)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let live: Vec<(i32, i32)> = sqlx::query_as(&format!("SELECT id, v FROM {table} ORDER BY id"))
        .fetch_all(&src)
        .await
        .unwrap();
    let gone: Vec<i32> = [1, 2, 4, 5, 6, 7, 8, 9, 10, 20, 41].into();
    let pg_live =
        format!("SELECT id, v FROM \"{dst_schema}\".t WHERE _abrq_deleted_at IS NULL ORDER BY id");
    let pg_gone =
        format!("SELECT id FROM \"{dst_schema}\".t WHERE _abrq_deleted_at IS NOT NULL ORDER BY id");
    wait_until(
        LONG,
        "the PostgreSQL replica's live rows equal the source",
        async || {
            sqlx::query_as::<_, (i32, i32)>(&pg_live)
                .fetch_all(&dst)
                .await
                .unwrap_or_default()
                == live
        },
    )
    .await;
    let marked: Vec<i32> = sqlx::query_scalar(&pg_gone).fetch_all(&dst).await.unwrap();
    assert_eq!(marked, gone);
    let my_live =
        format!("SELECT id, v FROM `{my_db}`.t WHERE _abrq_deleted_at IS NULL ORDER BY id");
    let my_gone =
        format!("SELECT id FROM `{my_db}`.t WHERE _abrq_deleted_at IS NOT NULL ORDER BY id");
    wait_until(
        LONG,
        "the MariaDB replica's live rows equal the source",
        async || {
            sqlx::query_as::<_, (i32, i32)>(&my_live)
                .fetch_all(&my)
                .await
                .unwrap_or_default()
                == live
        },
    )
    .await;
    let marked: Vec<i32> = sqlx::query_scalar(&my_gone).fetch_all(&my).await.unwrap();
    assert_eq!(marked, gone);
    // the mark is when the delete was applied
    let age: f64 = sqlx::query_scalar(&format!(
        "SELECT EXTRACT(EPOCH FROM now() - max(_abrq_deleted_at))::float8 FROM \"{dst_schema}\".t"
    ))
    .fetch_one(&dst)
    .await
    .unwrap();
    assert!((0.0..120.0).contains(&age), "{age}");
    let st = abrq.wait_drained("soft", Duration::ZERO, LONG).await;
    for d in ["pg", "my"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
    sqlx::query(&format!("DROP DATABASE `{my_db}`"))
        .execute(&my)
        .await
        .unwrap();
}
