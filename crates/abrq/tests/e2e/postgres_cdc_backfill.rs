//! Backfill on demand of a `postgres` cdc stream, through the binary: a
//! table of many rows (1,000,000 by default; `ABRQ_TEST_BACKFILL_ROWS`)
//! that the stream never copied (`snapshot = "never"`) is read again with
//! `abrq backfill` while writers update, delete and insert rows in it, and
//! abrq is SIGKILLed once in the middle. The backfill goes on after its
//! last staged page, and the `postgres` destination in upsert mode ends
//! equal to the source table: no change lost, none overtaken by an older
//! copy of its row. A backfill of a file stream is refused (409).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use rand::Rng;

fn rows_wanted() -> i64 {
    std::env::var("ABRQ_TEST_BACKFILL_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

async fn rows(pool: &PgPool, table: &str) -> Vec<(i64, i64, String)> {
    sqlx::query_as(&format!("SELECT id, n, note FROM {table} ORDER BY id"))
        .fetch_all(pool)
        .await
        .unwrap_or_default()
}

/// Small transactions of updates, deletes and inserts until told to stop.
async fn writer(src: PgPool, table: String, total: i64, stop: Arc<AtomicBool>, seed: i64) -> u64 {
    let mut done = 0;
    let mut next = total + 1 + seed * 10_000_000;
    while !stop.load(Ordering::Relaxed) {
        let (a, b) = {
            let mut rng = rand::rng();
            (rng.random_range(1..=total), rng.random_range(1..=total))
        };
        let mut tx = src.begin().await.unwrap();
        for sql in [
            format!("UPDATE {table} SET n = n + 1, note = 'changed' WHERE id = {a}"),
            format!("DELETE FROM {table} WHERE id = {b}"),
            format!("INSERT INTO {table} VALUES ({next}, 1, 'new')"),
        ] {
            sqlx::query(&sql).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
        next += 1;
        done += 1;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_under_writers_ends_with_an_equal_replica() {
    let total = rows_wanted();
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst_url = pg::url();
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("cdc_bf_{tag}"),
        format!("abrq_bf_{tag}"),
        format!("cdc_bfdst_{tag}"),
    );
    let table = format!("\"{schema}\".items");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, n bigint NOT NULL, note text)"),
        format!(
            "INSERT INTO {table} SELECT g, 0, 'row ' || g FROM generate_series(1, {total}) AS g"
        ),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    sqlx::query(&format!("CREATE SCHEMA \"{dst_schema}\""))
        .execute(&dst)
        .await
        .unwrap();

    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"

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
max_records = 5000
max_wait = "50ms"

[[streams.destinations]]
name = "replica"
engine = "postgres"
{dst_conn}
schema = "{dst_schema}"
table = "{{table}}"
mode = "upsert"

[[streams]]
name = "file"
[streams.source]
engine = "generate"
records = 1
[[streams.destinations]]
name = "out"
engine = "local"
database = "{out}"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        src_conn = pg::connection_toml(&pg::cdc_url()),
        dst_conn = pg::connection_toml(&dst_url),
        out = abrq.p("out/file"),
    ));
    abrq.start().await;
    abrq.wait_status("s", "the slot made and read", |st| {
        !st["source"]["position"]["read_lsn"].is_null()
    })
    .await;
    let (code, body) = abrq
        .call(
            reqwest::Method::POST,
            "/v1/streams/file/backfill",
            None,
            &[],
        )
        .await;
    assert_eq!(code, 409, "{body}");

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|seed| {
            tokio::spawn(writer(
                src.clone(),
                table.clone(),
                total,
                stop.clone(),
                seed,
            ))
        })
        .collect();
    let (status, _, _) = abrq
        .cli(&[
            "backfill",
            "-s",
            "s",
            "--table",
            &format!("{schema}.items"),
            "--config",
            &abrq.p("abrq.toml"),
        ])
        .await;
    assert!(status.success());
    // killed in the middle: the backfill goes on after its last page
    let st = abrq
        .wait_status("s", "a third of the backfill staged", |st| {
            let rows = &st["source"]["position"]["backfill"]["rows"];
            rows.as_u64().unwrap_or(0) > total as u64 / 3
        })
        .await;
    abrq.note(&format!(
        "killed in the backfill: {}",
        st["source"]["position"]["backfill"]
    ));
    abrq.kill();
    abrq.start().await;
    abrq.wait_status("s", "the backfill done", |st| {
        let b = &st["source"]["position"]["backfill"];
        b["state"] == "idle" && b["asked"].as_u64() == Some(0)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut changes = 0;
    for w in writers {
        changes += w.await.unwrap();
    }
    abrq.note(&format!(
        "{changes} writer transactions during the backfill"
    ));
    assert!(changes > 0);
    let want = rows(&src, &table).await;
    let replica = format!("\"{dst_schema}\".items");
    wait_until(LONG, "the replica equals the source table", async || {
        rows(&dst, &replica).await.len() == want.len() && rows(&dst, &replica).await == want
    })
    .await;
    let st = abrq.status("s").await;
    assert_eq!(
        u(&dest_of(&st, "replica")["pending_dead_letters"]),
        0,
        "{st}"
    );
    abrq.kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
