//! A jsonb value nested far deeper than a JSON parser's usual limit (128)
//! is a value PostgreSQL accepts, so abrq stages and delivers it
//! unchanged: through the initial copy, through the stream in one
//! transaction with ordinary rows (which must not go down with it), and
//! through a cursor stream. The oracle reads the source and the replica
//! back through PostgreSQL itself and compares every value.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

/// jsonb nested `depth` levels: arrays around an object.
fn deep(depth: usize) -> String {
    format!(
        "{}{{\"leaf\": {depth}}}{}",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn values_of_any_depth_arrive_unchanged_and_alone() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("cdc_deep_{tag}"),
        format!("abrq_deep_{tag}"),
        format!("cdc_deepdst_{tag}"),
    );
    let table = format!("\"{schema}\".docs");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id int PRIMARY KEY, doc jsonb)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    sqlx::query(&format!("CREATE SCHEMA \"{dst_schema}\""))
        .execute(&dst)
        .await
        .unwrap();
    let insert_sql = format!("INSERT INTO {table} VALUES ($1, $2::jsonb)");
    let insert = |id: i32, doc: String| sqlx::query(&insert_sql).bind(id).bind(doc);
    // copied: ordinary rows beside 127, 200 and 10,000 levels
    for (id, doc) in [
        (1, "{\"a\": 1}".to_string()),
        (2, deep(127)),
        (3, deep(200)),
        (4, deep(10_000)),
    ] {
        insert(id, doc).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq)
        .stream(
            Stream::new(
                "s",
                Source::postgres("cdc")
                    .connection(&pg::cdc_url())
                    .table(&format!("{schema}.docs"))
                    .slot(&slot)
                    .publication(&slot),
            )
            .max_wait("50ms")
            .destination(
                Destination::postgres("replica")
                    .connection(&pg::url())
                    .schema(&dst_schema)
                    .table("docs")
                    .mode("upsert"),
            )
            .destination(Destination::local("history", abrq.p("out")).format("jsonl")),
        )
        .stream(
            Stream::new(
                "polled",
                Source::postgres("cursor")
                    .connection(&pg::cdc_url())
                    .table(&format!("{schema}.docs"))
                    .cursor("id")
                    .poll_interval("100ms"),
            )
            .max_wait("50ms")
            .destination(Destination::local("polled", abrq.p("polled")).format("jsonl")),
        );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("s", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    // streamed: one transaction with three ordinary rows and a deep one
    let mut tx = src.begin().await.unwrap();
    for (id, doc) in [
        (10, "{\"b\": [1, 2]}".to_string()),
        (11, deep(10_000)),
        (12, "{\"c\": null}".to_string()),
        (13, "[]".to_string()),
    ] {
        insert(id, doc).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();

    let replica = format!("\"{dst_schema}\".docs");
    wait_until(LONG, "every row at the replica", async || {
        let n: Option<i64> = sqlx::query_scalar(&format!("SELECT count(*) FROM {replica}"))
            .fetch_one(&dst)
            .await
            .ok();
        n == Some(8)
    })
    .await;
    // the oracle: each value as PostgreSQL itself prints it, both sides
    let read = |pool: &PgPool, table: &str| {
        let sql = format!("SELECT id, doc::text FROM {table} ORDER BY id");
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i32, String)>(&sql)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    let (want, got) = (read(&src, &table).await, read(&dst, &replica).await);
    assert_eq!(want.len(), 8);
    for ((id, a), (id2, b)) in want.iter().zip(&got) {
        assert_eq!(id, id2);
        assert!(a == b, "row {id}: the replica's value differs");
    }
    abrq.wait_drained("s", std::time::Duration::from_millis(500), LONG)
        .await;
    let st = abrq.status("s").await;
    for d in ["replica", "history"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    // records this deep are read back (and freed) on a thread with room
    let count_records = |dir: std::path::PathBuf| {
        std::thread::Builder::new()
            .stack_size(256 << 20)
            .spawn(move || read_dest(&dir).records().count())
            .unwrap()
            .join()
            .unwrap()
    };
    assert_eq!(count_records(abrq.path("out")), 8);
    wait_until(LONG, "the polled rows delivered", async || {
        count_records(abrq.path("polled")) == 8
    })
    .await;
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
