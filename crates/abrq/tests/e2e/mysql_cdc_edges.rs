//! MariaDB sources at the edges real databases have, through the binary,
//! checked by reading the source and the replica back through their own
//! clients:
//!
//! - `tables = ["db.*"]` as on PostgreSQL, with a `BINARY(16)` key (its
//!   copy pages exactly and ends), a table without a key (copied in its
//!   snapshot; updates and deletes find one equal row) and a key changed
//!   by an update (no old row left behind);
//! - a change read from a backlog after `ALTER TABLE ... ADD COLUMN ...
//!   AFTER`, with `binlog_row_metadata = FULL`: each value in its column;
//! - XA transactions: a committed one arrives whole, at its prepare's
//!   place in the stream, once its XA COMMIT is read (also when abrq is
//!   killed between its prepare and its commit); a rolled-back one never
//!   arrives;
//! - `log_bin_compress = ON`: compressed rows and query events (a DDL
//!   among them) delivered as the plain ones would be;
//! - two deployments with the same stream name on one server: each reads
//!   the binlog as its own replica (no ERROR 4052 loop), both get every
//!   change.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use serde_json::Value;
use sqlx::Row;

async fn exec(pool: &MySqlPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Every row as text, sorted: MariaDB's own rendering of each column.
async fn my_rows(pool: &MySqlPool, sql: &str) -> Vec<String> {
    let mut rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(pool).await.unwrap();
    rows.sort();
    rows
}

/// A number column whose width the server chooses.
fn number(row: &sqlx::mysql::MySqlRow, at: usize) -> u64 {
    row.try_get::<u64, _>(at)
        .or_else(|_| row.try_get::<i64, _>(at).map(|n| n as u64))
        .unwrap()
}

async fn pg_rows(pool: &PgPool, sql: &str) -> Vec<String> {
    let mut rows: Vec<String> = sqlx::query_scalar(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_default();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_with_binary_keys_keyless_tables_key_changes_and_backlog_ddl_replicates_equal() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (db, dst_schema) = (format!("edges_{tag}"), format!("myedges_dst_{tag}"));
    // changes carry their column names, kept so while this test runs
    let _metadata = mysqlcdc::ROW_METADATA.lock().await;
    exec(&src, "SET GLOBAL binlog_row_metadata = FULL").await;
    exec(&src, &format!("CREATE DATABASE `{db}`")).await;
    for sql in [
        format!("CREATE TABLE `{db}`.k (id int PRIMARY KEY, v varchar(20))"),
        format!("CREATE TABLE `{db}`.bin (id binary(16) PRIMARY KEY, n int)"),
        format!("CREATE TABLE `{db}`.nk (a int, b varchar(10))"),
        format!("INSERT INTO `{db}`.k SELECT seq, CONCAT('v', seq) FROM seq_1_to_20"),
        format!("INSERT INTO `{db}`.bin SELECT UNHEX(MD5(seq)), seq FROM seq_1_to_3000"),
        format!("INSERT INTO `{db}`.nk VALUES (1, 'x'), (1, 'x'), (2, NULL), (3, 'y')"),
    ] {
        exec(&src, &sql).await;
    }
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "edges",
            Source::mysql("cdc")
                .connection(&mysqlcdc::url())
                .tables(&[&format!("{db}.*")]),
        )
        .max_records(500)
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
    abrq.wait_status("edges", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    for sql in [
        format!("UPDATE `{db}`.k SET id = 100 WHERE id = 1"),
        format!("UPDATE `{db}`.k SET id = id + 1000, v = 'moved' WHERE id BETWEEN 5 AND 7"),
        format!("DELETE FROM `{db}`.k WHERE id = 3"),
        format!("UPDATE `{db}`.bin SET id = UNHEX(MD5('moved')) WHERE n = 10"),
        format!("DELETE FROM `{db}`.nk WHERE a = 1 LIMIT 1"),
        format!("UPDATE `{db}`.nk SET b = 'was null' WHERE a = 2"),
        format!("INSERT INTO `{db}`.nk VALUES (4, 'new')"),
    ] {
        exec(&src, &sql).await;
    }
    let checks = [
        (
            format!("SELECT CONCAT(id, '|', v) FROM `{db}`.k"),
            format!("SELECT id || '|' || v FROM \"{dst_schema}\".k"),
        ),
        (
            format!("SELECT CONCAT(LOWER(HEX(id)), '|', n) FROM `{db}`.bin"),
            format!("SELECT substr(id, 3) || '|' || n FROM \"{dst_schema}\".bin"),
        ),
        (
            format!("SELECT CONCAT(a, '|', COALESCE(b, '-')) FROM `{db}`.nk"),
            format!("SELECT a || '|' || COALESCE(b, '-') FROM \"{dst_schema}\".nk"),
        ),
    ];
    for (mine, theirs) in &checks {
        let want = my_rows(&src, mine).await;
        wait_until(LONG, "the replica equal to the source", async || {
            pg_rows(&dst, theirs).await == want
        })
        .await;
    }

    // a change in the backlog before a column was added in its middle
    abrq.kill();
    exec(
        &src,
        &format!("INSERT INTO `{db}`.k VALUES (500, 'before the alter')"),
    )
    .await;
    exec(
        &src,
        &format!("ALTER TABLE `{db}`.k ADD COLUMN c int AFTER id"),
    )
    .await;
    exec(
        &src,
        &format!("INSERT INTO `{db}`.k VALUES (501, 7, 'after the alter')"),
    )
    .await;
    abrq.start().await;
    let (mine, theirs) = (
        format!("SELECT CONCAT(id, '|', COALESCE(c, '-'), '|', v) FROM `{db}`.k"),
        format!("SELECT id || '|' || COALESCE(c::text, '-') || '|' || v FROM \"{dst_schema}\".k"),
    );
    let want = my_rows(&src, &mine).await;
    wait_until(LONG, "the backlog decoded by name", async || {
        pg_rows(&dst, &theirs).await == want
    })
    .await;
    let st = abrq.status("edges").await;
    assert_eq!(
        u(&dest_of(&st, "replica")["pending_dead_letters"]),
        0,
        "{st}"
    );
    abrq.kill();
    exec(&src, &format!("DROP DATABASE `{db}`")).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

/// Records delivered so far (an object's manifest may not be written yet).
fn xa_count(abrq: &Abrq) -> usize {
    read_dest(&abrq.path("out")).records().count()
}

/// The stream's changes as (id, op, v), in stream order.
fn xa_history(abrq: &Abrq) -> Vec<(i64, String, Option<i64>)> {
    // objects in seq order, each checked against its manifest

    let out = read_dest(&abrq.path("out"));
    out.verify_manifests("xa")
        .into_iter()
        .flat_map(|(_, key)| out.objects[&key].records.clone())
        .map(|r| {
            let op = op_of(&r).to_string();
            (r["id"].as_i64().expect("id"), op, r["v"].as_i64())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn xa_transactions_arrive_whole_when_committed_and_never_when_rolled_back() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let tag = pg::tag();
    let table = format!("xa_{tag}");
    exec(
        &src,
        &format!("CREATE TABLE `{table}` (id int PRIMARY KEY, v int NOT NULL)"),
    )
    .await;
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "xa",
            Source::mysql("cdc")
                .connection(&mysqlcdc::url())
                .database("test")
                .table(&table)
                .snapshot("never"),
        )
        .max_wait("20ms")
        .destination(
            Destination::local("out", abrq.p("out"))
                .format("jsonl")
                .manifest(),
        ),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("xa", "reading the binlog", |st| {
        st["source"]["position"]["binlog"].is_object()
    })
    .await;
    exec(&src, &format!("INSERT INTO `{table}` VALUES (1, 0)")).await;
    wait_until(LONG, "the plain row", async || xa_count(&abrq) == 1).await;

    // XA statements run on one session, which holds the prepared transaction
    let mut xa = src.acquire().await.unwrap();
    let mut run = async |sql: String| {
        sqlx::raw_sql(&sql)
            .execute(&mut *xa)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    };
    // committed, with another transaction between its prepare and commit
    run(format!("XA START 'c{tag}'")).await;
    run(format!("INSERT INTO `{table}` VALUES (2, 0)")).await;
    run(format!("UPDATE `{table}` SET v = 1 WHERE id = 1")).await;
    run(format!("XA END 'c{tag}'")).await;
    run(format!("XA PREPARE 'c{tag}'")).await;
    exec(&src, &format!("INSERT INTO `{table}` VALUES (3, 0)")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        xa_count(&abrq),
        1,
        "nothing after a prepare is delivered before it ends"
    );
    run(format!("XA COMMIT 'c{tag}'")).await;
    // rolled back, then a plain row
    run(format!("XA START 'r{tag}'")).await;
    run(format!("INSERT INTO `{table}` VALUES (4, 0)")).await;
    run(format!("XA END 'r{tag}'")).await;
    run(format!("XA PREPARE 'r{tag}'")).await;
    run(format!("XA ROLLBACK 'r{tag}'")).await;
    exec(&src, &format!("INSERT INTO `{table}` VALUES (5, 0)")).await;
    wait_until(LONG, "the committed XA and the plain rows", async || {
        xa_count(&abrq) >= 5
    })
    .await;
    // prepared, abrq killed while it waits for the end, then committed
    run(format!("XA START 'k{tag}'")).await;
    run(format!("INSERT INTO `{table}` VALUES (6, 0)")).await;
    run(format!("XA END 'k{tag}'")).await;
    run(format!("XA PREPARE 'k{tag}'")).await;
    exec(&src, &format!("INSERT INTO `{table}` VALUES (7, 0)")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    abrq.kill();
    abrq.start().await;
    run(format!("XA COMMIT 'k{tag}'")).await;
    exec(&src, &format!("INSERT INTO `{table}` VALUES (8, 0)")).await;
    wait_until(LONG, "every row", async || xa_count(&abrq) >= 8).await;
    let st = abrq.wait_drained("xa", Duration::from_secs(1), LONG).await;
    let c = |id: i64, op: &str, v: i64| (id, op.to_string(), Some(v));
    assert_eq!(
        xa_history(&abrq),
        vec![
            c(1, "insert", 0),
            c(2, "insert", 0),
            c(1, "update", 1),
            c(3, "insert", 0),
            c(5, "insert", 0),
            c(6, "insert", 0),
            c(7, "insert", 0),
            c(8, "insert", 0),
        ],
        "{st}"
    );
    assert_eq!(st["source"]["state"], "running", "{st}");
    abrq.kill();
    exec(&src, &format!("DROP TABLE `{table}`")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn compressed_binlog_events_are_inflated_and_delivered() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let table = format!("zip_{}", pg::tag());
    exec(
        &src,
        &format!("CREATE TABLE `{table}` (id int PRIMARY KEY, v text)"),
    )
    .await;
    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "zip",
            Source::mysql("cdc")
                .connection(&mysqlcdc::url())
                .database("test")
                .table(&table)
                .snapshot("never"),
        )
        .max_wait("20ms")
        .destination(
            Destination::local("out", abrq.p("out"))
                .format("jsonl")
                .manifest(),
        ),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    abrq.wait_status("zip", "reading the binlog", |st| {
        st["source"]["position"]["binlog"].is_object()
    })
    .await;
    // every other test's events are compressed too while this runs: each
    // reader must inflate them, which is the point
    exec(&src, "SET GLOBAL log_bin_compress_min_len = 10").await;
    exec(&src, "SET GLOBAL log_bin_compress = ON").await;
    let at = sqlx::query("SHOW MASTER STATUS")
        .fetch_one(&src)
        .await
        .unwrap();
    let (file, from): (String, u64) = (at.get(0), number(&at, 1));
    for sql in [
        format!("INSERT INTO `{table}` VALUES (1, REPEAT('a', 1000)), (2, REPEAT('b', 1000)), (3, 'short')"),
        format!("UPDATE `{table}` SET v = REPEAT('c', 1200) WHERE id = 1"),
        format!("DELETE FROM `{table}` WHERE id = 2"),
        format!("ALTER TABLE `{table}` ADD COLUMN n int AFTER id"),
        format!("INSERT INTO `{table}` VALUES (4, 44, REPEAT('d', 500))"),
    ] {
        exec(&src, &sql).await;
    }
    let written: Vec<String> = sqlx::query(&format!("SHOW BINLOG EVENTS IN '{file}' FROM {from}"))
        .fetch_all(&src)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("Event_type"))
        .collect();
    exec(&src, "SET GLOBAL log_bin_compress = OFF").await;
    for kind in [
        "Write_rows_compressed_v1",
        "Update_rows_compressed_v1",
        "Delete_rows_compressed_v1",
        "Query_compressed",
    ] {
        assert!(
            written.iter().any(|k| k == kind),
            "the server wrote no {kind}: {written:?}"
        );
    }

    wait_until(LONG, "the five changes", async || {
        read_dest(&abrq.path("out")).records().count() >= 6
    })
    .await;
    // an object is written before its manifest: read once both are
    abrq.wait_drained("zip", std::time::Duration::ZERO, LONG)
        .await;
    let out = read_dest(&abrq.path("out"));
    let (mut got, mut lengths) = (Vec::new(), Vec::new());
    for (_, key) in out.verify_manifests("zip") {
        for r in &out.objects[&key].records {
            let op = op_of(r);
            let v = r.get("v").and_then(Value::as_str).unwrap_or("-");
            let n = r.get("n").map_or("-".to_string(), Value::to_string);
            got.push(format!("{op} {} {} {n}", r["id"], &v[..v.len().min(6)]));
            lengths.push(v.len());
        }
    }
    let want = [
        "insert 1 aaaaaa -",
        "insert 2 bbbbbb -",
        "insert 3 short -",
        "update 1 cccccc -",
        "delete 2 - -",
        "insert 4 dddddd 44",
    ];
    assert_eq!(got, want);
    assert_eq!(lengths, [1000, 1000, 5, 1200, 1, 500], "values whole");
    let st = abrq.status("zip").await;
    assert_eq!(st["source"]["state"], "running", "{st}");
    abrq.kill();
    exec(&src, &format!("DROP TABLE `{table}`")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_deployments_with_one_stream_name_are_two_replicas() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let table = format!("twin_{}", pg::tag());
    exec(
        &src,
        &format!("CREATE TABLE `{table}` (id int PRIMARY KEY, v int)"),
    )
    .await;
    let mut deployments = Vec::new();
    for _ in 0..2 {
        let mut abrq = Abrq::new();
        let config = Config::new(&abrq).stream(
            Stream::new(
                "shop",
                Source::mysql("cdc")
                    .connection(&mysqlcdc::url())
                    .database("test")
                    .table(&table)
                    .snapshot("never"),
            )
            .max_wait("20ms")
            .destination(Destination::local("out", abrq.p("out")).format("jsonl")),
        );
        abrq.write_config(&config.to_string());
        abrq.start().await;
        abrq.wait_status("shop", "reading the binlog", |st| {
            st["source"]["position"]["binlog"].is_object()
        })
        .await;
        deployments.push(abrq);
    }
    for i in 0..5 {
        let values: Vec<String> = (0..10).map(|j| format!("({}, {j})", i * 10 + j)).collect();
        exec(
            &src,
            &format!("INSERT INTO `{table}` VALUES {}", values.join(", ")),
        )
        .await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let mut ids = Vec::new();
    for abrq in &deployments {
        wait_until(LONG, "all 50 rows in both deployments", async || {
            read_dest(&abrq.path("out")).records().count() >= 50
        })
        .await;
        let mut got: Vec<i64> = read_dest(&abrq.path("out"))
            .records()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        got.sort();
        assert_eq!(got, (0..50).collect::<Vec<_>>(), "each row once");
        let st = abrq.status("shop").await;
        assert_eq!(st["source"]["state"], "running", "{st}");
        assert_eq!(st["source"]["restarts"], 0, "{st}");
        assert!(!abrq.log().contains("4052"), "{}", abrq.log());
        ids.push(st["source"]["position"]["server_id"].clone());
    }
    assert_ne!(ids[0], ids[1], "one replica id for two deployments");
    for abrq in &deployments {
        abrq.kill();
    }
    exec(&src, &format!("DROP TABLE `{table}`")).await;
}
