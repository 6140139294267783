//! One `postgres` cdc stream of every table of a schema (`tables =
//! ["s.*"]`), through the binary: two tables with rows before the slot
//! (copied one after the other from the slot's snapshot, abrq killed in
//! the middle of the copy), then inserts, updates and deletes in both, an
//! `ALTER TABLE ... ADD COLUMN`, one `TRUNCATE` of both tables and new rows
//! after it. Each record says its table, and
//!
//! - a `postgres` destination with `table = "{table}"` ends with each
//!   source table equal to the table of the same name;
//! - a `local` destination's records carry `_abrq_table`;
//! - a `kafka` destination with `{table}` in its topic writes each table's
//!   records to that table's topic, with an `abrq_table` header's worth of
//!   routing and no message in the wrong topic.

use std::collections::BTreeSet;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use serde_json::Value;

const ORDERS: i64 = 30_000;
const LINES: i64 = 4_000;

async fn rows(pool: &PgPool, table: &str) -> Vec<(i64, i64, String)> {
    sqlx::query_as(&format!("SELECT id, n, note FROM {table} ORDER BY id"))
        .fetch_all(pool)
        .await
        .unwrap_or_default()
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn every_table_of_a_schema_reaches_its_own_table_and_topic() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst_url = pg::url();
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    let brokers = abrq_testkit::Kafka::from_env().brokers;
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("cdc_tabs_{tag}"),
        format!("abrq_tabs_{tag}"),
        format!("cdc_tabsdst_{tag}"),
    );
    let prefix = format!("cdc-tabs-{tag}");
    for table in ["orders", "lines"] {
        sinks::create_named_topic(&brokers, &format!("{prefix}.{table}"), 2).await;
    }
    exec(&src, &format!("CREATE SCHEMA \"{schema}\"")).await;
    for (table, n) in [("orders", ORDERS), ("lines", LINES)] {
        let t = format!("\"{schema}\".{table}");
        exec(
            &src,
            &format!("CREATE TABLE {t} (id bigint PRIMARY KEY, n bigint NOT NULL, note text)"),
        )
        .await;
        exec(
            &src,
            &format!("INSERT INTO {t} SELECT g, g * 10, '{table} ' || g FROM generate_series(1, {n}) AS g"),
        )
        .await;
    }
    exec(&dst, &format!("CREATE SCHEMA \"{dst_schema}\"")).await;

    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"

[[streams]]
name = "shop"
[streams.source]
engine = "postgres"
mode = "cdc"
{src_conn}
tables = ["{schema}.*"]
slot = "{slot}"
publication = "{slot}"
[streams.batch]
max_records = 250
max_wait = "50ms"

[[streams.destinations]]
name = "replica"
engine = "postgres"
{dst_conn}
schema = "{dst_schema}"
table = "{{table}}"
mode = "upsert"

[[streams.destinations]]
name = "history"
engine = "local"
database = "{history}"
format = "jsonl"

[[streams.destinations]]
name = "topics"
engine = "kafka"
host = "{brokers}"
database = "{prefix}.{{table}}"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        src_conn = pg::connection_toml(&pg::cdc_url()),
        dst_conn = pg::connection_toml(&dst_url),
        history = abrq.p("out/history"),
    ));
    abrq.start().await;
    // killed while the copy is in its second table: it goes on there
    let st = abrq
        .wait_status("shop", "the copy in its second table", |st| {
            st["source"]["position"]["snapshot"]["table"] == format!("{schema}.orders")
        })
        .await;
    abrq.note(&format!(
        "killed during the copy: {}",
        st["source"]["position"]
    ));
    abrq.kill();
    abrq.start().await;
    abrq.wait_status("shop", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;

    let (orders, lines) = (
        format!("\"{schema}\".orders"),
        format!("\"{schema}\".lines"),
    );
    exec(
        &src,
        &format!("UPDATE {orders} SET n = n + 1 WHERE id % 7 = 0"),
    )
    .await;
    exec(&src, &format!("DELETE FROM {lines} WHERE id % 5 = 0")).await;
    exec(&src, &format!("ALTER TABLE {lines} ADD COLUMN extra text")).await;
    exec(
        &src,
        &format!("INSERT INTO {lines} SELECT g, g, 'late', 'x' FROM generate_series({LINES} + 1, {LINES} + 50) AS g"),
    )
    .await;
    // one statement empties both; the rows after it are all that remain
    exec(&src, &format!("TRUNCATE {orders}, {lines}")).await;
    exec(
        &src,
        &format!("INSERT INTO {orders} SELECT g, g, 'after' FROM generate_series(1, 40) AS g"),
    )
    .await;
    exec(
        &src,
        &format!("INSERT INTO {lines} SELECT g, g, 'after', 'y' FROM generate_series(1, 60) AS g"),
    )
    .await;

    for table in ["orders", "lines"] {
        let want = rows(&src, &format!("\"{schema}\".{table}")).await;
        assert_eq!(want.len(), if table == "orders" { 40 } else { 60 });
        let replica = format!("\"{dst_schema}\".{table}");
        wait_until(
            LONG,
            "each replica table equals its source table",
            async || rows(&dst, &replica).await == want,
        )
        .await;
    }
    let extra: Vec<Option<String>> = sqlx::query_scalar(&format!(
        "SELECT extra FROM \"{dst_schema}\".lines ORDER BY id"
    ))
    .fetch_all(&dst)
    .await
    .expect("the added column reached the replica");
    assert!(extra.iter().all(|e| e.as_deref() == Some("y")), "{extra:?}");

    let st = abrq
        .wait_drained("shop", std::time::Duration::from_secs(1), LONG)
        .await;
    for d in ["replica", "history", "topics"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    // the truncate reached the object and Kafka destinations as counted
    // instructions, not as rows
    let history = read_dest(&abrq.path("out/history"));
    let mut tables: BTreeSet<String> = BTreeSet::new();
    for r in history.records() {
        match r.get("_abrq_table") {
            Some(Value::String(t)) => tables.insert(t.clone()),
            other => panic!("a record without its table ({other:?}): {r:?}"),
        };
    }
    let want: BTreeSet<String> = [format!("{schema}.lines"), format!("{schema}.orders")].into();
    assert_eq!(tables, want);
    let copied_lines = history
        .records()
        .filter(|r| r["_abrq_table"] == format!("{schema}.lines"))
        .filter(|r| {
            r.get("note")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with("lines "))
        })
        .map(|r| r["id"].as_i64().unwrap())
        .collect::<BTreeSet<_>>();
    assert_eq!(copied_lines.len() as i64, LINES, "every copied line");

    for table in ["orders", "lines"] {
        let topic = format!("{prefix}.{table}");
        let messages = sinks::kafka(&brokers, &topic).await;
        let ids: BTreeSet<i64> = messages
            .iter()
            .filter(|m| m.value.get("note").is_some_and(|n| n == "after"))
            .map(|m| m.value["id"].as_i64().unwrap())
            .collect();
        let n = if table == "orders" { 40 } else { 60 };
        assert_eq!(ids, (1..=n).collect(), "{topic}");
        let wrong = messages
            .iter()
            .filter(|m| {
                m.value
                    .get("note")
                    .and_then(Value::as_str)
                    .is_some_and(|note| {
                        note.starts_with(if table == "orders" { "lines" } else { "orders" })
                    })
            })
            .count();
        assert_eq!(wrong, 0, "{topic} holds another table's rows");
    }
    abrq.kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
