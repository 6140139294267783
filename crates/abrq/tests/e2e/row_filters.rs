//! Rows filtered at the source and backfills of part of a table, through
//! the binary against the real servers. The oracle is each server's own
//! `WHERE` over the source table, read through its own client, against
//! the replica read through its own:
//!
//! - `per_table."t".where`: the copy and the stream keep only matching
//!   rows; an update that moves a row out of the filter deletes it from
//!   the replica, one that moves it in adds it;
//! - `abrq backfill --where "..."`: after the replica is emptied, a
//!   backfill refills exactly the rows the filter (and the table's own
//!   `where`) keeps; a text that is not a filter is refused at once.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};

type Row = (i32, String, i32);

async fn pg_rows(pool: &PgPool, sql: &str) -> Vec<Row> {
    sqlx::query_as(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_default()
}

async fn my_rows(pool: &MySqlPool, sql: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = sqlx::query_as(sql).fetch_all(pool).await.unwrap();
    rows.sort();
    rows
}

fn rules(table: &str) -> toml::Value {
    toml::from_str(&format!(
        "[\"{table}\"]\nwhere = \"region IN ('eu', 'us')\"\n"
    ))
    .unwrap()
}

async fn backfill(abrq: &Abrq, stream: &str, filter: &str) {
    let (status, out, err) = abrq
        .cli(&[
            "backfill",
            "-s",
            stream,
            "--where",
            filter,
            "--config",
            &abrq.p("abrq.toml"),
        ])
        .await;
    assert!(status.success(), "{out} {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_rows_are_filtered_and_a_backfill_reads_only_the_rows_asked_for() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("rows_{tag}"),
        format!("abrq_rows_{tag}"),
        format!("rows_dst_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, region text NOT NULL, v int NOT NULL)"),
        format!(
            "INSERT INTO {table} SELECT g, (ARRAY['eu', 'us', 'ap'])[g % 3 + 1], g \
             FROM generate_series(1, 300) AS g"
        ),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot)
        .per_table(rules(&format!("{schema}.t")));
    let text = Config::new(&abrq)
        .stream(
            Stream::new("rows", source)
                .max_records(50)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("replica")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("t")
                        .mode("upsert"),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    for sql in [
        format!("INSERT INTO {table} VALUES (301, 'eu', 301), (302, 'ap', 302)"),
        // out of the filter, and into it
        format!("UPDATE {table} SET region = 'ap' WHERE id = 1"),
        format!("UPDATE {table} SET region = 'eu' WHERE id = 2"),
        format!("UPDATE {table} SET v = -v WHERE id BETWEEN 10 AND 20"),
        format!("DELETE FROM {table} WHERE id IN (3, 4, 5)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let replica = format!("SELECT id, region, v FROM \"{dst_schema}\".t ORDER BY id");
    let matching = |extra: &str| {
        format!("SELECT id, region, v FROM {table} WHERE region IN ('eu', 'us'){extra} ORDER BY id")
    };
    let want = pg_rows(&src, &matching("")).await;
    assert!(want.len() > 150 && want.len() < 250);
    wait_until(LONG, "the replica holds the matching rows", async || {
        pg_rows(&dst, &replica).await == want
    })
    .await;
    // a backfill of part of the table, into an emptied replica
    sqlx::query(&format!("TRUNCATE \"{dst_schema}\".t"))
        .execute(&dst)
        .await
        .unwrap();
    backfill(&abrq, "rows", "v > 100 AND v <= 250").await;
    let want = pg_rows(&src, &matching(" AND v > 100 AND v <= 250")).await;
    wait_until(
        LONG,
        "the backfill read just the rows asked for",
        async || pg_rows(&dst, &replica).await == want,
    )
    .await;
    // a filter that is not one is refused at once, naming it
    let (status, _, err) = abrq
        .cli(&[
            "backfill",
            "-s",
            "rows",
            "--where",
            "v = 1; DROP TABLE t",
            "--config",
            &abrq.p("abrq.toml"),
        ])
        .await;
    assert!(!status.success() && err.contains("';'"), "{err}");
    let st = abrq.wait_drained("rows", Duration::ZERO, LONG).await;
    assert_eq!(
        u(&dest_of(&st, "replica")["pending_dead_letters"]),
        0,
        "{st}"
    );
    assert_eq!(pg_rows(&dst, &replica).await, want, "nothing more arrived");
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_rows_are_filtered_and_a_backfill_reads_only_the_rows_asked_for() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (db, dst_schema) = (format!("rows_{tag}"), format!("myrows_dst_{tag}"));
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!("CREATE TABLE `{db}`.t (id int PRIMARY KEY, region varchar(4) NOT NULL, v int NOT NULL)"),
        format!("INSERT INTO `{db}`.t SELECT seq, ELT(seq % 3 + 1, 'eu', 'us', 'ap'), seq FROM seq_1_to_300"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .tables(&[&format!("{db}.t")])
        .per_table(rules(&format!("{db}.t")));
    let text = Config::new(&abrq)
        .stream(
            Stream::new("mrows", source)
                .max_records(50)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("replica")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("t")
                        .mode("upsert"),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    for sql in [
        format!("INSERT INTO `{db}`.t VALUES (301, 'eu', 301), (302, 'ap', 302)"),
        format!("UPDATE `{db}`.t SET region = 'ap' WHERE id = 1"),
        format!("UPDATE `{db}`.t SET region = 'eu' WHERE id = 2"),
        format!("DELETE FROM `{db}`.t WHERE id IN (3, 4, 5)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let replica = format!("SELECT id, region, v FROM \"{dst_schema}\".t ORDER BY id");
    let matching = |extra: &str| {
        format!(
            "SELECT id, CAST(region AS CHAR), v FROM `{db}`.t WHERE region IN ('eu', 'us'){extra}"
        )
    };
    let want = my_rows(&src, &matching("")).await;
    wait_until(LONG, "the replica holds the matching rows", async || {
        pg_rows(&dst, &replica).await == want
    })
    .await;
    sqlx::query(&format!("TRUNCATE \"{dst_schema}\".t"))
        .execute(&dst)
        .await
        .unwrap();
    backfill(&abrq, "mrows", "v > 100 AND region <> 'us'").await;
    let want = my_rows(&src, &matching(" AND v > 100 AND region <> 'us'")).await;
    wait_until(
        LONG,
        "the backfill read just the rows asked for",
        async || pg_rows(&dst, &replica).await == want,
    )
    .await;
    abrq.kill();
    sqlx::query(&format!("DROP DATABASE `{db}`"))
        .execute(&src)
        .await
        .unwrap();
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
