//! Every change in commit order per key, through random SIGKILLs, for
//! both change sources. One writer commits transactions of inserts,
//! updates and deletes over a few keys (a key's rows carry a version
//! that each change raises) while abrq is SIGKILLed at random moments
//! and restarted. Then, read back through each side's own client:
//! - the upsert replica equals the source table;
//! - the JSON lines history holds, for every key, exactly the changes the
//!   writer committed, once each, in commit order (objects read in seq
//!   order; a batch delivered twice overwrites its own object).
//!
//! `ABRQ_ORDER_SEED` replays a run; `ABRQ_ORDER_TXS` sets its length.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: i64 = 40;

/// One committed change of a key: its op and, unless a delete, its version.
type Change = (&'static str, Option<i64>);

/// The writer's transactions (statements on `{t}`) and, per key, the
/// changes they commit, in commit order.
fn workload(seed: u64, txs: usize) -> (Vec<Vec<String>>, BTreeMap<i64, Vec<Change>>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut version: BTreeMap<i64, i64> = BTreeMap::new();
    let mut live: BTreeMap<i64, bool> = BTreeMap::new();
    let mut changes: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
    let mut out = Vec::new();
    for _ in 0..txs {
        let mut tx = Vec::new();
        for _ in 0..rng.random_range(1..=6) {
            let k = rng.random_range(0..KEYS);
            let v = version.entry(k).or_insert(0);
            let exists = live.get(&k).copied().unwrap_or(false);
            if exists && rng.random_bool(0.15) {
                tx.push(format!("DELETE FROM {{t}} WHERE id = {k}"));
                changes.entry(k).or_default().push(("delete", None));
                live.insert(k, false);
                continue;
            }
            *v += 1;
            if exists {
                tx.push(format!("UPDATE {{t}} SET v = {v} WHERE id = {k}"));
                changes.entry(k).or_default().push(("update", Some(*v)));
            } else {
                tx.push(format!("INSERT INTO {{t}} (id, v) VALUES ({k}, {v})"));
                changes.entry(k).or_default().push(("insert", Some(*v)));
                live.insert(k, true);
            }
        }
        out.push(tx);
    }
    (out, changes)
}

fn seed_and_txs() -> (u64, usize) {
    let seed = std::env::var("ABRQ_ORDER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    let txs = std::env::var("ABRQ_ORDER_TXS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    println!("cdc_order: ABRQ_ORDER_SEED={seed} ABRQ_ORDER_TXS={txs}");
    (seed, txs)
}

/// Spawns the writer: each transaction of `work` on `pool` (a pool of
/// either engine), `{t}` standing for `table`, one after the other.
macro_rules! spawn_writer {
    ($pool:expr, $table:expr, $work:expr) => {{
        let (pool, table, work) = ($pool.clone(), $table, $work);
        tokio::spawn(async move {
            for stmts in work {
                let mut tx = pool.begin().await.unwrap();
                for s in stmts {
                    let s = s.replace("{t}", &table);
                    sqlx::query(&s).execute(&mut *tx).await.unwrap();
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    }};
}

/// SIGKILLs and restarts abrq at random moments until `writer` ends, a
/// third of the time without waiting until it is ready (so the next kill
/// may land while it starts); the number of kills.
async fn kill_while(abrq: &mut Abrq, seed: u64, writer: tokio::task::JoinHandle<()>) -> u32 {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let config = abrq.config_path().display().to_string();
    let mut kills = 0;
    while !writer.is_finished() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..700))).await;
        abrq.kill();
        kills += 1;
        match rng.random_bool(1.0 / 3.0) {
            true => abrq.spawn(&["run", "--config", &config]),
            false => abrq.start().await,
        }
    }
    writer.await.expect("the writer");
    abrq.wait_ready().await;
    kills
}

/// Per key, the changes the history holds, in seq order.
fn history(abrq: &Abrq, stream: &str) -> BTreeMap<i64, Vec<Change>> {
    let out = read_dest(&abrq.path("out"));
    let mut got: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
    for (_, key) in out.verify_manifests(stream) {
        for r in &out.objects[&key].records {
            let op = match op_of(r) {
                "insert" => "insert",
                "update" => "update",
                "delete" => "delete",
                other => panic!("op {other:?} in {r:?}"),
            };
            let v = match op {
                "delete" => None,
                _ => Some(r["v"].as_i64().expect("a version")),
            };
            got.entry(r["id"].as_i64().expect("an id"))
                .or_default()
                .push((op, v));
        }
    }
    got
}

fn assert_in_commit_order(got: &BTreeMap<i64, Vec<Change>>, want: &BTreeMap<i64, Vec<Change>>) {
    for (k, changes) in want {
        assert_eq!(
            got.get(k),
            Some(changes),
            "key {k}: the history's changes (left) are not the committed ones in order"
        );
    }
    assert_eq!(got.len(), want.len(), "keys nobody wrote");
}

fn config(abrq: &Abrq, source: Source, replica: Destination) -> String {
    Config::new(abrq)
        .stream(
            Stream::new("order", source)
                .max_records(25)
                .max_wait("20ms")
                .destination(replica)
                .destination(
                    Destination::local("history", abrq.p("out"))
                        .format("jsonl")
                        .manifest(),
                ),
        )
        .to_string()
}

async fn wait_delivered(abrq: &Abrq, total: usize) {
    wait_until(LONG, "every change in the history", async || {
        read_dest(&abrq.path("out")).records().count() >= total
    })
    .await;
    abrq.wait_drained("order", Duration::ZERO, LONG).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_changes_arrive_in_commit_order_per_key_through_kills() {
    let (seed, txs) = seed_and_txs();
    let (work, want) = workload(seed, txs);
    let total: usize = want.values().map(Vec::len).sum();
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let dst = PgPool::connect(&pg::url())
        .await
        .expect("the destination server");
    let tag = pg::tag();
    let (schema, slot) = (format!("order_{tag}"), format!("abrq_order_{tag}"));
    let table = format!("\"{schema}\".items");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, v bigint NOT NULL)"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    let mut abrq = Abrq::new();
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.items"))
        .slot(&slot)
        .publication(&slot)
        .snapshot("never");
    let replica = Destination::postgres("replica")
        .connection(&pg::url())
        .schema(&schema)
        .table("items")
        .mode("upsert");
    abrq.write_config(&config(&abrq, source, replica));
    abrq.start().await;
    abrq.wait_status("order", "the slot made", |st| {
        !st["source"]["position"]["read_lsn"].is_null()
    })
    .await;
    let writer = spawn_writer!(src, table.clone(), work);
    let kills = kill_while(&mut abrq, seed, writer).await;
    wait_delivered(&abrq, total).await;
    let rows = "SELECT id::text || '=' || v::text FROM {t} ORDER BY id";
    let source_rows: Vec<String> = sqlx::query_scalar(&rows.replace("{t}", &table))
        .fetch_all(&src)
        .await
        .unwrap();
    let replica_rows: Vec<String> = sqlx::query_scalar(&rows.replace("{t}", &table))
        .fetch_all(&dst)
        .await
        .unwrap();
    println!("postgres: {txs} transactions, {total} changes, {kills} kills");
    assert_eq!(replica_rows, source_rows, "the replica equals the source");
    assert_in_commit_order(&history(&abrq, "order"), &want);
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
    let _ = sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&dst)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_changes_arrive_in_commit_order_per_key_through_kills() {
    let (seed, txs) = seed_and_txs();
    let (work, want) = workload(seed, txs);
    let total: usize = want.values().map(Vec::len).sum();
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let tag = pg::tag();
    let (table, dst_db) = (format!("order_{tag}"), format!("order_replica_{tag}"));
    sqlx::query(&format!(
        "CREATE TABLE `{table}` (id bigint PRIMARY KEY, v bigint NOT NULL)"
    ))
    .execute(&src)
    .await
    .unwrap();
    let mut abrq = Abrq::new();
    let source = Source::mysql("cdc")
        .connection(&mysqlcdc::url())
        .database("test")
        .table(&table)
        .snapshot("never");
    let replica = Destination::mysql("replica")
        .connection(&mysqlcdc::url())
        .database(&dst_db)
        .table("items")
        .mode("upsert");
    abrq.write_config(&config(&abrq, source, replica));
    abrq.start().await;
    abrq.wait_status("order", "reading the binlog", |st| {
        st["source"]["position"]["binlog"].is_object()
    })
    .await;
    let writer = spawn_writer!(src, format!("`{table}`"), work);
    let kills = kill_while(&mut abrq, seed, writer).await;
    wait_delivered(&abrq, total).await;
    let rows = "SELECT CONCAT(id, '=', v) FROM {t} ORDER BY id";
    let source_rows: Vec<String> = sqlx::query_scalar(&rows.replace("{t}", &format!("`{table}`")))
        .fetch_all(&src)
        .await
        .unwrap();
    let replica_rows: Vec<String> =
        sqlx::query_scalar(&rows.replace("{t}", &format!("`{dst_db}`.items")))
            .fetch_all(&src)
            .await
            .unwrap();
    println!("mariadb: {txs} transactions, {total} changes, {kills} kills");
    assert_eq!(replica_rows, source_rows, "the replica equals the source");
    assert_in_commit_order(&history(&abrq, "order"), &want);
    abrq.kill();
    for sql in [
        format!("DROP TABLE `{table}`"),
        format!("DROP DATABASE IF EXISTS `{dst_db}`"),
    ] {
        let _ = sqlx::query(&sql).execute(&src).await;
    }
}
