//! The differential torture test of the `postgres` cdc source, at a size
//! CI affords (`ABRQ_TORTURE_ROWS` scales it; `docs/reliability.md` gives
//! the longer run): a table with a column of every built-in type family
//! PostgreSQL 15 has, its extremes among the values (NaN, ±Infinity,
//! numeric beyond f64, money's limits, bytea, arrays of several
//! dimensions with nulls, ranges, enums, domains, composites, deep json,
//! xml, time zones, intervals, infinite dates), and column names that are
//! keywords or the generated queries' own aliases.
//!
//! The same values are written once before the slot (copied) and once
//! after (streamed, in one transaction, then updated), abrq is SIGKILLed
//! while it reads, and two oracles read back through each side's own
//! client:
//! - the replica: every built-in column of every row equals the source's
//!   as PostgreSQL prints it (`::text`);
//! - one form per type: in the JSON lines history, a copied row and its
//!   streamed twin carry the very same JSON for every column.
//! - across engines: a MariaDB table abrq makes from the declared types
//!   holds every built-in column of every row as the history has it, as
//!   MariaDB prints it (`common/cross.rs`).

use std::collections::BTreeMap;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use serde_json::{Map, Value};

/// Columns the replica can hold: (name, type).
const BUILTIN: &[(&str, &str)] = &[
    ("i2", "smallint"),
    ("i4", "integer"),
    ("i8", "bigint"),
    ("num", "numeric"),
    ("num_scaled", "numeric(40,10)"),
    ("f4", "real"),
    ("f8", "double precision"),
    ("cash", "money"),
    ("flag", "boolean"),
    ("bits", "bit(8)"),
    ("varbits", "bit varying"),
    ("raw", "bytea"),
    ("fixed", "character(3)"),
    ("var", "character varying(20)"),
    ("txt", "text"),
    ("u", "uuid"),
    ("addr", "inet"),
    ("net", "cidr"),
    ("mac", "macaddr"),
    ("day", "date"),
    ("at", "timestamp without time zone"),
    ("atz", "timestamp with time zone"),
    ("clock", "time without time zone"),
    ("clocktz", "time with time zone"),
    ("span", "interval"),
    ("doc", "json"),
    ("docb", "jsonb"),
    ("markup", "xml"),
    ("ints", "integer[]"),
    ("texts", "text[]"),
    ("nums", "numeric[]"),
    ("grid", "integer[]"),
    ("r", "int4range"),
    ("during", "tstzrange"),
    ("t", "text"),
    ("select", "text"),
];

/// Columns of the source's own types: checked for one form only.
const OWN: &[(&str, &str)] = &[("mood", "mood"), ("pos", "posint"), ("pair", "pair")];

/// Each row's values, as SQL literals in BUILTIN then OWN order.
fn value_sets() -> Vec<Vec<String>> {
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let q = |s: &str| format!("'{}'", s.replace('\'', "''"));
    vec![
        vec![
            "-32768",
            "-2147483648",
            "-9223372036854775808",
            "'NaN'",
            "'123456789012345678901234567890.0123456789'",
            "'NaN'",
            "'-Infinity'",
            "'-92233720368547758.08'",
            "false",
            "B'10101010'",
            "B''",
            "'\\x00ff10'::bytea",
            "'ab'",
            "'quote '' and \\ back'",
            "E'line\\nbreak\\ttab'",
            "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
            "'::1'",
            "'10.0.0.0/8'",
            "'08:00:2b:01:02:03'",
            "'infinity'",
            "'-infinity'",
            "'2026-06-30 23:59:59.999999+14'",
            "'00:00:00'",
            "'23:59:59.999999-12'",
            "'-178000000 years'",
            "'{\"a\": [1, {\"b\": null}]}'",
            &q(&deep),
            "'<a b=\"1\">x &amp; y</a>'",
            "'{1,NULL,-3}'",
            "'{\"a b\",\"q\\\"uote\",NULL,\"NULL\",\"\"}'",
            "'{1.50,NaN,-0.000001}'",
            "'[0:1][1:2]={{1,2},{3,4}}'",
            "'[1,10)'",
            "'[2026-01-01 00:00+00,infinity)'",
            "'t'",
            "'select'",
            "'sad'",
            "1",
            "ROW(1, 'x,y')",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        vec![
            "32767",
            "2147483647",
            "9223372036854775807",
            "'-0.0000000000000000000000000001'",
            "'-99999999999999999999999999999.9999999999'",
            "'Infinity'",
            "'NaN'",
            "'92233720368547758.07'",
            "true",
            "B'00000000'",
            "B'1'",
            "''::bytea",
            "'   '",
            "''",
            "'ünïcödé ✓'",
            "'00000000-0000-0000-0000-000000000000'",
            "'2001:db8::1/64'",
            "'::/0'",
            "'ff:ff:ff:ff:ff:ff'",
            "'4713-01-01 BC'",
            "'1999-12-31 23:59:59'",
            "'0001-01-01 00:00:00+00'",
            "'24:00:00'",
            "'00:00:00+14'",
            "'1 mon -1 day 00:00:00.000001'",
            // a JSON null would arrive as SQL NULL (docs/reliability.md)
            "'\"null\"'",
            "'[]'",
            "'<r/>'",
            "'{}'",
            "'{}'",
            "'{}'",
            "'{{{1}}}'",
            "'empty'",
            "'(,)'",
            "NULL",
            "NULL",
            "'happy'",
            "2147483647",
            "ROW(NULL, NULL)",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
    ]
}

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Every built-in column of every row as PostgreSQL prints it.
async fn printed(pool: &PgPool, table: &str) -> BTreeMap<i32, Vec<Option<String>>> {
    // JSON arrays have no lower bounds: an array's bounds arrive as 1
    // (docs/reliability.md), so arrays compare by their elements
    let cols: Vec<String> = BUILTIN
        .iter()
        .map(|(n, t)| match t.ends_with("[]") {
            true => format!("to_json({})::text", quote(n)),
            false => format!("{}::text", quote(n)),
        })
        .collect();
    cross::pg_rows(pool, table, &cols).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_type_arrives_equal_in_one_form_through_copy_stream_and_kills() {
    let rows: i32 = std::env::var("ABRQ_TORTURE_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
        / 2
        * 2;
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url()).await.expect("postgres");
    let tag = pg::tag();
    let (schema, slot, dst_schema) = (
        format!("torture_{tag}"),
        format!("abrq_torture_{tag}"),
        format!("torturedst_{tag}"),
    );
    let table = format!("{}.types", quote(&schema));
    let mirror_db = format!("torturemy_{tag}");
    exec(&src, &format!("CREATE SCHEMA {}", quote(&schema))).await;
    for sql in [
        format!(
            "CREATE TYPE {}.mood AS ENUM ('sad', 'happy')",
            quote(&schema)
        ),
        format!(
            "CREATE DOMAIN {}.posint AS integer CHECK (VALUE > 0)",
            quote(&schema)
        ),
        format!("CREATE TYPE {}.pair AS (n integer, s text)", quote(&schema)),
    ] {
        exec(&src, &sql).await;
    }
    let columns: Vec<String> = BUILTIN
        .iter()
        .map(|(n, t)| format!("{} {t}", quote(n)))
        .chain(
            OWN.iter()
                .map(|(n, t)| format!("{} {}.{t}", quote(n), quote(&schema))),
        )
        .collect();
    exec(
        &src,
        &format!(
            "CREATE TABLE {table} (id integer PRIMARY KEY, {})",
            columns.join(", ")
        ),
    )
    .await;
    // the replica holds the built-in columns only (the source's own
    // types do not exist there)
    let names: Vec<String> = BUILTIN.iter().map(|(n, _)| quote(n)).collect();
    let own: Vec<String> = OWN.iter().map(|(n, _)| quote(n)).collect();
    let sets = value_sets();
    let insert = |id: i32| {
        let set = &sets[id as usize % sets.len()];
        format!(
            "INSERT INTO {table} (id, {}, {}) VALUES ({id}, {})",
            names.join(", "),
            own.join(", "),
            set.join(", ")
        )
    };
    // copied: the first half of the rows
    let mut tx = src.begin().await.unwrap();
    for id in 0..rows {
        sqlx::query(&insert(id)).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();

    let mut abrq = Abrq::new();
    let config = Config::new(&abrq).stream(
        Stream::new(
            "torture",
            Source::postgres("cdc")
                .connection(&pg::cdc_url())
                .table(&format!("{schema}.types"))
                .slot(&slot)
                .publication(&slot),
        )
        .max_records(37)
        .max_wait("20ms")
        .destination(
            Destination::postgres("replica")
                .connection(&pg::url())
                .schema(&dst_schema)
                .table("types")
                .mode("upsert"),
        )
        .destination(
            Destination::mysql("mirror")
                .connection(&mysqlcdc::url())
                .database(&mirror_db)
                .table("types")
                .mode("upsert"),
        )
        .destination(
            Destination::local("history", abrq.p("out"))
                .format("jsonl")
                .manifest(),
        )
        .destination(
            Destination::local("lake", abrq.p("lake"))
                .format("parquet")
                .manifest(),
        ),
    );
    abrq.write_config(&config.to_string());
    // the replica's table, made by the test without the source's own types
    exec(&dst, &format!("CREATE SCHEMA {}", quote(&dst_schema))).await;
    let replica = format!("{}.types", quote(&dst_schema));
    let replica_cols: Vec<String> = BUILTIN
        .iter()
        .map(|(n, t)| format!("{} {t}", quote(n)))
        .chain(OWN.iter().map(|(n, _)| format!("{} text", quote(n))))
        .collect();
    exec(
        &dst,
        &format!(
            "CREATE TABLE {replica} (id integer PRIMARY KEY, {})",
            replica_cols.join(", ")
        ),
    )
    .await;
    abrq.start().await;
    // killed while it copies
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
    // streamed: the same values again, in one transaction, then updated
    let mut tx = src.begin().await.unwrap();
    for id in rows..2 * rows {
        sqlx::query(&insert(id)).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    abrq.kill();
    abrq.start().await;
    exec(
        &src,
        &format!("UPDATE {table} SET txt = txt || '+' WHERE id % 5 = 0 AND id >= {rows}"),
    )
    .await;

    let want = printed(&src, &table).await;
    assert_eq!(want.len(), 2 * rows as usize);
    // equal, or the first column that differs named
    let deadline = std::time::Instant::now() + LONG;
    let mut got = printed(&dst, &replica).await;
    while got != want && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        got = printed(&dst, &replica).await;
    }
    assert_eq!(got.len(), want.len(), "rows at the replica");
    for (id, values) in &want {
        for ((name, _), (a, b)) in BUILTIN.iter().zip(values.iter().zip(&got[id])) {
            assert_eq!(
                b, a,
                "row {id}, column {name}: replica (left), source (right)"
            );
        }
    }

    // one form per type: each copied row and its streamed twin
    abrq.wait_drained("torture", std::time::Duration::from_millis(500), LONG)
        .await;
    let history = read_history(abrq.path("out"));
    for id in 0..rows {
        let twin = id + rows;
        if twin % 5 == 0 {
            continue;
        }
        let (a, b) = (&history[&id], &history[&twin]);
        for (name, _) in BUILTIN.iter().chain(OWN) {
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
    // the MySQL mirror (a table abrq made from the declared types): every
    // built-in column of every row as MySQL prints it, against the history
    let my = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let names: Vec<&'static str> = BUILTIN.iter().map(|(n, _)| *n).collect();
    let mirror = cross::mysql_printed(&my, &format!("`{mirror_db}`.types"), &names).await;
    let wrong = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || cross::differences(&history, &mirror, &names))
        .unwrap()
        .join()
        .unwrap();
    cross::assert_none("the MySQL mirror", &wrong);
    let st = abrq.status("torture").await;
    for d in ["replica", "mirror", "history", "lake"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
    sqlx::query(&format!("DROP DATABASE `{mirror_db}`"))
        .execute(&my)
        .await
        .unwrap();
}

/// The last record of each id in stream order (deep values read on a
/// thread with room).
fn read_history(dir: std::path::PathBuf) -> BTreeMap<i32, Map<String, Value>> {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let out = read_dest(&dir);
            let mut by_id = BTreeMap::new();
            let in_order = out.verify_manifests("torture");
            for r in in_order
                .iter()
                .flat_map(|(_, key)| &out.objects[key].records)
            {
                if let Some(id) = r.get("id").and_then(Value::as_i64) {
                    let mut r = r.clone();
                    r.remove("_abrq_op");
                    by_id.insert(id as i32, r);
                }
            }
            by_id
        })
        .unwrap()
        .join()
        .unwrap()
}
