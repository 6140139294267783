//! An unchanged TOAST value through the `postgres` cdc source: an update
//! that does not touch a large column sends it as "unchanged"; the record
//! leaves the field out (never null), and the `postgres` destination in
//! upsert mode keeps the column's value.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use rand::Rng;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn an_untouched_large_value_is_kept_never_nulled() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&abrq_testkit::Postgres::from_env().url)
        .await
        .expect("postgres");
    let n: u64 = rand::rng().random();
    let tag = format!("{:010x}", n & 0xff_ffff_ffff);
    let (schema, slot, dst_schema) = (
        format!("cdc_toast_{tag}"),
        format!("abrq_toast_{tag}"),
        format!("cdc_toastdst_{tag}"),
    );
    let table = format!("\"{schema}\".docs");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, n int, big text)"),
        // stored out of line, uncompressed: a TOAST value for sure
        format!("ALTER TABLE {table} ALTER COLUMN big SET STORAGE EXTERNAL"),
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
table = "{schema}.docs"
slot = "{slot}"
publication = "{slot}"
[streams.batch]
max_wait = "50ms"
[[streams.destinations]]
name = "replica"
engine = "postgres"
{dst_conn}
schema = "{dst_schema}"
table = "docs"
mode = "upsert"
[[streams.destinations]]
name = "history"
engine = "local"
database = "{history}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        src_conn = pg::connection_toml(&pg::cdc_url()),
        dst_conn = pg::connection_toml(&abrq_testkit::Postgres::from_env().url),
        history = abrq.p("out"),
    ));
    abrq.start().await;
    abrq.wait_status("s", "streaming", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    sqlx::query(&format!(
        "INSERT INTO {table} VALUES (1, 1, repeat('x', 100000))"
    ))
    .execute(&src)
    .await
    .unwrap();
    sqlx::query(&format!("UPDATE {table} SET n = 2 WHERE id = 1"))
        .execute(&src)
        .await
        .unwrap();
    let replica = format!("\"{dst_schema}\".docs");
    wait_until(LONG, "the update at the replica", async || {
        let row: Option<(i32, Option<i32>)> = sqlx::query_as(&format!(
            "SELECT n, length(big) FROM {replica} WHERE id = 1"
        ))
        .fetch_optional(&dst)
        .await
        .unwrap_or(None);
        row == Some((2, Some(100_000)))
    })
    .await;
    abrq.wait_drained("s", std::time::Duration::from_millis(500), LONG)
        .await;
    let out = read_dest(&abrq.path("out"));
    let update = out
        .records()
        .find(|r| r.get("n") == Some(&Value::from(2)))
        .expect("the update in the history");
    assert!(
        !update.contains_key("big"),
        "the untouched value is left out, not null: {update:?}"
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
