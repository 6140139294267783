//! The `mysql` source in `mode = "cursor"`, through the binary, on the
//! machine's MariaDB (which runs without a binlog: polling needs none): a
//! table polled by `updated_at` with its primary key as tie-break, while a
//! writer inserts and updates rows and abrq is killed and restarted. A
//! `postgres` destination in upsert mode ends equal to the source table.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, PgPool};
use rand::Rng;

const BEFORE: i64 = 3_000;
const ROUNDS: usize = 4;

async fn source(src: &MySqlPool, table: &str) -> Vec<(i64, i64, String)> {
    sqlx::query_as(&format!(
        "SELECT id, CAST(total AS SIGNED), note FROM {table} ORDER BY id"
    ))
    .fetch_all(src)
    .await
    .unwrap()
}

async fn replica(dst: &PgPool, table: &str) -> Vec<(i64, i64, String)> {
    sqlx::query_as(&format!(
        "SELECT id, total::int8, note FROM {table} ORDER BY id"
    ))
    .fetch_all(dst)
    .await
    .unwrap_or_default()
}

async fn write(src: &MySqlPool, table: &str, next: &mut i64) {
    let mut rng = rand::rng();
    for _ in 0..30 {
        if rng.random_bool(0.5) {
            *next += 1;
            sqlx::query(&format!(
                "INSERT INTO {table} (id, total, note) VALUES (?, 1, 'new')"
            ))
            .bind(*next)
            .execute(src)
            .await
            .unwrap();
        } else {
            let id = rng.random_range(1..=*next);
            sqlx::query(&format!(
                "UPDATE {table} SET total = total + 1, note = 'updated', updated_at = NOW(6) WHERE id = ?"
            ))
            .bind(id)
            .execute(src)
            .await
            .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn polled_table_reaches_an_upsert_replica_through_kills() {
    let url = abrq_testkit::Mysql::from_env().url;
    let src = MySqlPool::connect(&url).await.expect("mysql");
    let dst_url = pg::url();
    let dst = PgPool::connect(&dst_url).await.expect("postgres");
    let tag = pg::tag();
    let (name, dst_schema) = (format!("polled_{tag}"), format!("mycur_dst_{tag}"));
    let table = format!("`{name}`");
    for sql in [
        format!(
            "CREATE TABLE {table} (id bigint PRIMARY KEY, total int NOT NULL, note varchar(32) NOT NULL, \
             updated_at datetime(6) NOT NULL DEFAULT NOW(6), KEY (updated_at, id))"
        ),
        format!("INSERT INTO {table} (id, total, note) SELECT seq, 0, 'old' FROM seq_1_to_{BEFORE}"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }
    sqlx::query(&format!("CREATE SCHEMA \"{dst_schema}\""))
        .execute(&dst)
        .await
        .unwrap();
    let u = reqwest::Url::parse(&url).unwrap();
    let mut abrq = Abrq::new();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"
[server]
listen = "{listen}"

[[streams]]
name = "orders"
[streams.source]
engine = "mysql"
mode = "cursor"
host = "{host}"
port = {port}
database = "{db}"
username = "{user}"
table = "{name}"
cursor = "updated_at"
poll_interval = "50ms"
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
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        host = u.host_str().unwrap(),
        port = u.port().unwrap_or(3306),
        db = u.path().trim_start_matches('/'),
        user = u.username(),
        dst_conn = pg::connection_toml(&dst_url),
    ));
    let config_path = abrq.config_path().display().to_string();
    let (_, check, _) = abrq.cli(&["check", "-c", &config_path]).await;
    assert!(
        check.contains(
            "ok    orders source (mysql): 4 columns, read in order of updated_at then (id)"
        ),
        "{check}"
    );
    abrq.start().await;
    let mut next = BEFORE;
    let mut rng = rand::rng();
    for round in 0..ROUNDS {
        write(&src, &table, &mut next).await;
        let ms = rng.random_range(20..300);
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        abrq.note(&format!("round {round}: SIGKILL after {ms} ms"));
        abrq.kill();
        abrq.start().await;
    }
    write(&src, &table, &mut next).await;
    // rows committed in the same microsecond as an earlier read are the
    // documented limit of polling; the writer's NOW(6) moves on between
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let want = source(&src, &table).await;
    let replica_table = format!("\"{dst_schema}\".\"{name}\"");
    wait_until(LONG, "the replica equals the source table", async || {
        replica(&dst, &replica_table).await == want
    })
    .await;
    abrq.kill();
    sqlx::query(&format!("DROP TABLE {table}"))
        .execute(&src)
        .await
        .unwrap();
    pg::drop_schemas(&dst, &[&dst_schema]).await;
}
