//! The `postgres` source in `mode = "cdc"`, through the binary, against
//! the logical-decoding cluster `scripts/services.sh` starts (pgcdc): the
//! 20,000 rows from before the slot are copied from the slot's snapshot
//! while a writer commits multi-row transactions of inserts, updates and
//! deletes for 30 s, one transaction larger than several batches, a
//! TRUNCATE and an ADD COLUMN, while abrq is SIGKILLed and restarted at six
//! random moments.
//!
//! - a `postgres` destination in upsert mode (on the other server) ends
//!   equal to the source table, with the added column;
//! - a `local` destination holds, for every row, exactly the changes the
//!   writer committed, in commit order: nothing read and lost, nothing
//!   staged twice.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool, Row};
use rand::Rng;
use serde_json::Value;

const STREAM: &str = "items";
const KILLS: usize = 6;
const BEFORE: i64 = 20_000;
/// How long the writer runs, across all the kills.
const WRITING: Duration = Duration::from_secs(30);

/// A change as the history must show it: (op, version).
type Change = (String, i64);

struct Writer {
    src: PgPool,
    schema: String,
    /// id -> the changes committed to it, in order.
    expected: BTreeMap<i64, Vec<Change>>,
    extra: bool,
}

impl Writer {
    fn table(&self) -> String {
        format!("\"{}\".items", self.schema)
    }

    /// One transaction: `inserts` new rows, `updates` and `deletes` of
    /// random live rows.
    async fn transaction(&mut self, inserts: i64, updates: i64, deletes: i64) {
        let t = self.table();
        let mut tx = self.src.begin().await.unwrap();
        let extra = if self.extra { ", extra" } else { "" };
        let extra_v = if self.extra { ", 'x' || g" } else { "" };
        let ids: Vec<i64> = sqlx::query_scalar(&format!(
            "INSERT INTO {t} (version, name, amount, body{extra})
             SELECT 1, 'n' || g, round((g * 3.17)::numeric % 1000, 2), repeat('b', (10 + g % 50)::int){extra_v}
             FROM generate_series(1, $1) AS g RETURNING id"
        ))
        .bind(inserts)
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        let mut changes: Vec<(i64, Change)> = ids
            .into_iter()
            .map(|id| (id, ("insert".into(), 1)))
            .collect();
        for row in sqlx::query(&format!(
            "UPDATE {t} SET version = version + 1, amount = amount + 1
             WHERE id IN (SELECT id FROM {t} ORDER BY random() LIMIT $1) RETURNING id, version"
        ))
        .bind(updates)
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        {
            changes.push((
                row.get(0),
                ("update".into(), i64::from(row.get::<i32, _>(1))),
            ));
        }
        for row in sqlx::query(&format!(
            "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} ORDER BY random() LIMIT $1)
             RETURNING id, version"
        ))
        .bind(deletes)
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        {
            changes.push((
                row.get(0),
                ("delete".into(), i64::from(row.get::<i32, _>(1))),
            ));
        }
        tx.commit().await.unwrap();
        for (id, c) in changes {
            self.expected.entry(id).or_default().push(c);
        }
    }
}

async fn rows(pool: &PgPool, table: &str) -> BTreeMap<i64, (i32, String, String, Option<String>)> {
    let rows: Vec<(i64, i32, String, String, Option<String>)> = sqlx::query_as(&format!(
        "SELECT id, version, name, amount::text, extra FROM {table}"
    ))
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    rows.into_iter()
        .map(|(id, v, n, a, e)| (id, (v, n, a, e)))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn table_changes_reach_every_destination_once_in_order_through_kills() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst_url = abrq_testkit::Postgres::from_env().url;
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    // slots of earlier runs that died before cleaning up hold WAL
    sqlx::query(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
         WHERE slot_name LIKE 'abrq_cdct_%' AND NOT active",
    )
    .execute(&src)
    .await
    .unwrap();
    let n: u64 = rand::rng().random();
    let tag = format!("{:010x}", n & 0xff_ffff_ffff);
    let (schema, slot) = (format!("cdc_src_{tag}"), format!("abrq_cdct_{tag}"));
    let dst_schema = format!("cdc_dst_{tag}");
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&src)
        .await
        .unwrap();
    sqlx::query(&format!(
        "CREATE TABLE \"{schema}\".items (id bigserial PRIMARY KEY, version int NOT NULL,
         name text NOT NULL, amount numeric(12,2) NOT NULL, body text)"
    ))
    .execute(&src)
    .await
    .unwrap();
    // rows from before the slot: the snapshot copies them
    sqlx::query(&format!(
        "INSERT INTO \"{schema}\".items (version, name, amount, body)
         SELECT 1, 'old' || g, g, NULL FROM generate_series(1, {BEFORE}) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
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
name = "{STREAM}"
[streams.source]
engine = "postgres"
mode = "cdc"
{src_conn}
table = "{schema}.items"
slot = "{slot}"
publication = "{slot}"
[streams.batch]
max_records = 500
max_wait = "100ms"

[[streams.destinations]]
name = "replica"
engine = "postgres"
{dst_conn}
schema = "{dst_schema}"
table = "items"
mode = "upsert"

[[streams.destinations]]
name = "history"
engine = "local"
database = "{history}"
format = "jsonl"
manifest = true
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        src_conn = pg::connection_toml(&pg::cdc_url()),
        dst_conn = pg::connection_toml(&dst_url),
        history = abrq.p("out/history"),
    ));
    let config_path = abrq.config_path().display().to_string();
    let (_, check, _) = abrq.cli(&["check", "-c", &config_path]).await;
    assert!(
        check.contains("ok    items source (postgres): logical decoding ready"),
        "{check}"
    );

    abrq.start().await;
    pg::wait_slot_ready(&src, &slot).await;

    // the copy is read from the slot's own snapshot while the writer
    // runs; the kills below come once it is staged (a copy cut short goes
    // on at a later state: postgres_cdc_snapshot.rs)
    let mut w = Writer {
        src: src.clone(),
        schema: schema.clone(),
        expected: (1..=BEFORE)
            .map(|id| (id, vec![("insert".into(), 1)]))
            .collect(),
        extra: false,
    };
    w.transaction(20, 10, 2).await;
    abrq.wait_status(STREAM, "the snapshot copied", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    w.transaction(300, 0, 0).await;
    // emptied at its position: the replica loses these rows, the history
    // keeps them
    sqlx::query(&format!("TRUNCATE {}", w.table()))
        .execute(&src)
        .await
        .unwrap();
    let mut rng = rand::rng();
    // the writer commits all along (30 s in all); in each slice of that
    // time abrq is killed at a random moment and started again at once
    let slice = WRITING / KILLS as u32;
    for round in 0..KILLS {
        let kill_at = rng.random_range(Duration::ZERO..slice);
        let started = std::time::Instant::now();
        let mut done = 0;
        let mut killed = false;
        while started.elapsed() < slice {
            let (i, u, d) = (
                rng.random_range(1..80),
                rng.random_range(0..30),
                rng.random_range(0..6),
            );
            w.transaction(i, u, d).await;
            done += 1;
            match round {
                1 if done == 20 => {
                    // several batches in one source transaction
                    w.transaction(2_300, 50, 10).await;
                }
                3 if done == 20 => {
                    sqlx::query(&format!("ALTER TABLE {} ADD COLUMN extra text", w.table()))
                        .execute(&src)
                        .await
                        .unwrap();
                    w.extra = true;
                }
                _ => {}
            }
            if !killed && started.elapsed() >= kill_at {
                abrq.note(&format!(
                    "round {round}: SIGKILL after {} ms and {done} transactions",
                    kill_at.as_millis()
                ));
                abrq.kill();
                abrq.start().await;
                killed = true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    w.transaction(40, 20, 5).await;

    let want = rows(&src, &w.table()).await;
    let replica = format!("\"{dst_schema}\".items");
    wait_until(LONG, "the replica equals the source table", async || {
        rows(&dst, &replica).await == want
    })
    .await;
    assert!(
        want.values().any(|r| r.3.is_some()),
        "rows with the added column"
    );

    let st = abrq
        .wait_drained(STREAM, Duration::from_secs(1), LONG)
        .await;
    assert_eq!(
        u(&dest_of(&st, "history")["pending_dead_letters"]),
        0,
        "{st}"
    );
    let out = read_dest(&abrq.path("out/history"));
    let mut found: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
    // objects in stream order (their manifests carry the seq)
    let in_order = out.verify_manifests(STREAM);
    assert_eq!(in_order.len(), out.objects.len());
    for r in in_order
        .iter()
        .flat_map(|(_, key)| &out.objects[key].records)
    {
        let op = match &r.get("_abrq_op") {
            Some(Value::String(op)) => op.clone(),
            _ => "insert".into(),
        };
        let id = r["id"].as_i64().expect("id");
        let version = r.get("version").and_then(Value::as_i64).unwrap_or(-1);
        found.entry(id).or_default().push((op, version));
    }
    let mut wrong = Vec::new();
    for (id, changes) in &w.expected {
        let got = found.remove(id).unwrap_or_default();
        // a delete carries only the key with the default replica identity
        let got: Vec<Change> = got
            .into_iter()
            .enumerate()
            .map(|(i, (op, v))| match op.as_str() {
                "delete" => (op, changes.get(i).map_or(-1, |c| c.1)),
                _ => (op, v),
            })
            .collect();
        if &got != changes {
            wrong.push(format!("id {id}: want {changes:?}, found {got:?}"));
        }
    }
    assert!(found.is_empty(), "changes to rows never written: {found:?}");
    assert!(
        wrong.is_empty(),
        "{} rows differ, first: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    abrq.kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
