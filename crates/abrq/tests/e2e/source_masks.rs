//! Columns left out and masked at the source, through the binary against
//! the real servers: `per_table` with `exclude_columns` (or `columns`) and
//! `mask` (`hash`, `redact`) applies to the copy, the stream and a
//! backfill alike. The oracle is PostgreSQL itself: it computes each
//! expected hash (`sha256` of the salt, a zero byte and the value) from
//! the source rows, and the replica (read through its own client) must
//! equal that, with no column for what was left out.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};

const SALT: &str = "pepper";

/// The source rows as the replica must hold them.
async fn masked_source(
    src: &PgPool,
    table: &str,
) -> Vec<(i32, Option<String>, Option<String>, String)> {
    sqlx::query_as(&format!(
        "SELECT id, encode(sha256(convert_to('{SALT}', 'UTF8') || '\\x00'::bytea \
         || convert_to(email, 'UTF8')), 'hex'), NULL::text, note FROM {table} ORDER BY id"
    ))
    .fetch_all(src)
    .await
    .unwrap()
}

async fn replica(dst: &PgPool, table: &str) -> Vec<(i32, Option<String>, Option<String>, String)> {
    sqlx::query_as(&format!(
        "SELECT id, email, phone, note FROM {table} ORDER BY id"
    ))
    .fetch_all(dst)
    .await
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_columns_are_left_out_and_masked_in_the_copy_the_stream_and_a_backfill() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("mask_{tag}"),
        format!("abrq_mask_{tag}"),
        format!("mask_dst_{tag}"),
    );
    let table = format!("\"{schema}\".customers");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!(
            "CREATE TABLE {table} (id int PRIMARY KEY, email text, phone text, ssn text, note text NOT NULL)"
        ),
        format!(
            "INSERT INTO {table} SELECT g, 'user' || g || '@example.com', '555-' || g, 'ssn-' || g, 'n' \
             FROM generate_series(1, 50) AS g"
        ),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let rules: toml::Value = toml::from_str(&format!(
        "[\"{schema}.customers\"]\nexclude_columns = [\"ssn\"]\n\
         mask = {{ email = \"hash\", phone = \"redact\" }}\n"
    ))
    .unwrap();
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.customers"))
        .slot(&slot)
        .publication(&slot)
        .per_table(rules)
        .mask_salt(SALT);
    let text = Config::new(&abrq)
        .stream(
            Stream::new("pii", source)
                .max_records(20)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("replica")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("customers")
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
    abrq.wait_status("pii", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    for sql in [
        format!("INSERT INTO {table} VALUES (51, 'new@example.com', '555-51', 'ssn-51', 'n')"),
        format!("UPDATE {table} SET email = 'changed@example.com', note = 'u' WHERE id = 2"),
        format!("UPDATE {table} SET email = NULL WHERE id = 3"),
        format!("DELETE FROM {table} WHERE id = 4"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let replica_table = format!("\"{dst_schema}\".customers");
    let want = masked_source(&src, &table).await;
    wait_until(LONG, "the replica equals the masked source", async || {
        replica(&dst, &replica_table).await == want
    })
    .await;
    // a backfill reads every row again, through the same rules
    sqlx::query(&format!("TRUNCATE \"{dst_schema}\".customers"))
        .execute(&dst)
        .await
        .unwrap();
    let (status, _, _) = abrq
        .cli(&["backfill", "-s", "pii", "--config", &abrq.p("abrq.toml")])
        .await;
    assert!(status.success());
    wait_until(LONG, "the backfill refilled the replica", async || {
        replica(&dst, &replica_table).await == want
    })
    .await;
    let st = abrq.wait_drained("pii", Duration::ZERO, LONG).await;
    for d in ["replica", "history"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = 'customers' ORDER BY column_name",
    )
    .bind(&dst_schema)
    .fetch_all(&dst)
    .await
    .unwrap();
    assert_eq!(columns, ["email", "id", "note", "phone"], "no ssn column");
    // no record anywhere holds what was left out or masked
    let out = read_dest(&abrq.path("out"));
    let records: Vec<_> = out
        .verify_manifests("pii")
        .iter()
        .flat_map(|(_, key)| out.objects[key].records.clone())
        .collect();
    assert!(records.len() >= 50 + 4 + 50, "{}", records.len());
    for r in &records {
        assert!(!r.contains_key("ssn"), "{r:?}");
        assert!(r.get("phone").is_none_or(|p| p.is_null()), "{r:?}");
        let email = r.get("email").and_then(|e| e.as_str());
        assert!(
            email.is_none_or(|e| e.len() == 64 && !e.contains('@')),
            "{r:?}"
        );
    }
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_columns_listed_are_the_only_ones_that_reach_the_replica() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (db, dst_schema) = (format!("mask_{tag}"), format!("mymask_dst_{tag}"));
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!("CREATE TABLE `{db}`.c (id int PRIMARY KEY, email varchar(80), secret varchar(20), v int)"),
        format!("INSERT INTO `{db}`.c SELECT seq, CONCAT('u', seq, '@x'), 's', seq FROM seq_1_to_30"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let rules: toml::Value = toml::from_str(&format!(
        "[\"{db}.c\"]\ncolumns = [\"id\", \"email\", \"v\"]\nmask = {{ email = \"hash\" }}\n"
    ))
    .unwrap();
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .tables(&[&format!("{db}.c")])
        .per_table(rules)
        .mask_salt(SALT);
    let text = Config::new(&abrq)
        .stream(
            Stream::new("mpii", source).max_wait("20ms").destination(
                Destination::postgres("replica")
                    .connection(&pg::url())
                    .schema(&dst_schema)
                    .table("c")
                    .mode("upsert"),
            ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    for sql in [
        format!("INSERT INTO `{db}`.c VALUES (31, 'new@x', 's', 31)"),
        format!("UPDATE `{db}`.c SET v = 100, secret = 't' WHERE id = 1"),
        format!("DELETE FROM `{db}`.c WHERE id = 2"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    // the expected hashes, from the source's own SHA2
    let mut want: Vec<(i32, String, i32)> = sqlx::query_as(&format!(
        "SELECT id, SHA2(CONCAT('{SALT}', CHAR(0), email), 256), v FROM `{db}`.c"
    ))
    .fetch_all(&src)
    .await
    .unwrap();
    want.sort();
    let replica = format!("\"{dst_schema}\".c");
    wait_until(LONG, "the replica equals the masked source", async || {
        sqlx::query_as::<_, (i32, String, i32)>(&format!(
            "SELECT id, email, v FROM {replica} ORDER BY id"
        ))
        .fetch_all(&dst)
        .await
        .unwrap_or_default()
            == want
    })
    .await;
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = 'c' ORDER BY column_name",
    )
    .bind(&dst_schema)
    .fetch_all(&dst)
    .await
    .unwrap();
    assert_eq!(columns, ["email", "id", "v"]);
    abrq.kill();
    sqlx::query(&format!("DROP DATABASE `{db}`"))
        .execute(&src)
        .await
        .unwrap();
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
