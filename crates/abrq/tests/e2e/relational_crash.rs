//! SIGKILL abrq at random moments while it delivers to PostgreSQL and
//! MariaDB, restart it each time, then let `run --until-drained` finish:
//! the ledger must leave every row exactly once, none missing.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx;
use rand::{Rng, SeedableRng};

const RECORDS: u64 = 60_000;
const KILLS: usize = 8;

struct Server {
    host: String,
    port: u16,
    user: String,
    database: String,
    url: String,
}

fn server(url: &str) -> Server {
    let u = reqwest::Url::parse(url).expect("database url");
    Server {
        host: u.host_str().unwrap_or("127.0.0.1").to_string(),
        port: u.port().unwrap_or(0),
        user: u.username().to_string(),
        database: u.path().trim_start_matches('/').to_string(),
        url: url.to_string(),
    }
}

fn unique(prefix: &str) -> String {
    let n: u64 = rand::rng().random();
    format!("{prefix}_{:012x}", n & 0xffff_ffff_ffff)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_relational_delivery_leaves_no_duplicate_and_no_gap() {
    let pg = server(&abrq_testkit::Postgres::from_env().url);
    let my = server(&abrq_testkit::Mysql::from_env().url);
    let schema = unique("abrq_crash");
    let mydb = unique("abrq_crash");
    let pg_pool = sqlx::PgPool::connect(&pg.url).await.expect("postgres");
    let my_pool = sqlx::MySqlPool::connect(&my.url).await.expect("mariadb");
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&pg_pool)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE DATABASE `{mydb}`"))
        .execute(&my_pool)
        .await
        .unwrap();

    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"
[[streams]]
name = "orders"
[streams.source]
engine = "generate"
records = {RECORDS}
[streams.batch]
max_records = 500
[[streams.destinations]]
name = "pg"
engine = "postgres"
host = "{pg_host}"
port = {pg_port}
database = "{pg_db}"
username = "{pg_user}"
schema = "{schema}"
table = "orders"
[[streams.destinations]]
name = "my"
engine = "mysql"
host = "{my_host}"
port = {my_port}
database = "{mydb}"
username = "{my_user}"
table = "orders"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        pg_host = pg.host,
        pg_port = pg.port,
        pg_db = pg.database,
        pg_user = pg.user,
        my_host = my.host,
        my_port = my.port,
        my_user = my.user,
    ));
    let seed: u64 = std::env::var("ABRQ_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    abrq.note(&format!("seed {seed}"));
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..KILLS {
        abrq.start().await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1500))).await;
        abrq.kill();
    }
    let config = abrq.config_path().display().to_string();
    abrq.spawn(&[
        "run",
        "--config",
        &config,
        "--until-drained",
        "--no-progress",
    ]);
    let status = abrq.wait_exit(Duration::from_secs(300)).await;
    assert!(status.success(), "final run failed:\n{}", abrq.log());

    // Every row read back: each order exactly once, none missing.
    let rows = [
        (
            "postgres",
            sinks::postgres(&pg.url, &schema, "orders").await,
        ),
        ("mariadb", sinks::mysql(&my.url, &mydb, "orders").await),
    ];
    for (what, rows) in rows {
        let mut ids: Vec<u64> = rows
            .iter()
            .map(|r| r["order_id"].as_u64().expect("order_id"))
            .collect();
        ids.sort_unstable();
        let dups = ids.windows(2).filter(|w| w[0] == w[1]).count();
        assert_eq!(dups, 0, "{what}: {dups} duplicate rows");
        assert!(ids.iter().copied().eq(1..=RECORDS), "{what}: a gap");
    }

    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pg_pool)
        .await
        .unwrap();
    sqlx::query(&format!("DROP DATABASE `{mydb}`"))
        .execute(&my_pool)
        .await
        .unwrap();
}
