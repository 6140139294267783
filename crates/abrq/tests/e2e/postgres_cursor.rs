//! The `postgres` source in `mode = "cursor"`, through the binary: a table
//! polled by `updated_at` with its primary key as tie-break, while a
//! writer inserts and updates rows and abrq is killed and restarted. A
//! `postgres` destination in upsert mode ends equal to the source table,
//! created with the source's column types and key; a `local` destination
//! holds every row version read, each (id, updated_at) once after
//! dedupe by idempotency key.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};
use rand::Rng;
use serde_json::Value;

const STREAM: &str = "orders";
const BEFORE: i64 = 3_000;
const ROUNDS: usize = 4;

struct Db {
    pool: PgPool,
    src: String,
    dst: String,
}

impl Db {
    async fn new() -> Db {
        let url = abrq_testkit::Postgres::from_env().url;
        let pool = PgPool::connect(&url).await.expect("postgres");
        let n: u64 = rand::rng().random();
        let (src, dst) = (
            format!("abrq_src_{:010x}", n & 0xff_ffff_ffff),
            format!("abrq_dst_{:010x}", n & 0xff_ffff_ffff),
        );
        for s in [&src, &dst] {
            sqlx::query(&format!("CREATE SCHEMA \"{s}\""))
                .execute(&pool)
                .await
                .unwrap();
        }
        sqlx::query(&format!(
            "CREATE TABLE \"{src}\".orders (
                id bigserial PRIMARY KEY,
                updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                customer text NOT NULL,
                total numeric(12,2) NOT NULL,
                placed date NOT NULL,
                note text
            )"
        ))
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(&format!(
            "CREATE INDEX ON \"{src}\".orders (updated_at, id)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        Db { pool, src, dst }
    }

    async fn insert(&self, n: i64) {
        sqlx::query(&format!(
            "INSERT INTO \"{}\".orders (customer, total, placed, note)
             SELECT 'c' || (g % 97), round((g * 7.31)::numeric % 10000, 2) + 0.01,
                    date '2026-01-01' + (g % 300)::int, CASE WHEN g % 5 = 0 THEN NULL ELSE 'n' || g END
             FROM generate_series(1, $1) AS g",
            self.src
        ))
        .bind(n)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    /// Updates `n` random rows, one statement each (so each gets its own
    /// clock_timestamp and some land while a page is being read).
    async fn update(&self, n: usize) {
        for _ in 0..n {
            sqlx::query(&format!(
                "UPDATE \"{}\".orders SET total = total + 1, note = 'updated',
                        updated_at = clock_timestamp()
                 WHERE id = (SELECT id FROM \"{}\".orders ORDER BY random() LIMIT 1)",
                self.src, self.src
            ))
            .execute(&self.pool)
            .await
            .unwrap();
        }
    }

    /// `id -> (customer, total, placed, note)` of one side.
    async fn rows(&self, schema: &str) -> BTreeMap<i64, (String, String, String, Option<String>)> {
        let rows: Vec<(i64, String, String, String, Option<String>)> = sqlx::query_as(&format!(
            "SELECT id, customer, total::text, placed::text, note FROM \"{schema}\".orders"
        ))
        .fetch_all(&self.pool)
        .await
        .unwrap_or_default();
        rows.into_iter()
            .map(|(id, c, t, p, n)| (id, (c, t, p, n)))
            .collect()
    }

    async fn column_types(&self, schema: &str) -> BTreeMap<String, String> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
             FROM pg_attribute a WHERE a.attrelid = CAST($1 AS regclass)
             AND a.attnum > 0 AND NOT a.attisdropped",
        )
        .bind(format!("\"{schema}\".orders"))
        .fetch_all(&self.pool)
        .await
        .unwrap();
        rows.into_iter().collect()
    }

    async fn primary_key(&self, schema: &str) -> Vec<String> {
        sqlx::query_scalar(
            "SELECT a.attname::text FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
             WHERE i.indrelid = CAST($1 AS regclass) AND i.indisprimary",
        )
        .bind(format!("\"{schema}\".orders"))
        .fetch_all(&self.pool)
        .await
        .unwrap()
    }

    async fn drop(self) {
        pg::drop_schemas(&self.pool, &[&self.src, &self.dst]).await;
        self.pool.close().await;
    }
}

fn config(abrq: &Abrq, db: &Db) -> String {
    let url = pg::url();
    Config::new(abrq)
        .stream(
            Stream::new(
                STREAM,
                Source::postgres("cursor")
                    .connection(&url)
                    .table(&format!("{}.orders", db.src))
                    .cursor("updated_at")
                    .poll_interval("100ms"),
            )
            .max_records(700)
            .max_wait("200ms")
            .destination(
                Destination::postgres("replica")
                    .connection(&url)
                    .schema(&db.dst)
                    .table("orders")
                    .mode("upsert"),
            )
            .destination(Destination::local("history", abrq.p("out/history")).format("jsonl")),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn polled_table_reaches_an_upsert_replica_through_kills() {
    let db = Db::new().await;
    db.insert(BEFORE).await;
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &db));

    let config_path = abrq.config_path().display().to_string();
    let (status, check, err) = abrq.cli(&["check", "-c", &config_path]).await;
    assert!(status.success(), "{check}{err}");
    assert!(
        check.contains(
            "ok    orders source (postgres): 6 columns, read in order of updated_at then (id)"
        ),
        "{check}"
    );

    abrq.start().await;
    for round in 0..ROUNDS {
        db.insert(400).await;
        db.update(60).await;
        let ms = rand::rng().random_range(50..600);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        abrq.note(&format!("round {round}: SIGKILL after {ms} ms"));
        abrq.kill();
        abrq.start().await;
    }
    db.update(40).await;

    let want = db.rows(&db.src).await;
    assert_eq!(want.len() as i64, BEFORE + 400 * ROUNDS as i64);
    wait_until(LONG, "the replica equals the source table", async || {
        db.rows(&db.dst).await == want
    })
    .await;

    // the replica was created from the source's declared types and key
    let types = db.column_types(&db.dst).await;
    assert_eq!(types["total"], "numeric(12,2)", "{types:?}");
    assert_eq!(types["placed"], "date", "{types:?}");
    assert_eq!(types["updated_at"], "timestamp with time zone", "{types:?}");
    assert_eq!(types["id"], "bigint", "{types:?}");
    assert_eq!(db.primary_key(&db.dst).await, vec!["id".to_string()]);

    // every version read is in the history once (a batch delivered again
    // lands under the same object name); the last version of every row is
    // there
    let st = abrq
        .wait_drained(STREAM, std::time::Duration::from_secs(1), LONG)
        .await;
    assert_eq!(
        u(&dest_of(&st, "history")["pending_dead_letters"]),
        0,
        "{st}"
    );
    let out = read_dest(&abrq.path("out/history"));
    let mut versions: BTreeMap<(i64, String), usize> = BTreeMap::new();
    for r in out.records() {
        let id = r["id"].as_i64().expect("id");
        let at = r["updated_at"].as_str().expect("updated_at").to_string();
        *versions.entry((id, at)).or_default() += 1;
    }
    let dup = versions.values().filter(|n| **n > 1).count();
    assert_eq!(dup, 0, "a row version staged twice");
    let latest: BTreeSet<i64> = versions.keys().map(|(id, _)| *id).collect();
    assert_eq!(latest.len(), want.len(), "every row is in the history");
    for r in out.records() {
        assert!(
            matches!(r["total"], Value::String(_)),
            "numeric arrives as text: {r:?}"
        );
    }
    drop(abrq);
    db.drop().await;
}
