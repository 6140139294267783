//! The `mysql` cdc source's snapshot, through the binary: two tables with
//! rows from before the stream are copied (keyset pages in one consistent
//! snapshot whose binlog position streaming starts from) while a writer
//! changes them, abrq is SIGKILLed in the middle of the copy and the rest
//! is read as a backfill after its last staged page, and a `postgres` destination in upsert mode
//! ends with each table equal to its source.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use rand::Rng;

const ROWS: [(&str, i64); 2] = [("a", 10_000), ("b", 30_000)];

async fn write(src: &MySqlPool, tag: &str) {
    let mut rng = rand::rng();
    for _ in 0..20 {
        let (t, n) = ROWS[rng.random_range(0..2)];
        let id = rng.random_range(1..=n);
        let sql = match rng.random_range(0..3) {
            0 => format!("UPDATE `{t}_{tag}` SET v = v + 1, note = 'changed' WHERE id = {id}"),
            1 => format!("DELETE FROM `{t}_{tag}` WHERE id = {id}"),
            _ => format!(
                "INSERT INTO `{t}_{tag}` VALUES ({}, 1, 'new') ON DUPLICATE KEY UPDATE v = v + 1",
                n + rng.random_range(1..1000)
            ),
        };
        sqlx::query(&sql).execute(src).await.unwrap();
    }
}

async fn source(src: &MySqlPool, table: &str) -> Vec<(i64, i64, String)> {
    sqlx::query_as(&format!(
        "SELECT id, CAST(v AS SIGNED), note FROM {table} ORDER BY id"
    ))
    .fetch_all(src)
    .await
    .unwrap()
}

async fn replica(dst: &PgPool, table: &str) -> Vec<(i64, i64, String)> {
    sqlx::query_as(&format!(
        "SELECT id, v::int8, note FROM {table} ORDER BY id"
    ))
    .fetch_all(dst)
    .await
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_cut_short_goes_on_and_each_replica_table_ends_equal() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let dst_url = pg::url();
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    let tag = pg::tag();
    let dst_schema = format!("mysnap_dst_{tag}");
    for (t, n) in ROWS {
        for sql in [
            format!("CREATE TABLE `{t}_{tag}` (id bigint PRIMARY KEY, v int NOT NULL, note varchar(32) NOT NULL)"),
            format!(
                "INSERT INTO `{t}_{tag}` SELECT seq, 0, CONCAT('row ', seq) FROM seq_1_to_{n}"
            ),
        ] {
            sqlx::query(&sql).execute(&src).await.unwrap();
        }
    }
    sqlx::query(&format!("CREATE SCHEMA \"{dst_schema}\""))
        .execute(&dst)
        .await
        .unwrap();

    let mut abrq = Abrq::new();
    let url = reqwest::Url::parse(&mysqlcdc::url()).unwrap();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"

[[streams]]
name = "shop"
[streams.source]
engine = "mysql"
mode = "cdc"
host = "{host}"
port = {port}
database = "test"
username = "{user}"
tables = ["a_{tag}", "b_{tag}"]
[streams.batch]
max_records = 500
max_wait = "20ms"

[[streams.destinations]]
name = "replica"
engine = "postgres"
{dst_conn}
schema = "{dst_schema}"
table = "{{table}}"
mode = "upsert"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        host = url.host_str().unwrap(),
        port = url.port().unwrap_or(3306),
        user = url.username(),
        dst_conn = pg::connection_toml(&dst_url),
    ));
    abrq.start().await;
    write(&src, &tag).await;
    let st = abrq
        .wait_status("shop", "the copy in its second table", |st| {
            st["source"]["position"]["snapshot"]["table"] == format!("test.b_{tag}")
        })
        .await;
    abrq.note(&format!(
        "killed during the copy: {}",
        st["source"]["position"]
    ));
    abrq.kill();
    write(&src, &tag).await;
    abrq.start().await;
    // the rest of the copy is read as a backfill
    abrq.wait_status("shop", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
            && st["source"]["position"]["backfill"]["state"] == "idle"
    })
    .await;
    write(&src, &tag).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for (t, _) in ROWS {
        let want = source(&src, &format!("`{t}_{tag}`")).await;
        let table = format!("\"{dst_schema}\".\"{t}_{tag}\"");
        wait_until(LONG, "each replica table equals its source", async || {
            replica(&dst, &table).await == want
        })
        .await;
    }
    abrq.kill();
    for (t, _) in ROWS {
        sqlx::query(&format!("DROP TABLE `{t}_{tag}`"))
            .execute(&src)
            .await
            .unwrap();
    }
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
