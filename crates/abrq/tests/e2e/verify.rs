//! `abrq verify` through the binary, while writers run: a cdc stream into
//! a relational replica, the replica corrupted by hand (rows deleted,
//! values changed, a row added), then verify names exactly those keys
//! (changes in flight are not differences), `--repair` makes the replica
//! equal, and the oracle (both databases read through their own clients)
//! agrees. PostgreSQL into PostgreSQL, and MariaDB into MariaDB.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use serde_json::Value;

/// Rows copied before the writers start; the writers touch only keys above
/// [`HOT`], the corruption only keys below it.
const ROWS: i64 = 3_000;
const HOT: i64 = 2_000;

/// (key, kind) of each difference a verification reported.
fn differences(body: &Value) -> BTreeSet<(String, String)> {
    body["tables"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["differences"].as_array().cloned().unwrap_or_default())
        .map(|d| {
            (
                d["key"]["id"].as_str().unwrap_or_default().to_string(),
                d["kind"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn expected() -> BTreeSet<(String, String)> {
    [
        ("10", "missing"),
        ("11", "missing"),
        ("12", "missing"),
        ("20", "changed"),
        ("21", "changed"),
        ("99999", "extra"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The hand-made damage to `replica`: the differences [`expected`] names.
fn corruption(replica: &str) -> [String; 4] {
    [
        format!("DELETE FROM {replica} WHERE id IN (10, 11, 12)"),
        format!("UPDATE {replica} SET name = 'tampered' WHERE id = 20"),
        format!("UPDATE {replica} SET amount = amount + 0.01 WHERE id = 21"),
        format!("INSERT INTO {replica} (id, name) VALUES (99999, 'extra')"),
    ]
}

/// `abrq verify` with `extra` flags, as JSON, and whether it exited 0.
async fn verify(abrq: &Abrq, stream: &str, dest: &str, extra: &[&str]) -> (bool, Value) {
    let config = abrq.config_path().display().to_string();
    let mut args = vec![
        "verify", "--config", &config, "-s", stream, "-d", dest, "--json",
    ];
    args.extend_from_slice(extra);
    let (status, stdout, stderr) = abrq.cli(&args).await;
    let body: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("verify printed no JSON ({e}): {stdout}{stderr}"));
    (status.success(), body)
}

/// Verifies with writers running: differences exactly the corruption,
/// then a repair, then equal.
async fn check_and_repair(abrq: &Abrq, stream: &str, dest: &str) {
    let (ok, body) = verify(abrq, stream, dest, &[]).await;
    assert!(!ok, "verify exits non-zero on a differing replica: {body}");
    assert_eq!(differences(&body), expected(), "{body}");
    let t = &body["tables"][0];
    assert!(t["ranges"].as_u64().unwrap() >= 1, "{body}");
    assert!(t["error"].is_null(), "{body}");
    let (ok, body) = verify(abrq, stream, dest, &["--repair"]).await;
    let repair = &body["tables"][0]["repair"];
    assert!(ok, "the repair leaves the replica equal: {body}");
    assert_eq!(repair["backfilled"], 5, "{body}");
    assert_eq!(repair["deleted"], 1, "{body}");
    assert_eq!(repair["still_different"], 0, "{body}");
    let (ok, body) = verify(abrq, stream, dest, &[]).await;
    assert!(ok, "equal after the repair: {body}");
    assert!(differences(&body).is_empty(), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_replica_differences_are_named_and_repaired_while_writers_run() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("verify_{tag}"),
        format!("abrq_verify_{tag}"),
        format!("verify_dst_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, name text, amount numeric(12,2), \
             at timestamp, doc json, flag boolean)"
        ),
        format!(
            "INSERT INTO {table} SELECT g, 'name ' || g, g * 1.25, \
             timestamp '2026-01-01' + g * interval '1 minute', \
             json_build_object('g', g, 'tags', json_build_array('a', g)), g % 2 = 0 \
             FROM generate_series(1, {ROWS}) AS g"
        ),
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
            Stream::new("v", source)
                .max_records(200)
                .max_wait("20ms")
                .destination(
                    Destination::postgres("pg")
                        .connection(&pg::url())
                        .schema(&dst_schema)
                        .table("t")
                        .mode("upsert"),
                ),
        )
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    let count = format!("SELECT count(*) FROM \"{dst_schema}\".t");
    wait_until(LONG, "the copy reached the replica", async || {
        sqlx::query_scalar::<_, i64>(&count)
            .fetch_one(&dst)
            .await
            .unwrap_or(0)
            == ROWS
    })
    .await;
    // writers: new rows and updates above HOT, all the time
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (src, stop, table) = (src.clone(), stop.clone(), table.clone());
        tokio::spawn(async move {
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let sql = format!(
                    "WITH u AS (UPDATE {table} SET amount = amount + 1, at = now() \
                     WHERE id = {HOT} + 1 + ({n} * 37) % ({ROWS} - {HOT}) RETURNING 1) \
                     INSERT INTO {table} (id, name, doc) VALUES (100000 + {n}, 'w', '{{\"n\": {n}}}')"
                );
                sqlx::query(&sql).execute(&src).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };
    for sql in corruption(&format!("\"{dst_schema}\".t")) {
        sqlx::query(&sql).execute(&dst).await.unwrap();
    }
    check_and_repair(&abrq, "v", "pg").await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(
        written > 10,
        "the writers ran throughout ({written} transactions)"
    );
    // the oracle: both sides read through their own clients
    let rows = |schema: &str| {
        format!(
            "SELECT id, coalesce(name, ''), coalesce(amount::text, ''), \
             coalesce(to_char(at, 'YYYY-MM-DD HH24:MI:SS.US'), ''), coalesce(doc::jsonb::text, ''), \
             coalesce(flag::text, '') FROM \"{schema}\".t ORDER BY id"
        )
    };
    type Row = (i64, String, String, String, String, String);
    let want: Vec<Row> = sqlx::query_as(&rows(&schema))
        .fetch_all(&src)
        .await
        .unwrap();
    wait_until(LONG, "the replica equals the source", async || {
        sqlx::query_as::<_, Row>(&rows(&dst_schema))
            .fetch_all(&dst)
            .await
            .unwrap_or_default()
            == want
    })
    .await;
    // not a relational replica: refused with the reason
    let (status, _, stderr) = abrq
        .cli(&[
            "verify",
            "--config",
            &abrq.config_path().display().to_string(),
            "-s",
            "v",
            "-d",
            "nope",
        ])
        .await;
    assert!(!status.success());
    assert!(stderr.contains("unknown destination"), "{stderr}");
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_replica_differences_are_named_and_repaired_while_writers_run() {
    let my = MySqlPool::connect(&mysqlcdc::url()).await.expect("mariadb");
    let tag = pg::tag();
    let (db, dst_db) = (format!("verify_{tag}"), format!("verify_dst_{tag}"));
    let table = format!("`{db}`.t");
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, name varchar(100), amount decimal(12,2), \
             at datetime, raw varbinary(16), flag tinyint)"
        ),
        format!(
            "INSERT INTO {table} SELECT seq, CONCAT('name ', seq), seq * 1.25, \
             TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq MINUTE, UNHEX(LPAD(HEX(seq), 8, '0')), seq % 2 \
             FROM seq_1_to_{ROWS}"
        ),
    ] {
        sqlx::query(&sql).execute(&my).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .table(&format!("{db}.t"));
    let text = Config::new(&abrq)
        .stream(
            Stream::new("mv", source)
                .max_records(200)
                .max_wait("20ms")
                .destination(
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
    wait_until(LONG, "the copy reached the replica", async || {
        sqlx::query_scalar::<_, i64>(&count)
            .fetch_one(&my)
            .await
            .unwrap_or(0)
            == ROWS
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (my, stop, table) = (my.clone(), stop.clone(), table.clone());
        tokio::spawn(async move {
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = HOT + 1 + (n * 37) % (ROWS - HOT);
                let mut tx = my.begin().await.unwrap();
                for sql in [
                    format!("UPDATE {table} SET amount = amount + 1, at = NOW() WHERE id = {id}"),
                    format!("INSERT INTO {table} (id, name) VALUES (100000 + {n}, 'w')"),
                ] {
                    sqlx::query(&sql).execute(&mut *tx).await.unwrap();
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            n
        })
    };
    for sql in corruption(&format!("`{dst_db}`.t")) {
        sqlx::query(&sql).execute(&my).await.unwrap();
    }
    check_and_repair(&abrq, "mv", "my").await;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await.unwrap();
    assert!(
        written > 10,
        "the writers ran throughout ({written} transactions)"
    );
    // bytes reach a text column as `\x` and hex digits
    let rows = |db: &str, raw: &str| {
        format!(
            "SELECT id, COALESCE(name, ''), COALESCE(CAST(amount AS CHAR), ''), \
             COALESCE(DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s'), ''), COALESCE({raw}, ''), \
             COALESCE(CAST(flag AS CHAR), '') FROM `{db}`.t ORDER BY id"
        )
    };
    type Row = (i64, String, String, String, String, String);
    let source_raw = "CONCAT('\\\\x', LOWER(HEX(raw)))";
    let want: Vec<Row> = sqlx::query_as(&rows(&db, source_raw))
        .fetch_all(&my)
        .await
        .unwrap();
    wait_until(LONG, "the replica equals the source", async || {
        sqlx::query_as::<_, Row>(&rows(&dst_db, "raw"))
            .fetch_all(&my)
            .await
            .unwrap_or_default()
            == want
    })
    .await;
    abrq.kill();
    for d in [&db, &dst_db] {
        sqlx::query(&format!("DROP DATABASE `{d}`"))
            .execute(&my)
            .await
            .unwrap();
    }
}

/// The console's Verification panel on a relational destination: verify
/// shows the differing key, verify and repair leaves the replica equal.
#[tokio::test(flavor = "multi_thread")]
async fn console_verifies_and_repairs_a_replica() {
    use crate::common::browser::Browser;
    const TOKEN: &str = "verify-console-token";
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("verifyc_{tag}"),
        format!("abrq_verifyc_{tag}"),
        format!("verifyc_dst_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, v text)"),
        format!("INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 50) AS g"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    abrq.admin_token = Some(TOKEN.to_string());
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot);
    let text = Config::new(&abrq)
        .admin_token(TOKEN)
        .stream(
            Stream::new("c", source).destination(
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
    let count = format!("SELECT count(*) FROM \"{dst_schema}\".t");
    wait_until(LONG, "the copy reached the replica", async || {
        sqlx::query_scalar::<_, i64>(&count)
            .fetch_one(&dst)
            .await
            .unwrap_or(0)
            == 50
    })
    .await;
    sqlx::query(&format!("DELETE FROM \"{dst_schema}\".t WHERE id = 7"))
        .execute(&dst)
        .await
        .unwrap();
    let page = Browser::start().await;
    page.open(&abrq.base()).await;
    page.type_into("#token", TOKEN).await;
    page.click("#login-form button[type=submit]").await;
    let row = "tr[data-dest=\"c/replica\"]";
    page.click(&format!("{row} button[data-action=verification]"))
        .await;
    let panel = "tr[data-verification=\"c/replica\"]";
    page.wait_text(panel, "the empty panel", |t| t.contains("not verified yet"))
        .await;
    page.click(&format!("{panel} button[data-action=verify]"))
        .await;
    page.wait_text(&format!("{panel} [data-role=verdict]"), "differs", |t| {
        t.starts_with("differs")
    })
    .await;
    page.wait_text(&format!("{panel} [data-role=differences]"), "one", |t| {
        t == "1"
    })
    .await;
    page.wait_text(panel, "the key", |t| t.contains("missing 7"))
        .await;
    page.click(&format!("{panel} button[data-action=verify-repair]"))
        .await;
    page.wait_text(&format!("{panel} [data-role=verdict]"), "equal", |t| {
        t.starts_with("equal")
    })
    .await;
    page.close().await;
    let last = abrq.get("/v1/streams/c/destinations/replica/verify").await;
    assert_eq!(last["equal"], true, "{last}");
    assert_eq!(last["tables"][0]["repair"]["backfilled"], 1, "{last}");
    let back: i64 = sqlx::query_scalar(&count).fetch_one(&dst).await.unwrap();
    assert_eq!(back, 50);
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
