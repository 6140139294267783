//! Columns renamed, dropped and widened in a PostgreSQL source reach
//! relational replicas through the binary: a rename renames the replica's
//! column (its values stay; no new empty column beside a dead one), a
//! dropped column is dropped under `dropped_columns = "drop"` and kept
//! with its values under the default `keep`, and a widened type widens
//! the replica's column; a MySQL source's renames (read from the ALTER
//! TABLE) too. The oracle reads the sources and replicas through their
//! own clients.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};

#[tokio::test(flavor = "multi_thread")]
async fn renames_drops_and_widenings_reach_both_replicas() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let my = MySqlPool::connect(&mysqlcdc::url()).await.expect("mariadb");
    let tag = pg::tag();
    let (schema, slot, dst_schema, my_db) = (
        format!("cols_{tag}"),
        format!("abrq_cols_{tag}"),
        format!("cols_dst_{tag}"),
        format!("cols_dst_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, a text, b int, c text)"),
        format!("INSERT INTO {table} VALUES (1, 'one', 1, 'c1'), (2, 'two', 2, 'c2')"),
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
            Stream::new("cols", source)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("pg")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("t")
                        .mode("upsert")
                        .dropped_columns("drop"),
                )
                .destination(
                    Destination::mysql("my")
                        .connection(&mysqlcdc::url())
                        .database(&my_db)
                        .table("t")
                        .mode("upsert"),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    let pg_count = format!("SELECT count(*) FROM \"{dst_schema}\".t");
    let my_count = format!("SELECT count(*) FROM `{my_db}`.t");
    let counts = async |n: i64| {
        let p: i64 = sqlx::query_scalar(&pg_count)
            .fetch_one(&dst)
            .await
            .unwrap_or(0);
        let m: i64 = sqlx::query_scalar(&my_count)
            .fetch_one(&my)
            .await
            .unwrap_or(0);
        p == n && m == n
    };
    abrq.wait_status("cols", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    sqlx::query(&format!("INSERT INTO {table} VALUES (3, 'three', 3, 'c3')"))
        .execute(&src)
        .await
        .unwrap();
    wait_until(LONG, "three rows in both replicas", async || {
        counts(3).await
    })
    .await;
    // each change delivered before the next DDL: abrq reads a change
    // while its table still has that shape (a backlog that DDL has since
    // changed again is known by column names only; see the README)
    let steps = [
        vec![
            format!("ALTER TABLE {table} RENAME COLUMN a TO name"),
            format!("INSERT INTO {table} VALUES (4, 'four', 4, 'c4')"),
            format!("UPDATE {table} SET name = 'one!' WHERE id = 1"),
        ],
        vec![
            format!("ALTER TABLE {table} DROP COLUMN c"),
            format!("INSERT INTO {table} VALUES (5, 'five', 5)"),
        ],
        vec![
            format!("ALTER TABLE {table} ALTER COLUMN b TYPE bigint"),
            format!("INSERT INTO {table} VALUES (6, 'six', 1099511627776)"),
        ],
    ];
    for (n, step) in (4..).zip(steps) {
        for sql in step {
            sqlx::query(&sql).execute(&src).await.unwrap();
        }
        wait_until(LONG, &format!("{n} rows in both replicas"), async || {
            counts(n).await
        })
        .await;
    }
    let want: Vec<(i32, String, i64)> = sqlx::query_as(&format!(
        "SELECT id, name, b::int8 FROM {table} ORDER BY id"
    ))
    .fetch_all(&src)
    .await
    .unwrap();
    assert_eq!(want[0].1, "one!");
    assert_eq!(want[1].1, "two");

    // PostgreSQL replica: renamed, c dropped, b widened
    let pg_cols: Vec<(String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = 't' ORDER BY ordinal_position",
    )
    .bind(&dst_schema)
    .fetch_all(&dst)
    .await
    .unwrap();
    let names: Vec<&str> = pg_cols.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "name", "b"], "{pg_cols:?}");
    assert_eq!(pg_cols[2].1, "bigint", "{pg_cols:?}");
    let pg_rows: Vec<(i32, String, i64)> = sqlx::query_as(&format!(
        "SELECT id, name, b FROM \"{dst_schema}\".t ORDER BY id"
    ))
    .fetch_all(&dst)
    .await
    .unwrap();
    assert_eq!(pg_rows, want, "the renamed column kept its values");

    // MariaDB replica: renamed, c kept with its values, b widened
    let my_cols: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION",
    )
    .bind(&my_db)
    .fetch_all(&my)
    .await
    .unwrap();
    let names: Vec<&str> = my_cols.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "name", "b", "c"], "{my_cols:?}");
    assert_eq!(my_cols[2].1, "bigint", "{my_cols:?}");
    let my_rows: Vec<(i32, String, i64, Option<String>)> = sqlx::query_as(&format!(
        "SELECT id, name, b, c FROM `{my_db}`.t ORDER BY id"
    ))
    .fetch_all(&my)
    .await
    .unwrap();
    let got: Vec<(i32, String, i64)> = my_rows.iter().map(|r| (r.0, r.1.clone(), r.2)).collect();
    assert_eq!(got, want);
    let kept: Vec<Option<String>> = my_rows.iter().map(|r| r.3.clone()).collect();
    assert_eq!(
        kept,
        [Some("c1"), Some("c2"), Some("c3"), Some("c4"), None, None].map(|c| c.map(str::to_string))
    );

    let st = abrq
        .wait_drained("cols", std::time::Duration::ZERO, LONG)
        .await;
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

/// A MySQL binlog names no column ids: the source reads renames from the
/// `ALTER TABLE` itself (`RENAME COLUMN`, `CHANGE`), and the replica's
/// column is renamed with its values.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_renames_reach_the_replica_as_renames() {
    let my = MySqlPool::connect(&mysqlcdc::url()).await.expect("mariadb");
    let tag = pg::tag();
    let (db, dst_db) = (format!("mcols_{tag}"), format!("mcols_dst_{tag}"));
    let table = format!("`{db}`.t");
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, a varchar(20), b int)"),
        format!("INSERT INTO {table} VALUES (1, 'one', 1), (2, 'two', 2)"),
    ] {
        sqlx::query(&sql).execute(&my).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .table(&format!("{db}.t"));
    let text = Config::new(&abrq)
        .stream(
            Stream::new("mcols", source).max_wait("20ms").destination(
                Destination::mysql("my")
                    .connection(&mysqlcdc::url())
                    .database(&dst_db)
                    .table("t")
                    .mode("upsert"),
            ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    let count = format!("SELECT count(*) FROM `{dst_db}`.t");
    let steps = [
        vec![],
        vec![
            format!("ALTER TABLE {table} RENAME COLUMN a TO name"),
            format!("INSERT INTO {table} VALUES (3, 'three', 3)"),
        ],
        vec![
            format!("ALTER TABLE {table} CHANGE b bb bigint"),
            format!("INSERT INTO {table} VALUES (4, 'four', 1099511627776)"),
        ],
    ];
    for (n, step) in (2..).zip(steps) {
        for sql in step {
            sqlx::query(&sql).execute(&my).await.unwrap();
        }
        wait_until(LONG, &format!("{n} rows in the replica"), async || {
            sqlx::query_scalar::<_, i64>(&count)
                .fetch_one(&my)
                .await
                .unwrap_or(0)
                == n
        })
        .await;
    }
    let cols: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 't' ORDER BY ORDINAL_POSITION",
    )
    .bind(&dst_db)
    .fetch_all(&my)
    .await
    .unwrap();
    let names: Vec<&str> = cols.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["id", "name", "bb"], "{cols:?}");
    assert_eq!(cols[2].1, "bigint", "{cols:?}");
    let rows = |db: &str| format!("SELECT id, name, CAST(bb AS SIGNED) FROM `{db}`.t ORDER BY id");
    let want: Vec<(i32, String, i64)> = sqlx::query_as(&rows(&db)).fetch_all(&my).await.unwrap();
    let got: Vec<(i32, String, i64)> = sqlx::query_as(&rows(&dst_db)).fetch_all(&my).await.unwrap();
    assert_eq!(got, want, "the renamed columns kept their values");
    assert_eq!(want[0].1, "one");
    abrq.kill();
    for d in [&db, &dst_db] {
        sqlx::query(&format!("DROP DATABASE `{d}`"))
            .execute(&my)
            .await
            .unwrap();
    }
}
