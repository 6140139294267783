//! PostgreSQL sources at the edges real databases have, through the
//! binary, each checked by reading the source and the replica back
//! through PostgreSQL itself:
//!
//! - names: columns called like the generated queries' own aliases (`t`,
//!   `r`), SQL keywords, mixed case, quotes, dots, spaces and non-ASCII,
//!   through the copy, the stream and a cursor stream;
//! - a table rewritten (`ALTER COLUMN ... TYPE`) while another is copied
//!   waits for the copy instead of reading as empty under its snapshot;
//! - a publication whose name needs quoting (`MyPub`);
//! - streams whose names fold to one (`shop-a`, `shop_a`) get a slot each.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn count(pool: &PgPool, table: &str) -> Option<i64> {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .ok()
}

/// Every row as PostgreSQL prints it, in key order.
async fn rows(pool: &PgPool, table: &str, key: &str) -> Vec<String> {
    let sql = format!("SELECT t::text FROM {table} AS t ORDER BY {key}");
    sqlx::query_scalar(&sql)
        .fetch_all(pool)
        .await
        .unwrap_or_default()
}

const ODD: &str = "\"id\" int PRIMARY KEY, \"t\" text, \"r\" int, \"select\" text, \
    \"Mixed Case\" text, \"a.b\" text, \"q\"\"uote\" text, \"ünï\" text";

#[tokio::test(flavor = "multi_thread")]
async fn odd_names_pass_through_copy_stream_and_cursor() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, dst_schema, pub_name) = (
        format!("Cdc Names {tag}"),
        format!("cdc_namesdst_{tag}"),
        format!("MyPub{tag}"),
    );
    let slot = format!("abrq_names_{tag}");
    let table = format!("\"{schema}\".\"Odd Table\"");
    exec(&src, &format!("CREATE SCHEMA \"{schema}\"")).await;
    exec(&src, &format!("CREATE TABLE {table} ({ODD})")).await;
    exec(&src, &format!("ALTER TABLE {table} REPLICA IDENTITY FULL")).await;
    let insert = |from: i32, to: i32| {
        format!(
            "INSERT INTO {table} SELECT i, 't' || i, i, 'sel', 'MiX', 'a.b', 'q\"', 'ü' \
             FROM generate_series({from}, {to}) i"
        )
    };
    exec(&src, &insert(1, 50)).await;

    let mut abrq = Abrq::new();
    let source_table = format!("\"{schema}\".\"Odd Table\"");
    let config = Config::new(&abrq)
        .stream(
            Stream::new(
                "names",
                Source::postgres("cdc")
                    .connection(&pg::cdc_url())
                    .table(&source_table)
                    .slot(&slot)
                    .publication(&pub_name),
            )
            .max_wait("50ms")
            .destination(
                Destination::postgres("replica")
                    .connection(&pg::url())
                    .schema(&dst_schema)
                    .table("odd")
                    .mode("upsert"),
            ),
        )
        .stream(
            Stream::new(
                "polled",
                Source::postgres("cursor")
                    .connection(&pg::cdc_url())
                    .table(&source_table)
                    .cursor("r")
                    .poll_interval("100ms"),
            )
            .max_wait("50ms")
            .destination(
                Destination::postgres("polled")
                    .connection(&pg::url())
                    .schema(&dst_schema)
                    .table("polled")
                    .mode("upsert"),
            ),
        );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("names", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    exec(&src, &insert(51, 80)).await;
    exec(
        &src,
        &format!("UPDATE {table} SET \"t\" = 'changed', \"select\" = NULL WHERE id % 7 = 0"),
    )
    .await;
    exec(&src, &format!("DELETE FROM {table} WHERE id % 11 = 0")).await;

    let replica = format!("\"{dst_schema}\".odd");
    let polled = format!("\"{dst_schema}\".polled");
    let want = rows(&src, &table, "id").await;
    wait_until(LONG, "the replica equal to the source", async || {
        count(&dst, &replica).await == Some(want.len() as i64)
            && rows(&dst, &replica, "id").await == want
    })
    .await;
    // the cursor stream sees rows by "r" (deletes never): every row the
    // source holds, each as the source printed it when read
    let ids = |pool: PgPool, table: String| async move {
        let sql = format!("SELECT id FROM {table} ORDER BY id");
        sqlx::query_scalar::<_, i32>(&sql)
            .fetch_all(&pool)
            .await
            .unwrap_or_default()
    };
    let held = ids(src.clone(), table.clone()).await;
    wait_until(LONG, "the polled rows", async || {
        let got = ids(dst.clone(), polled.clone()).await;
        held.iter().all(|id| got.contains(id)) && got.contains(&80)
    })
    .await;
    let st = abrq.status("names").await;
    assert_eq!(
        st["source"]["position"]["publication"],
        pub_name.as_str(),
        "{st}"
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    exec(&src, &format!("DROP PUBLICATION IF EXISTS \"{pub_name}\"")).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_rewritten_during_the_copy_of_another_is_copied_whole() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("cdc_rewrite_{tag}"),
        format!("abrq_rewrite_{tag}"),
        format!("cdc_rewritedst_{tag}"),
    );
    exec(&src, &format!("CREATE SCHEMA \"{schema}\"")).await;
    for t in ["a_big", "b_small"] {
        exec(
            &src,
            &format!("CREATE TABLE \"{schema}\".{t} (id int PRIMARY KEY, n int, note text)"),
        )
        .await;
    }
    exec(
        &src,
        &format!(
            "INSERT INTO \"{schema}\".a_big SELECT i, i, repeat('x', 200) \
             FROM generate_series(1, 200000) i"
        ),
    )
    .await;
    exec(
        &src,
        &format!(
            "INSERT INTO \"{schema}\".b_small SELECT i, i, 'b' FROM generate_series(1, 1000) i"
        ),
    )
    .await;

    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "rewrite",
            Source::postgres("cdc")
                .connection(&pg::cdc_url())
                .tables(&[&format!("{schema}.*")])
                .slot(&slot)
                .publication(&slot),
        )
        .max_records(200)
        .max_wait("50ms")
        .destination(
            Destination::postgres("replica")
                .connection(&pg::url())
                .schema(&dst_schema)
                .table("{table}")
                .mode("upsert"),
        ),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("rewrite", "the copy of the first table under way", |st| {
        st["source"]["position"]["snapshot"]["state"] == "copying"
    })
    .await;
    // the rewrite waits for the copy's lock; without it, b_small would
    // read as empty under the copy's older snapshot
    let alter = {
        let src = src.clone();
        let sql = format!("ALTER TABLE \"{schema}\".b_small ALTER COLUMN n TYPE bigint");
        tokio::spawn(async move { exec(&src, &sql).await })
    };
    wait_until(LONG, "both tables copied", async || {
        count(&dst, &format!("\"{dst_schema}\".a_big")).await == Some(200_000)
            && count(&dst, &format!("\"{dst_schema}\".b_small")).await == Some(1000)
    })
    .await;
    alter.await.unwrap();
    exec(
        &src,
        &format!("INSERT INTO \"{schema}\".b_small VALUES (1001, 1001, 'after')"),
    )
    .await;
    wait_until(LONG, "a row after the rewrite", async || {
        count(&dst, &format!("\"{dst_schema}\".b_small")).await == Some(1001)
    })
    .await;
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_whose_names_fold_to_one_get_a_slot_each() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let schema = format!("cdc_fold_{tag}");
    exec(&src, &format!("CREATE SCHEMA \"{schema}\"")).await;
    for t in ["one", "two"] {
        exec(
            &src,
            &format!("CREATE TABLE \"{schema}\".{t} (id int PRIMARY KEY)"),
        )
        .await;
    }
    let (a, b) = (format!("shop-{tag}"), format!("shop_{tag}"));
    let mut abrq = Abrq::new();
    let stream = |name: &str, table: &str, out: &str| {
        Stream::new(
            name,
            Source::postgres("cdc")
                .connection(&pg::cdc_url())
                .table(&format!("{schema}.{table}")),
        )
        .max_wait("50ms")
        .destination(Destination::local("out", abrq.p(out)).format("jsonl"))
    };
    let config = Config::new(&abrq)
        .stream(stream(&a, "one", "a"))
        .stream(stream(&b, "two", "b"));
    abrq.write_config(&config.to_string());
    abrq.start().await;
    for name in [&a, &b] {
        abrq.wait_status(name, "streaming", |st| st["source"]["state"] == "running")
            .await;
    }
    exec(
        &src,
        &format!("INSERT INTO \"{schema}\".one SELECT generate_series(1, 10)"),
    )
    .await;
    exec(
        &src,
        &format!("INSERT INTO \"{schema}\".two SELECT generate_series(1, 20)"),
    )
    .await;
    wait_until(LONG, "each stream's own rows", async || {
        read_dest(&abrq.path("a")).records().count() == 10
            && read_dest(&abrq.path("b")).records().count() == 20
    })
    .await;
    let slots = |st: serde_json::Value| st["source"]["position"]["slot"].as_str().map(String::from);
    let (sa, sb) = (slots(abrq.status(&a).await), slots(abrq.status(&b).await));
    assert_ne!(sa, sb, "one slot for two streams");
    abrq.kill();
    for slot in [sa.unwrap(), sb.unwrap()] {
        pg::drop_cdc(&src, &slot, &[]).await;
    }
    pg::drop_schemas(&src, &[&schema]).await;
}

/// A whole schema with a keyed table and a table without a key
/// (`REPLICA IDENTITY FULL`), copied and streamed into a schema that does
/// not exist yet: the keyless table never blocks the other; a key
/// changed by an update leaves no old row behind; a keyless update or
/// delete touches one equal row, as PostgreSQL's own subscriber does.
#[tokio::test(flavor = "multi_thread")]
async fn keyless_tables_and_key_changes_replicate_equal() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("cdc_keyless_{tag}"),
        format!("abrq_keyless_{tag}"),
        format!("cdc_keylessdst_{tag}"),
    );
    let (keyed, bare) = (format!("\"{schema}\".keyed"), format!("\"{schema}\".bare"));
    exec(&src, &format!("CREATE SCHEMA \"{schema}\"")).await;
    exec(
        &src,
        &format!("CREATE TABLE {keyed} (id int PRIMARY KEY, v text)"),
    )
    .await;
    exec(&src, &format!("CREATE TABLE {bare} (a int, b text)")).await;
    exec(&src, &format!("ALTER TABLE {bare} REPLICA IDENTITY FULL")).await;
    exec(
        &src,
        &format!("INSERT INTO {keyed} SELECT i, 'v' || i FROM generate_series(1, 20) i"),
    )
    .await;
    // two equal rows, and a row with a null
    exec(
        &src,
        &format!("INSERT INTO {bare} VALUES (1, 'x'), (1, 'x'), (2, NULL), (3, 'y')"),
    )
    .await;

    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "keyless",
            Source::postgres("cdc")
                .connection(&pg::cdc_url())
                .tables(&[&format!("{schema}.*")])
                .slot(&slot)
                .publication(&slot),
        )
        .max_wait("50ms")
        .destination(
            Destination::postgres("replica")
                .connection(&pg::url())
                .schema(&dst_schema)
                .table("{table}")
                .mode("upsert"),
        )
        .destination(Destination::local("history", abrq.p("out")).format("jsonl")),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("keyless", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    for sql in [
        format!("UPDATE {keyed} SET id = 100 WHERE id = 1"),
        format!("UPDATE {keyed} SET id = id + 1000, v = 'moved' WHERE id BETWEEN 5 AND 7"),
        format!("UPDATE {keyed} SET v = 'same key' WHERE id = 2"),
        format!("DELETE FROM {keyed} WHERE id = 3"),
        // one of two equal rows goes; the row with a null is found
        format!("DELETE FROM {bare} WHERE ctid = (SELECT min(ctid) FROM {bare} WHERE a = 1)"),
        format!("UPDATE {bare} SET b = 'was null' WHERE a = 2"),
        format!("UPDATE {bare} SET a = 30 WHERE a = 3"),
        format!("INSERT INTO {bare} VALUES (4, 'new'), (4, 'new')"),
    ] {
        exec(&src, &sql).await;
    }
    let sorted = |table: String, pool: PgPool| async move {
        let mut rows = rows(&pool, &table, "t::text").await;
        rows.sort();
        rows
    };
    for t in ["keyed", "bare"] {
        let want = sorted(format!("\"{schema}\".{t}"), src.clone()).await;
        let replica = format!("\"{dst_schema}\".{t}");
        wait_until(LONG, "the replica equal to the source", async || {
            sorted(replica.clone(), dst.clone()).await == want
        })
        .await;
    }
    // consumers of the history see the key change as a delete and an insert
    let out = read_dest(&abrq.path("out"));
    let op_of = |id: i64, op: &str| {
        out.records().any(|r| {
            let table = r.get("_abrq_table").and_then(|t| t.as_str());
            let got = r
                .get("_abrq_op")
                .and_then(|o| o.as_str())
                .unwrap_or("insert");
            r.get("id").and_then(|i| i.as_i64()) == Some(id)
                && got == op
                && table.is_some_and(|t| t.ends_with("keyed"))
        })
    };
    assert!(
        op_of(1, "delete") && op_of(100, "insert"),
        "no delete and insert for the new key"
    );
    let st = abrq.status("keyless").await;
    assert_eq!(
        u(&dest_of(&st, "replica")["pending_dead_letters"]),
        0,
        "{st}"
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
