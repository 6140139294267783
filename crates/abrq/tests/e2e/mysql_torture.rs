//! The differential torture test of the `mysql` cdc source (MariaDB), at a
//! size CI affords (`ABRQ_TORTURE_ROWS` scales it): a table with a column
//! of every MariaDB 10.11 type family, extremes among the values (integer
//! limits signed and unsigned, DECIMAL(65,30), float specials, bit,
//! binary with zero bytes, emoji, enum, set, zero and extreme dates,
//! negative times, year, deep json, a point and a geometry, text in
//! latin1, sjis and cp1251: the binlog writes such text in the column's
//! own set, a query in the session's utf8mb4). The same values are written
//! before the stream (copied) and after (streamed in one transaction),
//! abrq is SIGKILLed during the copy, and two oracles read back through
//! each side's own client:
//! - a MariaDB replica (a mysql destination in upsert mode): every
//!   column the replica keeps in the source's own type, of every row, as
//!   MariaDB prints it (the destination keeps bit, binary, enum, set,
//!   time, year and point as text, and unsigned integers one size up);
//! - one form per type: a copied row and its streamed twin carry the same
//!   JSON for every column in the JSON lines history.
//! - across engines: a PostgreSQL table abrq makes from the declared
//!   types holds every column of every row as the history has it, as
//!   PostgreSQL prints it (`common/cross.rs`).

use std::collections::BTreeMap;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use serde_json::{Map, Value};

/// (name, type, how MariaDB prints it for the oracle).
const COLUMNS: &[(&str, &str, &str)] = &[
    ("ti", "tinyint", "CAST(ti AS CHAR)"),
    ("tu", "tinyint unsigned", "CAST(tu AS CHAR)"),
    ("si", "smallint", "CAST(si AS CHAR)"),
    ("mi", "mediumint", "CAST(mi AS CHAR)"),
    ("mu", "mediumint unsigned", "CAST(mu AS CHAR)"),
    ("i4", "int", "CAST(i4 AS CHAR)"),
    ("iu", "int unsigned", "CAST(iu AS CHAR)"),
    ("i8", "bigint", "CAST(i8 AS CHAR)"),
    ("bu", "bigint unsigned", "CAST(bu AS CHAR)"),
    ("dec", "decimal(65,30)", "CAST(`dec` AS CHAR)"),
    ("fl", "float", "CAST(fl AS CHAR)"),
    ("db", "double", "CAST(db AS CHAR)"),
    ("bits", "bit(8)", "HEX(bits)"),
    ("bin", "binary(4)", "HEX(bin)"),
    ("vbin", "varbinary(16)", "HEX(vbin)"),
    ("blb", "blob", "HEX(blb)"),
    ("ch", "char(3)", "ch"),
    ("vc", "varchar(40)", "vc"),
    ("txt", "text", "txt"),
    ("en", "enum('a','b c')", "en"),
    ("st", "set('x','y','z')", "st"),
    ("d", "date", "CAST(d AS CHAR)"),
    ("dt", "datetime(6)", "CAST(dt AS CHAR)"),
    ("ts", "timestamp(6) NULL", "CAST(ts AS CHAR)"),
    ("tm", "time(6)", "CAST(tm AS CHAR)"),
    ("yr", "year", "CAST(yr AS CHAR)"),
    ("js", "json", "js"),
    ("pt", "point", "ST_AsText(pt)"),
    ("geo", "geometry", "ST_AsText(geo)"),
    ("l1", "varchar(20) CHARACTER SET latin1", "l1"),
    ("sj", "varchar(20) CHARACTER SET sjis", "sj"),
    ("ru", "text CHARACTER SET cp1251", "ru"),
    ("select", "int", "CAST(`select` AS CHAR)"),
];

fn value_sets() -> Vec<Vec<String>> {
    // MariaDB validates json to a depth of 32
    let deep = format!("{}1{}", "[".repeat(31), "]".repeat(31));
    let sets: [Vec<&str>; 2] = [
        vec![
            "-128",
            "255",
            "-32768",
            "-8388608",
            "16777215",
            "-2147483648",
            "4294967295",
            "-9223372036854775808",
            "18446744073709551615",
            "'-99999999999999999999999999999999999.999999999999999999999999999999'",
            "-3.4e38",
            "1.7976931348623157e308",
            "b'10101010'",
            "x'00ff0010'",
            "x''",
            "x'00'",
            "'ab'",
            "'emoji 😀 and ünï'",
            "'quote '' back \\\\ tab\\t'",
            "'b c'",
            "'x,z'",
            "'0000-00-00'",
            "'1000-01-01 00:00:00.000000'",
            "'1970-01-01 00:00:01'",
            "'-838:59:59.000000'",
            "1901",
            "'{\"a\": [1, {\"b\": null}]}'",
            "ST_GeomFromText('POINT(1 2)')",
            "ST_GeomFromText('LINESTRING(0 0, 1.5 2.25)')",
            "'café € ÿ'",
            "'あいう漢字'",
            "'привет, ёж'",
            "7",
        ],
        vec![
            "127",
            "0",
            "32767",
            "8388607",
            "0",
            "2147483647",
            "0",
            "9223372036854775807",
            "0",
            "'0.000000000000000000000000000001'",
            "1.5",
            "-0.0",
            "b'0'",
            "x'ffffffff'",
            "x'0102'",
            "x'deadbeef'",
            "''",
            "''",
            "''",
            "'a'",
            "''",
            "'9999-12-31'",
            "'9999-12-31 23:59:59.999999'",
            "'2038-01-19 03:14:07.999999'",
            "'838:59:59.999999'",
            "2155",
            "",
            "ST_GeomFromText('POINT(-180.5 90)')",
            "ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))', 4326)",
            "''",
            "NULL",
            "'Ё'",
            "NULL",
        ],
    ];
    sets.into_iter()
        .map(|set| {
            set.into_iter()
                .map(|v| match v {
                    "" => format!("'{deep}'"),
                    v => v.to_string(),
                })
                .collect()
        })
        .collect()
}

async fn exec(pool: &MySqlPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The columns `names` of every row as MariaDB prints them.
async fn printed(
    pool: &MySqlPool,
    table: &str,
    names: &[&str],
) -> BTreeMap<i32, Vec<Option<String>>> {
    let exprs: Vec<String> = COLUMNS
        .iter()
        .filter(|(n, _, _)| names.contains(n))
        .map(|(_, _, p)| p.to_string())
        .collect();
    cross::mysql_rows(pool, table, &exprs).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_type_arrives_equal_in_one_form_through_copy_stream_and_kills() {
    let rows: i32 = std::env::var("ABRQ_TORTURE_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
        / 2
        * 2;
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let tag = pg::tag();
    let (db, dst_db) = (format!("torture_{tag}"), format!("torturedst_{tag}"));
    let mirror_schema = format!("torturepg_{tag}");
    exec(
        &src,
        &format!("CREATE DATABASE `{db}` CHARACTER SET utf8mb4"),
    )
    .await;
    let table = format!("`{db}`.types");
    let defs: Vec<String> = COLUMNS
        .iter()
        .map(|(n, t, _)| format!("`{n}` {t}"))
        .collect();
    exec(
        &src,
        &format!(
            "CREATE TABLE {table} (id int PRIMARY KEY, {})",
            defs.join(", ")
        ),
    )
    .await;
    let names: Vec<String> = COLUMNS.iter().map(|(n, _, _)| format!("`{n}`")).collect();
    let sets = value_sets();
    let insert = |id: i32| {
        let set = &sets[id as usize % sets.len()];
        format!(
            "INSERT INTO {table} (id, {}) VALUES ({id}, {})",
            names.join(", "),
            set.join(", ")
        )
    };
    let mut tx = src.begin().await.unwrap();
    for id in 0..rows {
        sqlx::query(&insert(id)).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();

    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "torture",
            Source::mysql("cdc")
                .connection(&mysqlcdc::url())
                .tables(&[&format!("{db}.types")]),
        )
        .max_records(37)
        .max_wait("20ms")
        .destination(
            Destination::mysql("replica")
                .connection(&mysqlcdc::url())
                .database(&dst_db)
                .table("types")
                .mode("upsert"),
        )
        .destination(
            Destination::postgres("mirror")
                .connection(&pg::url())
                .schema(&mirror_schema)
                .table("types")
                .mode("upsert"),
        )
        .destination(Destination::local("history", abrq.p("out")).format("jsonl"))
        .destination(Destination::local("lake", abrq.p("lake")).format("parquet")),
    );
    abrq.write_config(&config.to_string());
    abrq.start().await;
    wait_until(LONG, "the copy under way", async || {
        u(&abrq.status("torture").await["spool"]["last_seq"]) > 0
    })
    .await;
    abrq.kill();
    abrq.start().await;
    abrq.wait_status("torture", "the copy done", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    let mut tx = src.begin().await.unwrap();
    for id in rows..2 * rows {
        sqlx::query(&insert(id)).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();

    let replica = format!("`{dst_db}`.types");
    wait_until(LONG, "every row at the replica", async || {
        sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {replica}"))
            .fetch_one(&src)
            .await
            .ok()
            == Some(2 * rows as i64)
    })
    .await;
    // the mysql destination keeps some types in others (bit, binary,
    // enum, set, time, year, point as text; unsigned integers one size
    // up): the replica is compared where the column's type is the
    // source's own, and those must include the core types
    let same: Vec<(String,)> = sqlx::query_as(
        "SELECT CAST(a.COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS a \
         JOIN information_schema.COLUMNS b ON b.COLUMN_NAME = a.COLUMN_NAME \
         AND b.TABLE_SCHEMA = ? AND b.TABLE_NAME = 'types' \
         WHERE a.TABLE_SCHEMA = ? AND a.TABLE_NAME = 'types' AND a.COLUMN_TYPE = b.COLUMN_TYPE",
    )
    .bind(&dst_db)
    .bind(&db)
    .fetch_all(&src)
    .await
    .unwrap();
    let same: Vec<&str> = COLUMNS
        .iter()
        .map(|(n, _, _)| *n)
        .filter(|n| same.iter().any(|(s,)| s == n))
        .collect();
    for core in ["i8", "dec", "db", "vc", "d", "dt", "select"] {
        assert!(
            same.contains(&core),
            "{core} kept in another type: {same:?}"
        );
    }
    let want = printed(&src, &table, &same).await;
    assert_eq!(want.len(), 2 * rows as usize);
    let deadline = std::time::Instant::now() + LONG;
    let mut got = printed(&src, &replica, &same).await;
    while got != want && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        got = printed(&src, &replica, &same).await;
    }
    assert_eq!(got.len(), want.len(), "rows at the replica");
    for (id, values) in &want {
        for (name, (a, b)) in same.iter().zip(values.iter().zip(&got[id])) {
            assert_eq!(
                b, a,
                "row {id}, column {name}: replica (left), source (right)"
            );
        }
    }

    abrq.wait_drained("torture", std::time::Duration::from_millis(500), LONG)
        .await;
    let history = read_history(abrq.path("out"));
    for id in 0..rows {
        let (a, b) = (&history[&id], &history[&(id + rows)]);
        for (name, _, _) in COLUMNS {
            assert_eq!(
                a.get(*name),
                b.get(*name),
                "column {name}: copy and stream differ"
            );
        }
    }
    // parquet: every row as the JSON lines history has it, under
    // parquet's typed-column rules (the chaos oracle's)
    let lake = read_history(abrq.path("lake"));
    let differ = crate::common::oracle::parquet_differences(&history, &lake);
    assert!(
        differ.is_empty(),
        "parquet differs from the history:\n{}",
        differ.join("\n")
    );
    // the PostgreSQL mirror (a table abrq made from the declared types):
    // every column of every row as PostgreSQL prints it, against the
    // history
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let names: Vec<&'static str> = COLUMNS.iter().map(|(n, _, _)| *n).collect();
    let mirror = format!("\"{mirror_schema}\".types");
    let mirror = cross::pg_printed(&dst, &mirror, &names).await;
    let wrong = cross::differences(&history, &mirror, &names);
    cross::assert_none("the PostgreSQL mirror", &wrong);
    let st = abrq.status("torture").await;
    for d in ["replica", "mirror", "history", "lake"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    abrq.kill();
    for d in [&db, &dst_db] {
        exec(&src, &format!("DROP DATABASE IF EXISTS `{d}`")).await;
    }
    pg::drop_schemas(&dst, &[&mirror_schema]).await;
}

fn read_history(dir: std::path::PathBuf) -> BTreeMap<i32, Map<String, Value>> {
    let out = read_dest(&dir);
    let mut by_id = BTreeMap::new();
    for r in out.records() {
        if let Some(id) = r.get("id").and_then(Value::as_i64) {
            let mut r = r.clone();
            r.remove("_abrq_op");
            r.remove("_abrq_table");
            by_id.insert(id as i32, r);
        }
    }
    by_id
}
