//! The `mysql` source in `mode = "cdc"`, through the binary, against the
//! MariaDB server with a row-based binlog that `scripts/services.sh`
//! starts (mysqlcdc): a writer commits multi-row transactions of inserts,
//! updates and deletes, one transaction larger than several batches, an
//! `ALTER TABLE ... ADD COLUMN` and a `TRUNCATE`, while abrq is SIGKILLed
//! and restarted at random moments.
//!
//! - a `postgres` destination in upsert mode, `table = "{table}"`, ends
//!   equal to the source table, with the added column;
//! - a `local` destination holds, for every row, exactly the changes the
//!   writer committed, in commit order, each record naming its table.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use rand::Rng;
use serde_json::Value;

const KILLS: usize = 4;
const WRITING: Duration = Duration::from_secs(16);

/// (op, version) per change, in commit order.
type Change = (String, i64);

struct Writer {
    src: MySqlPool,
    table: String,
    next_id: i64,
    live: Vec<i64>,
    expected: BTreeMap<i64, Vec<Change>>,
    extra: bool,
}

impl Writer {
    async fn transaction(&mut self, inserts: usize, updates: usize, deletes: usize) {
        let t = self.table.clone();
        let mut tx = self.src.begin().await.unwrap();
        let mut changes: Vec<(i64, Change)> = Vec::new();
        for _ in 0..inserts {
            self.next_id += 1;
            let id = self.next_id;
            let sql = match self.extra {
                true => format!("INSERT INTO {t} (id, version, name, amount, at, extra) VALUES (?, 1, ?, ?, NOW(6), 'x')"),
                false => format!("INSERT INTO {t} (id, version, name, amount, at) VALUES (?, 1, ?, ?, NOW(6))"),
            };
            sqlx::query(&sql)
                .bind(id)
                .bind(format!("n{id}"))
                .bind(format!("{}.{:02}", id % 1000, id % 100))
                .execute(&mut *tx)
                .await
                .unwrap();
            self.live.push(id);
            changes.push((id, ("insert".into(), 1)));
        }
        let mut rng = rand::rng();
        for _ in 0..updates {
            if self.live.is_empty() {
                break;
            }
            let id = self.live[rng.random_range(0..self.live.len())];
            sqlx::query(&format!(
                "UPDATE {t} SET version = version + 1, name = 'changed' WHERE id = ?"
            ))
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
            let v = self.version(id, &changes) + 1;
            changes.push((id, ("update".into(), v)));
        }
        for _ in 0..deletes {
            if self.live.is_empty() {
                break;
            }
            let at = rng.random_range(0..self.live.len());
            let id = self.live.swap_remove(at);
            sqlx::query(&format!("DELETE FROM {t} WHERE id = ?"))
                .bind(id)
                .execute(&mut *tx)
                .await
                .unwrap();
            let v = self.version(id, &changes);
            changes.push((id, ("delete".into(), v)));
        }
        tx.commit().await.unwrap();
        for (id, c) in changes {
            self.expected.entry(id).or_default().push(c);
        }
    }

    fn version(&self, id: i64, pending: &[(i64, Change)]) -> i64 {
        pending
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, c)| c.1)
            .or_else(|| self.expected.get(&id).and_then(|v| v.last()).map(|c| c.1))
            .unwrap_or(1)
    }
}

async fn source_rows(
    src: &MySqlPool,
    table: &str,
) -> Vec<(i64, i64, String, String, Option<String>)> {
    let extra = sqlx::query_scalar::<_, i64>(&format!(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) = '{}' AND COLUMN_NAME = 'extra'",
        table.replace('`', "")
    ))
    .fetch_one(src)
    .await
    .unwrap()
        > 0;
    let sql = format!(
        "SELECT id, CAST(version AS SIGNED), name, CAST(amount AS CHAR), {} FROM {table} ORDER BY id",
        if extra { "extra" } else { "CAST(NULL AS CHAR)" }
    );
    sqlx::query_as(&sql).fetch_all(src).await.unwrap()
}

async fn replica_rows(
    dst: &PgPool,
    table: &str,
) -> Vec<(i64, i64, String, String, Option<String>)> {
    let extra = sqlx::query_scalar::<_, i64>(&format!(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema || '.' || table_name = '{}' AND column_name = 'extra'",
        table.replace('"', "")
    ))
    .fetch_one(dst)
    .await
    .unwrap_or(0)
        > 0;
    let sql = format!(
        "SELECT id, version::int8, name, amount::text, {} FROM {table} ORDER BY id",
        if extra { "extra" } else { "NULL::text" }
    );
    sqlx::query_as(&sql)
        .fetch_all(dst)
        .await
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn binlog_changes_reach_every_destination_once_in_order_through_kills() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    // a restart may read the ADD COLUMN below from a backlog: changes
    // carry their column names, kept so while this test runs
    let _metadata = mysqlcdc::ROW_METADATA.lock().await;
    sqlx::query("SET GLOBAL binlog_row_metadata = FULL")
        .execute(&src)
        .await
        .unwrap();
    let dst_url = pg::url();
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    let tag = pg::tag();
    let (name, dst_schema) = (format!("items_{tag}"), format!("mycdc_dst_{tag}"));
    let table = format!("`test`.`{name}`");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, version int NOT NULL, name varchar(64) NOT NULL, \
         amount decimal(12,2) NOT NULL, at datetime(6) NULL)"
    ))
    .execute(&src)
    .await
    .unwrap();
    sqlx::query(&format!("CREATE SCHEMA \"{dst_schema}\""))
        .execute(&dst)
        .await
        .unwrap();

    let mut abrq = Abrq::new();
    let url = reqwest::Url::parse(&mysqlcdc::url()).unwrap();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"

[[streams]]
name = "shop"
[streams.source]
engine = "mysql"
mode = "cdc"
host = "{host}"
port = {port}
database = "test"
username = "{user}"
table = "{name}"
snapshot = "never"
[streams.batch]
max_records = 500
max_wait = "20ms"

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
manifest = true
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        host = url.host_str().unwrap(),
        port = url.port().unwrap_or(3306),
        user = url.username(),
        dst_conn = pg::connection_toml(&dst_url),
        history = abrq.p("out/history"),
    ));
    let config_path = abrq.config_path().display().to_string();
    let (_, check, _) = abrq.cli(&["check", "-c", &config_path]).await;
    assert!(
        check.contains("ok    shop source (mysql): binlog ready"),
        "{check}"
    );
    abrq.start().await;
    abrq.wait_status("shop", "the binlog read", |st| {
        !st["source"]["position"]["binlog"].is_null()
    })
    .await;

    let mut w = Writer {
        src: src.clone(),
        table: table.clone(),
        next_id: 0,
        live: Vec::new(),
        expected: BTreeMap::new(),
        extra: false,
    };
    let mut rng = rand::rng();
    let slice = WRITING / KILLS as u32;
    for round in 0..KILLS {
        let kill_at = rng.random_range(Duration::ZERO..slice);
        let started = std::time::Instant::now();
        let (mut done, mut killed) = (0, false);
        while started.elapsed() < slice {
            let (i, u, d) = (
                rng.random_range(1..40),
                rng.random_range(0..15),
                rng.random_range(0..4),
            );
            w.transaction(i, u, d).await;
            done += 1;
            match (round, done) {
                (1, 10) => w.transaction(1_300, 50, 10).await, // spans batches
                (2, 10) => {
                    sqlx::query(&format!(
                        "ALTER TABLE {table} ADD COLUMN extra varchar(16) NULL"
                    ))
                    .execute(&src)
                    .await
                    .unwrap();
                    w.extra = true;
                }
                (3, 10) => {
                    // emptied at its position: the replica loses these rows,
                    // the history keeps them
                    sqlx::query(&format!("TRUNCATE TABLE {table}"))
                        .execute(&src)
                        .await
                        .unwrap();
                    w.live.clear();
                }
                _ => {}
            }
            if !killed && started.elapsed() >= kill_at {
                abrq.note(&format!("round {round}: SIGKILL after {done} transactions"));
                abrq.kill();
                abrq.start().await;
                killed = true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    w.transaction(20, 10, 3).await;

    let want = source_rows(&src, &table).await;
    assert!(
        want.iter().any(|r| r.4.is_some()),
        "rows with the added column"
    );
    let replica = format!("\"{dst_schema}\".\"{name}\"");
    wait_until(LONG, "the replica equals the source table", async || {
        replica_rows(&dst, &replica).await == want
    })
    .await;
    let st = abrq
        .wait_drained("shop", Duration::from_secs(1), LONG)
        .await;
    for d in ["replica", "history"] {
        assert_eq!(u(&dest_of(&st, d)["pending_dead_letters"]), 0, "{d}: {st}");
    }

    // the history: every committed change, in commit order per row, once
    // (objects in stream order, by their manifests' seq)
    let out = read_dest(&abrq.path("out/history"));
    let mut found: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
    let in_order = out.verify_manifests("shop");
    assert_eq!(in_order.len(), out.objects.len());
    for (_, key) in &in_order {
        for r in &out.objects[key].records {
            assert_eq!(
                r.get("_abrq_table").and_then(Value::as_str),
                Some(format!("test.{name}").as_str()),
                "{r:?}"
            );
            let op = r
                .get("_abrq_op")
                .and_then(Value::as_str)
                .unwrap_or("insert")
                .to_string();
            let id = r["id"].as_i64().expect("id");
            let version = r.get("version").and_then(Value::as_i64).unwrap_or(-1);
            found.entry(id).or_default().push((op, version));
        }
    }
    let mut wrong = Vec::new();
    for (id, changes) in &w.expected {
        let got: Vec<Change> = found
            .remove(id)
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, (op, v))| match op.as_str() {
                // a delete carries only the key
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

    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&src)
        .await
        .unwrap();
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
