//! The snapshot copy of the `postgres` cdc source cut short, through the
//! binary: a table of 100,000 rows is copied in pages of 500 while a writer
//! changes it, and abrq is SIGKILLed in the middle of the copy. The rest of
//! the copy goes on after its last staged page as a backfill (watermark
//! windows merged with the stream from the slot's start), which is
//! SIGKILLed twice in turn, and the `postgres` destination in upsert mode
//! ends equal to the source table.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use rand::Rng;

const ROWS: i64 = 100_000;

async fn rows(pool: &PgPool, table: &str) -> Vec<(i64, i32, String)> {
    sqlx::query_as(&format!(
        "SELECT id, version, name FROM {table} ORDER BY id"
    ))
    .fetch_all(pool)
    .await
    .unwrap_or_default()
}

/// Some inserts, updates and deletes, each its own transaction.
async fn write(src: &PgPool, table: &str, next_id: &mut i64) {
    let mut rng = rand::rng();
    for _ in 0..20 {
        match rng.random_range(0..3) {
            0 => {
                *next_id += 1;
                sqlx::query(&format!("INSERT INTO {table} VALUES ($1, 1, 'new')"))
                    .bind(*next_id)
                    .execute(src)
                    .await
                    .unwrap();
            }
            1 => {
                let id = rng.random_range(1..=ROWS);
                sqlx::query(&format!(
                    "UPDATE {table} SET version = version + 1, name = 'changed' WHERE id = $1"
                ))
                .bind(id)
                .execute(src)
                .await
                .unwrap();
            }
            _ => {
                let id = rng.random_range(1..=ROWS);
                sqlx::query(&format!("DELETE FROM {table} WHERE id = $1"))
                    .bind(id)
                    .execute(src)
                    .await
                    .unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_cut_short_goes_on_and_the_replica_ends_equal() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst_url = abrq_testkit::Postgres::from_env().url;
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    let n: u64 = rand::rng().random();
    let tag = format!("{:010x}", n & 0xff_ffff_ffff);
    let (schema, slot, dst_schema) = (
        format!("cdc_snap_{tag}"),
        format!("abrq_snap_{tag}"),
        format!("cdc_snapdst_{tag}"),
    );
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&src)
        .await
        .unwrap();
    let table = format!("\"{schema}\".items");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, version int NOT NULL, name text)"
    ))
    .execute(&src)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {table} SELECT g, 1, 'row ' || g FROM generate_series(1, {ROWS}) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
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
[streams.batch]
max_records = 500
max_wait = "50ms"

[[streams.destinations]]
name = "replica"
engine = "postgres"
{dst_conn}
schema = "{dst_schema}"
table = "items"
mode = "upsert"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        src_conn = pg::connection_toml(&pg::cdc_url()),
        dst_conn = pg::connection_toml(&dst_url),
    ));
    abrq.start().await;
    let mut next_id = ROWS;
    let mut staged = 0;
    for kill in 0..3 {
        write(&src, &table, &mut next_id).await;
        // a few more pages of the copy staged, the copy not done; by this
        // process (the one before may have staged past `staged` before it
        // was killed), so its source has reported where it is
        let st = abrq
            .wait_status("s", "more of the copy staged", |st| {
                u(&st["spool"]["last_seq"]) > staged + 2
                    && u(&st["source"]["staged_batches"]) > 0
                    && !st["source"]["position"].is_null()
            })
            .await;
        staged = u(&st["spool"]["last_seq"]);
        let p = &st["source"]["position"];
        let (copy, backfill) = (p["snapshot"]["state"].clone(), p["backfill"].clone());
        abrq.note(&format!(
            "kill {kill} at seq {staged}, copy {copy}, backfill {backfill}"
        ));
        // the first kill cuts the copy short; the rest of it is then read
        // as a backfill merged with the stream, cut short in turn
        match kill {
            0 => assert_eq!(copy, "copying", "the copy ended before kill 0: {st}"),
            _ => assert_eq!(
                backfill["state"], "running",
                "no backfill at kill {kill}: {st}"
            ),
        }
        abrq.kill();
        write(&src, &table, &mut next_id).await;
        abrq.start().await;
    }
    write(&src, &table, &mut next_id).await;
    abrq.wait_status("s", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
            && st["source"]["position"]["backfill"]["state"] == "idle"
    })
    .await;
    let want = rows(&src, &table).await;
    let replica = format!("\"{dst_schema}\".items");
    wait_until(LONG, "the replica equals the source table", async || {
        rows(&dst, &replica).await == want
    })
    .await;
    abrq.kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
