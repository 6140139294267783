//! DDL inside a backlog and between a transaction's batches, for both
//! change sources: abrq is stopped while the table gains, renames, drops
//! and retypes columns among its changes (PostgreSQL also inside one
//! transaction that spans many batches), then started and SIGKILLed
//! while it reads the backlog. Every change arrives in the JSON lines
//! history decoded with the columns it was written with, once, in
//! order: the test knows each committed row and compares them all.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};

/// A statement and the changes it commits: (op, the row's fields).
struct Step {
    sql: String,
    changes: Vec<(&'static str, Value)>,
}

fn step(sql: &str, changes: Vec<(&'static str, Value)>) -> Step {
    Step {
        sql: sql.to_string(),
        changes,
    }
}

/// The script both engines run; `alter_type` is each engine's way to
/// widen `c`. `{t}` is the table.
fn script(alter_type: &str, add_after: &str) -> Vec<Step> {
    vec![
        step(
            "INSERT INTO {t} (id, a, b) VALUES (1, 'a1', 10)",
            vec![("insert", json!({"id": 1, "a": "a1", "b": 10}))],
        ),
        step(
            &format!("ALTER TABLE {{t}} ADD COLUMN c int{add_after}"),
            vec![],
        ),
        step(
            "INSERT INTO {t} (id, a, b, c) VALUES (2, 'a2', 20, 7)",
            vec![("insert", json!({"id": 2, "a": "a2", "b": 20, "c": 7}))],
        ),
        step("ALTER TABLE {t} RENAME COLUMN a TO a_new", vec![]),
        step(
            "UPDATE {t} SET b = 11 WHERE id = 1",
            vec![(
                "update",
                json!({"id": 1, "a_new": "a1", "b": 11, "c": null}),
            )],
        ),
        step("ALTER TABLE {t} DROP COLUMN b", vec![]),
        step(
            "INSERT INTO {t} (id, a_new, c) VALUES (3, 'a3', 8)",
            vec![("insert", json!({"id": 3, "a_new": "a3", "c": 8}))],
        ),
        step(alter_type, vec![]),
        step(
            "INSERT INTO {t} (id, a_new, c) VALUES (4, 'a4', 9000000000)",
            vec![(
                "insert",
                json!({"id": 4, "a_new": "a4", "c": 9000000000_i64}),
            )],
        ),
        step(
            "DELETE FROM {t} WHERE id = 3",
            vec![("delete", json!({"id": 3, "a_new": "a3", "c": 8}))],
        ),
    ]
}

/// Rows 100.. in two transactions of `n` with a column added between
/// (one transaction where the engine allows DDL inside one).
fn batches_across_ddl(n: i64) -> (Vec<String>, Vec<(&'static str, Value)>) {
    let first: Vec<String> = (100..100 + n)
        .map(|i| format!("({i}, 'x{i}', {i})"))
        .collect();
    let second: Vec<String> = (100 + n..100 + 2 * n)
        .map(|i| format!("({i}, 'y{i}', {i}, 'd{i}')"))
        .collect();
    let sql = vec![
        format!(
            "INSERT INTO {{t}} (id, a_new, c) VALUES {}",
            first.join(", ")
        ),
        "ALTER TABLE {t} ADD COLUMN d text".to_string(),
        format!(
            "INSERT INTO {{t}} (id, a_new, c, d) VALUES {}",
            second.join(", ")
        ),
    ];
    let mut changes = Vec::new();
    for i in 100..100 + n {
        changes.push(("insert", json!({"id": i, "a_new": format!("x{i}"), "c": i})));
    }
    for i in 100 + n..100 + 2 * n {
        changes.push((
            "insert",
            json!({"id": i, "a_new": format!("y{i}"), "c": i, "d": format!("d{i}")}),
        ));
    }
    (sql, changes)
}

/// The history's changes in seq order, without abrq's own fields.
fn history(abrq: &Abrq) -> Vec<(String, Value)> {
    let out = read_dest(&abrq.path("out"));
    let mut got = Vec::new();
    for (_, key) in out.verify_manifests("ddl") {
        for r in &out.objects[&key].records {
            let op = op_of(r).to_string();
            let fields: Map<String, Value> = r
                .iter()
                .filter(|(k, _)| !k.starts_with("_abrq"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            got.push((op, Value::Object(fields)));
        }
    }
    got
}

/// `stream` from `source` into a JSON lines history with manifests, in
/// batches of `max_records` (else the default).
fn config(abrq: &Abrq, stream: &str, source: Source, max_records: Option<i64>) -> String {
    let stream = Stream::new(stream, source).max_wait("20ms");
    let stream = match max_records {
        Some(n) => stream.max_records(n),
        None => stream,
    };
    Config::new(abrq)
        .stream(
            stream.destination(
                Destination::local("out", abrq.p("out"))
                    .format("jsonl")
                    .manifest(),
            ),
        )
        .to_string()
}

/// Waits for `total` records in the history, then for every staged batch
/// delivered (an object is written before its manifest).
async fn wait_delivered(abrq: &Abrq, stream: &str, total: usize) {
    wait_until(LONG, "every change in the history", async || {
        read_dest(&abrq.path("out")).records().count() >= total
    })
    .await;
    abrq.wait_drained(stream, Duration::ZERO, LONG).await;
}

/// The history of a copy of `rows` rows (`id`, `a` = "a{id}") during
/// which a column `n` was added, then a row inserted and row 1 updated.
fn assert_copied_then_changed(got: &[(String, Value)], rows: i64) {
    assert_eq!(
        got.len(),
        rows as usize + 2,
        "each copied row and change once"
    );
    for (i, (op, fields)) in got.iter().take(rows as usize).enumerate() {
        let id = i as i64 + 1;
        assert_eq!(
            (op.as_str(), fields),
            ("insert", &json!({"id": id, "a": format!("a{id}")})),
            "copied row {id}"
        );
    }
    assert_eq!(
        got[rows as usize..].to_vec(),
        vec![
            (
                "insert".to_string(),
                json!({"id": rows + 1, "a": "late", "n": 7})
            ),
            ("update".to_string(), json!({"id": 1, "a": "a1", "n": 1})),
        ],
        "the changes after the DDL, with its column"
    );
}

/// Starts abrq on the backlog, SIGKILLs it once a few batches are
/// staged, starts it again, and waits for `total` changes delivered.
async fn read_backlog_through_a_kill(abrq: &mut Abrq, total: usize) {
    abrq.start().await;
    // the status is shown if this times out: the source's state says why
    abrq.wait_status("ddl", "a few batches of the backlog staged", |st| {
        u(&st["spool"]["last_seq"]) >= 3
    })
    .await;
    abrq.kill();
    abrq.start().await;
    wait_delivered(abrq, "ddl", total).await;
    let st = abrq.status("ddl").await;
    assert_eq!(st["source"]["state"], "running", "{st}");
}

/// A delete is compared by its key: PostgreSQL under `REPLICA IDENTITY
/// FULL` sends the whole old row, MariaDB's delete record is the key.
fn key_of_delete((op, v): (String, Value)) -> (String, Value) {
    match op.as_str() {
        "delete" => (op, json!({"id": v["id"]})),
        _ => (op, v),
    }
}

fn assert_history(got: &[(String, Value)], want: &[(&'static str, Value)]) {
    let got: Vec<(String, Value)> = got.iter().cloned().map(key_of_delete).collect();
    let want: Vec<(String, Value)> = want
        .iter()
        .map(|(op, v)| key_of_delete((op.to_string(), v.clone())))
        .collect();
    assert_eq!(got.len(), want.len(), "changes delivered vs committed");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "change #{i}: delivered (left) vs committed (right)");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_ddl_in_a_backlog_and_inside_a_transaction() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("ddl_{tag}"), format!("abrq_ddl_{tag}"));
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, a text, b int)"),
        // deletes carry the whole old row, as the expected changes say
        format!("ALTER TABLE {table} REPLICA IDENTITY FULL"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot)
        .snapshot("never");
    abrq.write_config(&config(&abrq, "ddl", source, Some(7)));
    abrq.start().await;
    abrq.wait_status("ddl", "the slot made", |st| {
        !st["source"]["position"]["read_lsn"].is_null()
    })
    .await;
    abrq.kill();

    let mut want = Vec::new();
    for s in script("ALTER TABLE {t} ALTER COLUMN c TYPE bigint", "") {
        sqlx::query(&s.sql.replace("{t}", &table))
            .execute(&src)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", s.sql));
        want.extend(s.changes);
    }
    // one transaction of many batches with the DDL in its middle
    let (sqls, changes) = batches_across_ddl(40);
    let mut tx = src.begin().await.unwrap();
    for sql in sqls {
        sqlx::query(&sql.replace("{t}", &table))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    want.extend(changes);

    read_backlog_through_a_kill(&mut abrq, want.len()).await;
    assert_history(&history(&abrq), &want);
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_ddl_in_a_backlog() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    // changes carry their column names, kept so while this test runs
    let _metadata = mysqlcdc::ROW_METADATA.lock().await;
    sqlx::query("SET GLOBAL binlog_row_metadata = FULL")
        .execute(&src)
        .await
        .unwrap();
    let table = format!("`ddl_{}`", pg::tag());
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, a text, b int)"
    ))
    .execute(&src)
    .await
    .unwrap();
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .database("test")
        .table(table.trim_matches('`'))
        .snapshot("never");
    abrq.write_config(&config(&abrq, "ddl", source, Some(7)));
    abrq.start().await;
    abrq.wait_status("ddl", "reading the binlog", |st| {
        st["source"]["position"]["binlog"].is_object()
    })
    .await;
    abrq.kill();

    let mut want = Vec::new();
    // MariaDB commits before and after DDL: the rows around the added
    // column are two transactions
    let steps = script("ALTER TABLE {t} MODIFY c bigint", " AFTER id");
    let (sqls, changes) = batches_across_ddl(40);
    for s in steps {
        sqlx::query(&s.sql.replace("{t}", &table))
            .execute(&src)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", s.sql));
        want.extend(s.changes);
    }
    for sql in sqls {
        sqlx::query(&sql.replace("{t}", &table))
            .execute(&src)
            .await
            .unwrap();
    }
    want.extend(changes);

    read_backlog_through_a_kill(&mut abrq, want.len()).await;
    assert_history(&history(&abrq), &want);
    abrq.kill();
    let _ = sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&src)
        .await;
}

/// Without column names in the binlog (`binlog_row_metadata` not FULL),
/// a backlog in which a captured table is altered after changes of it
/// (a column dropped and another added: the count stays) is refused by
/// name before anything of it is staged, instead of matching those
/// changes to the new columns by position.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_backlog_altered_after_its_changes_is_refused_without_column_names() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let metadata = mysqlcdc::ROW_METADATA.lock().await;
    let name = format!("ddlnames_{}", pg::tag());
    let table = format!("`{name}`");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, a text, b int)"
    ))
    .execute(&src)
    .await
    .unwrap();
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .database("test")
        .table(&name)
        .snapshot("never");
    abrq.write_config(&config(&abrq, "ddl", source, None));
    abrq.start().await;
    abrq.wait_status("ddl", "reading the binlog", |st| {
        st["source"]["position"]["binlog"].is_object()
    })
    .await;
    sqlx::query(&format!("INSERT INTO {table} VALUES (1, 'one', 1)"))
        .execute(&src)
        .await
        .unwrap();
    wait_delivered(&abrq, "ddl", 1).await;
    abrq.kill();
    let set = |v: &str| format!("SET GLOBAL binlog_row_metadata = {v}");
    for sql in [
        set("MINIMAL"),
        format!("INSERT INTO {table} VALUES (2, 'two', 2)"),
        format!("ALTER TABLE {table} DROP COLUMN a, ADD COLUMN c text"),
        format!("INSERT INTO {table} VALUES (3, 3, 'three')"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    // not ready: its source stops at once
    abrq.start_live().await;
    let st = abrq
        .wait_status("ddl", "the source stopped on the backlog", |st| {
            st["source"]["state"] == "stopped"
        })
        .await;
    sqlx::query(&set("FULL")).execute(&src).await.unwrap();
    drop(metadata);
    let error = st["source"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("test.{name} was altered"))
            && error.contains("binlog_row_metadata"),
        "{st}"
    );
    assert_eq!(history(&abrq).len(), 1, "nothing of the backlog staged");
    abrq.kill();
    let _ = sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&src)
        .await;
}

/// One stream from `source` into a postgres upsert replica table per
/// source table (`{table}`) in `dst_schema`, started, its copy done.
async fn start_with_table_replicas(abrq: &mut Abrq, source: Source, dst_schema: &str) {
    let replica = Destination::postgres("replica")
        .connection(&pg::url())
        .schema(dst_schema)
        .table("{table}")
        .mode("upsert");
    let stream = Stream::new("ddl", source).max_wait("20ms");
    let text = Config::new(abrq)
        .stream(stream.destination(replica))
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("ddl", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
}

/// `id=v` of every row, as PostgreSQL prints them.
async fn pg_rows(pool: &PgPool, table: &str) -> Vec<String> {
    sqlx::query_scalar(&format!("SELECT t::text FROM {table} AS t ORDER BY id"))
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{table}: {e}"))
}

/// A captured table dropped and created again, and a table created in a
/// captured schema, while the stream runs: the publication lacks both
/// (it held the dropped table), so nothing of theirs would be published.
/// Within the audit interval the session opens again, adds them and
/// reads them as a backfill: every row reaches the replica, and later
/// changes stream as usual.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_table_dropped_and_created_again_is_taken_up_with_its_rows() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url())
        .await
        .expect("the destination server");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("recreate_{tag}"),
        format!("abrq_recreate_{tag}"),
        format!("recreate_dst_{tag}"),
    );
    let (t, u) = (format!("\"{schema}\".t"), format!("\"{schema}\".u"));
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {t} (id bigint PRIMARY KEY, v text)"),
        format!("INSERT INTO {t} VALUES (1, 'old1'), (2, 'old2')"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .tables(&[&format!("{schema}.*")])
        .slot(&slot)
        .publication(&slot);
    start_with_table_replicas(&mut abrq, source, &dst_schema).await;
    let replica_t = format!("\"{dst_schema}\".t");
    wait_until(LONG, "the copy in the replica", async || {
        sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {replica_t}"))
            .fetch_one(&dst)
            .await
            .is_ok_and(|n| n == 2)
    })
    .await;

    for sql in [
        format!("DROP TABLE {t}"),
        format!("CREATE TABLE {t} (id bigint PRIMARY KEY, v text)"),
        format!("INSERT INTO {t} VALUES (10, 'new10'), (11, 'new11')"),
        format!("UPDATE {t} SET v = 'new10+' WHERE id = 10"),
        format!("CREATE TABLE {u} (id bigint PRIMARY KEY, w int)"),
        format!("INSERT INTO {u} VALUES (1, 100)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let replica_u = format!("\"{dst_schema}\".u");
    let want_t = ["(10,new10+)", "(11,new11)"];
    wait_until(
        LONG,
        "the recreated and the new table in the replica",
        async || {
            let got = sqlx::query_scalar::<_, String>(&format!(
                "SELECT t::text FROM {replica_t} AS t WHERE id >= 10 ORDER BY id"
            ))
            .fetch_all(&dst)
            .await
            .unwrap_or_default();
            got == want_t
                && pg_rows(&src, &u).await.len() == 1
                && sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {replica_u}"))
                    .fetch_one(&dst)
                    .await
                    .is_ok_and(|n| n == 1)
        },
    )
    .await;
    // and later changes stream as before
    for sql in [
        format!("INSERT INTO {t} VALUES (12, 'new12')"),
        format!("UPDATE {u} SET w = 101 WHERE id = 1"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    wait_until(LONG, "later changes in the replica", async || {
        let n = sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM {replica_t} WHERE id = 12"
        ))
        .fetch_one(&dst)
        .await
        .unwrap_or(0);
        let w = sqlx::query_scalar::<_, i64>(&format!(
            "SELECT w::bigint FROM {replica_u} WHERE id = 1"
        ))
        .fetch_one(&dst)
        .await
        .unwrap_or(0);
        n == 1 && w == 101
    })
    .await;
    assert_eq!(pg_rows(&dst, &replica_u).await, pg_rows(&src, &u).await);
    let st = abrq.status("ddl").await;
    assert_eq!(st["source"]["state"], "running", "{st}");
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    let _ = sqlx::query(&format!("DROP SCHEMA \"{dst_schema}\" CASCADE"))
        .execute(&dst)
        .await;
}

/// DDL issued while the initial copy reads the table: the copy holds
/// `ACCESS SHARE` from its snapshot's start, so the `ALTER TABLE` waits
/// for it and lands after; every copied row and every later change (with
/// the new column) arrives once, in the history and the replica.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_ddl_during_the_copy_waits_for_it() {
    const ROWS: i64 = 20_000;
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("ddlcopy_{tag}"), format!("abrq_ddlcopy_{tag}"));
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, a text)"),
        format!("INSERT INTO {table} SELECT g, 'a' || g FROM generate_series(1, {ROWS}) AS g"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot);
    abrq.write_config(&config(&abrq, "ddl", source, Some(50)));
    abrq.start().await;
    abrq.wait_status("ddl", "the copy under way", |st| {
        st["source"]["position"]["snapshot"]["state"] == "copying"
    })
    .await;
    for sql in [
        format!("ALTER TABLE {table} ADD COLUMN n int"),
        format!("INSERT INTO {table} VALUES ({}, 'late', 7)", ROWS + 1),
        format!("UPDATE {table} SET n = 1 WHERE id = 1"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    wait_delivered(&abrq, "ddl", ROWS as usize + 2).await;
    assert_copied_then_changed(&history(&abrq), ROWS);
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}

/// The same on MariaDB: the copy's snapshot transaction holds the table's
/// metadata lock, so the `ALTER TABLE` waits for the copy; the changes
/// after it are decoded with the new column.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_ddl_during_the_copy() {
    const ROWS: i64 = 20_000;
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let _metadata = mysqlcdc::ROW_METADATA.lock().await;
    sqlx::query("SET GLOBAL binlog_row_metadata = FULL")
        .execute(&src)
        .await
        .unwrap();
    let name = format!("ddlcopy_{}", pg::tag());
    let table = format!("`{name}`");
    for sql in [
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, a text)"),
        format!("INSERT INTO {table} SELECT seq, CONCAT('a', seq) FROM seq_1_to_{ROWS}"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .database("test")
        .table(&name);
    abrq.write_config(&config(&abrq, "ddl", source, Some(50)));
    abrq.start().await;
    abrq.wait_status("ddl", "the copy under way", |st| {
        st["source"]["position"]["snapshot"]["state"] == "copying"
    })
    .await;
    for sql in [
        format!("ALTER TABLE {table} ADD COLUMN n int AFTER id"),
        format!("INSERT INTO {table} VALUES ({}, 7, 'late')", ROWS + 1),
        format!("UPDATE {table} SET n = 1 WHERE id = 1"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    wait_delivered(&abrq, "ddl", ROWS as usize + 2).await;
    assert_copied_then_changed(&history(&abrq), ROWS);
    abrq.kill();
    let _ = sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&src)
        .await;
}

/// A captured table renamed while the stream runs. Under `schema.*` the
/// renamed table stays captured (the publication follows it) and its
/// changes go to the destination table of its new name. Named in
/// `tables`, the stream stops naming the table it cannot find, instead
/// of following a table the config does not name.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_table_renamed_is_followed_or_stops_by_name() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url())
        .await
        .expect("the destination server");
    let tag = pg::tag();
    for (i, whole_schema) in [true, false].into_iter().enumerate() {
        let (schema, slot, dst_schema) = (
            format!("rename{i}_{tag}"),
            format!("abrq_rename{i}_{tag}"),
            format!("rename{i}_dst_{tag}"),
        );
        let t = format!("\"{schema}\".t");
        for sql in [
            format!("CREATE SCHEMA \"{schema}\""),
            format!("CREATE TABLE {t} (id bigint PRIMARY KEY, v int)"),
            format!("INSERT INTO {t} VALUES (1, 10)"),
        ] {
            sqlx::query(&sql).execute(&src).await.unwrap();
        }
        let tables = match whole_schema {
            true => format!("{schema}.*"),
            false => format!("{schema}.t"),
        };
        let mut abrq = Abrq::new();
        let source = Source::postgres("cdc")
            .connection(&pg::cdc_url())
            .tables(&[&tables])
            .slot(&slot)
            .publication(&slot);
        start_with_table_replicas(&mut abrq, source, &dst_schema).await;
        for sql in [
            format!("ALTER TABLE {t} RENAME TO t2"),
            format!("INSERT INTO \"{schema}\".t2 VALUES (2, 20)"),
        ] {
            sqlx::query(&sql).execute(&src).await.unwrap();
        }
        if whole_schema {
            let replica = format!("\"{dst_schema}\".t2");
            wait_until(
                LONG,
                "the renamed table's change in its replica",
                async || {
                    sqlx::query_scalar::<_, i64>(&format!(
                        "SELECT count(*) FROM {replica} WHERE id = 2"
                    ))
                    .fetch_one(&dst)
                    .await
                    .is_ok_and(|n| n == 1)
                },
            )
            .await;
            let st = abrq.status("ddl").await;
            assert_eq!(st["source"]["state"], "running", "{st}");
        } else {
            let st = abrq
                .wait_status("ddl", "the source stopped naming the table", |st| {
                    st["source"]["state"] == "stopped"
                })
                .await;
            let error = st["source"]["error"].as_str().unwrap_or_default();
            assert!(error.contains(&format!("{schema}.t")), "{st}");
        }
        abrq.kill();
        pg::drop_cdc(&src, &slot, &[&schema]).await;
        let _ = sqlx::query(&format!("DROP SCHEMA \"{dst_schema}\" CASCADE"))
            .execute(&dst)
            .await;
    }
}

/// (table, id) of every record of the history, in seq order.
fn tables_and_ids(abrq: &Abrq, stream: &str) -> Vec<(String, i64)> {
    let out = read_dest(&abrq.path("out"));
    let mut got = Vec::new();
    for (_, key) in out.verify_manifests(stream) {
        for r in &out.objects[&key].records {
            let table = r["_abrq_table"].as_str().unwrap_or_default();
            let table = table.rsplit('.').next().unwrap_or_default().to_string();
            got.push((table, r["id"].as_i64().unwrap()));
        }
    }
    got
}

/// MariaDB captures tables by name. In a database captured whole
/// (`db.*`), a table created while the stream runs is captured from its
/// creation, and a renamed table (`RENAME TABLE`, `ALTER TABLE ...
/// RENAME`) is followed under its new name. A table named in `tables`
/// that is renamed away stops the source by name, instead of its changes
/// being skipped in silence.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_tables_created_and_renamed_are_followed_by_name() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let db = format!("names_{}", pg::tag());
    for sql in [
        format!("CREATE DATABASE `{db}`"),
        format!("CREATE TABLE `{db}`.a (id int PRIMARY KEY)"),
        format!("CREATE TABLE `{db}`.x (id int PRIMARY KEY)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut whole = Abrq::new();
    let mut named = Abrq::new();
    for (abrq, tables) in [
        (&mut whole, format!("{db}.*")),
        (&mut named, format!("{db}.x")),
    ] {
        let source = Source::mysql("cdc")
            .connection(&mysqlcdc::url())
            .tables(&[&tables])
            .snapshot("never");
        let text = config(abrq, "names", source, None);
        abrq.write_config(&text);
        abrq.start().await;
        abrq.wait_status("names", "reading the binlog", |st| {
            st["source"]["position"]["binlog"].is_object()
        })
        .await;
    }
    for sql in [
        format!("INSERT INTO `{db}`.a VALUES (1)"),
        format!("CREATE TABLE `{db}`.b (id int PRIMARY KEY)"),
        format!("INSERT INTO `{db}`.b VALUES (2)"),
        format!("RENAME TABLE `{db}`.a TO `{db}`.a2"),
        format!("INSERT INTO `{db}`.a2 VALUES (3)"),
        format!("ALTER TABLE `{db}`.a2 RENAME TO `{db}`.a3"),
        format!("INSERT INTO `{db}`.a3 VALUES (4)"),
        format!("INSERT INTO `{db}`.x VALUES (5)"),
        format!("RENAME TABLE `{db}`.x TO `{db}`.x2"),
        format!("INSERT INTO `{db}`.x2 VALUES (6)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let want: Vec<(String, i64)> = [
        ("a", 1),
        ("b", 2),
        ("a2", 3),
        ("a3", 4),
        ("x", 5),
        ("x2", 6),
    ]
    .iter()
    .map(|(t, i)| (t.to_string(), *i))
    .collect();
    wait_delivered(&whole, "names", want.len()).await;
    assert_eq!(tables_and_ids(&whole, "names"), want);

    let st = named
        .wait_status("names", "the named table's rename stops the source", |st| {
            st["source"]["state"] == "stopped"
        })
        .await;
    let error = st["source"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("renamed to") && error.contains("x2"), "{st}");
    // what was committed before the rename is staged and delivered
    named
        .wait_status("names", "the change before the rename delivered", |st| {
            u(&st["spool"]["last_seq"]) >= 1
                && dest_of(st, "out")["high_water_mark"] == st["spool"]["last_seq"]
        })
        .await;
    assert_eq!(tables_and_ids(&named, "names"), vec![("x".to_string(), 5)]);
    whole.kill();
    named.kill();
    let _ = sqlx::query(&format!("DROP DATABASE `{db}`"))
        .execute(&src)
        .await;
}

/// One stream from `source` into the upsert table `t` of `replica`,
/// started, its copy of three rows delivered.
async fn start_copied(abrq: &mut Abrq, source: Source, replica: Destination) {
    let replica = replica.table("t").mode("upsert");
    let stream = Stream::new("pk", source).max_wait("20ms");
    let text = Config::new(abrq)
        .stream(stream.destination(replica))
        .to_string();
    abrq.write_config(&text);
    abrq.start().await;
    abrq.wait_status("pk", "the copy delivered", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
            && u(&dest_of(st, "replica")["delivered_records"]) >= 3
    })
    .await;
}

/// Everything delivered, and no dead letter at the replica.
async fn assert_no_dead_letter(abrq: &Abrq) {
    let st = abrq.wait_drained("pk", Duration::ZERO, LONG).await;
    assert_eq!(
        u(&dest_of(&st, "replica")["pending_dead_letters"]),
        0,
        "{st}"
    );
}

/// The statements after the key moved: rows changed by the new key, one
/// of them changing it (a delete of the old key and the new row).
fn by_new_key(table: &str) -> Vec<String> {
    vec![
        format!("UPDATE {table} SET v = 11 WHERE k = 'k1'"),
        format!("UPDATE {table} SET k = 'k2b', v = 21 WHERE k = 'k2'"),
        format!("DELETE FROM {table} WHERE k = 'k3'"),
        format!("INSERT INTO {table} VALUES (4, 'k4', 40)"),
    ]
}

/// The source's primary key moved to another column while the stream
/// runs: the upsert replica abrq created moves its key too and ends equal
/// to the source, with no dead letter. PostgreSQL into PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_primary_key_moved_the_replica_follows() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url())
        .await
        .expect("the destination server");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("pkmove_{tag}"),
        format!("abrq_pkmove_{tag}"),
        format!("pkmove_dst_{tag}"),
    );
    let table = format!("\"{schema}\".t");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, k text NOT NULL, v int)"),
        format!("INSERT INTO {table} VALUES (1, 'k1', 10), (2, 'k2', 20), (3, 'k3', 30)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.t"))
        .slot(&slot)
        .publication(&slot);
    let replica = Destination::postgres("replica")
        .connection(&pg::url())
        .schema(&dst_schema);
    start_copied(&mut abrq, source, replica).await;
    let mut sqls = vec![
        format!("ALTER TABLE {table} DROP CONSTRAINT t_pkey"),
        format!("ALTER TABLE {table} ADD PRIMARY KEY (k)"),
    ];
    sqls.extend(by_new_key(&table));
    for sql in sqls {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let rows = |t: &str| format!("SELECT id || ',' || k || ',' || v FROM {t} ORDER BY id");
    let want: Vec<String> = sqlx::query_scalar(&rows(&table))
        .fetch_all(&src)
        .await
        .unwrap();
    let replica = format!("\"{dst_schema}\".t");
    wait_until(LONG, "the replica equals the source", async || {
        let got: Vec<String> = sqlx::query_scalar(&rows(&replica))
            .fetch_all(&dst)
            .await
            .unwrap_or_default();
        got == want
    })
    .await;
    let key: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_index i
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
         WHERE i.indrelid = $1::regclass AND i.indisprimary",
    )
    .bind(&replica)
    .fetch_all(&dst)
    .await
    .unwrap();
    assert_eq!(key, vec!["k".to_string()], "the replica's primary key");
    assert_no_dead_letter(&abrq).await;
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}

/// As above, MariaDB into MySQL-protocol tables (a text key is bounded to
/// be a key there).
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_primary_key_moved_the_replica_follows() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let tag = pg::tag();
    let (name, dst_db) = (format!("pkmove_{tag}"), format!("pkmove_dst_{tag}"));
    let table = format!("`{name}`");
    for sql in [
        format!("CREATE DATABASE `{dst_db}`"),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, k varchar(20) NOT NULL, v int)"),
        format!("INSERT INTO {table} VALUES (1, 'k1', 10), (2, 'k2', 20), (3, 'k3', 30)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .database("test")
        .table(&name);
    let replica = Destination::mysql("replica")
        .connection(&mysqlcdc::url())
        .database(&dst_db);
    start_copied(&mut abrq, source, replica).await;
    let mut sqls = vec![format!(
        "ALTER TABLE {table} DROP PRIMARY KEY, ADD PRIMARY KEY (k)"
    )];
    sqls.extend(by_new_key(&table));
    for sql in sqls {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let rows = |t: &str| format!("SELECT CONCAT(id, ',', k, ',', v) FROM {t} ORDER BY id");
    let want: Vec<String> = sqlx::query_scalar(&rows(&table))
        .fetch_all(&src)
        .await
        .unwrap();
    let replica = format!("`{dst_db}`.t");
    wait_until(LONG, "the replica equals the source", async || {
        let got: Vec<String> = sqlx::query_scalar(&rows(&replica))
            .fetch_all(&src)
            .await
            .unwrap_or_default();
        got == want
    })
    .await;
    let key: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.KEY_COLUMN_USAGE
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 't' AND CONSTRAINT_NAME = 'PRIMARY'",
    )
    .bind(&dst_db)
    .fetch_all(&src)
    .await
    .unwrap();
    assert_eq!(key, vec!["k".to_string()], "the replica's primary key");
    assert_no_dead_letter(&abrq).await;
    abrq.kill();
    for sql in [
        format!("DROP TABLE {table}"),
        format!("DROP DATABASE `{dst_db}`"),
    ] {
        let _ = sqlx::query(&sql).execute(&src).await;
    }
}
