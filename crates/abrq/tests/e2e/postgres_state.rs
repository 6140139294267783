//! `[state] url = "postgres://..."`: the whole binary on PostgreSQL state.
//! A file is delivered to a local destination with `run --until-drained`;
//! a second run on the same state delivers nothing again (the cursor and
//! the mark live in PostgreSQL, not in the data dir, which is wiped); the
//! operator API and `check` work on it.

use std::time::Duration;

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, postgres::PgPool};
use serde_json::json;

struct Database {
    admin: PgPool,
    name: String,
}

impl Database {
    async fn fresh() -> (Database, String) {
        let pg = abrq_testkit::Postgres::from_env();
        let admin = PgPool::connect(&pg.url).await.expect("connect to postgres");
        let name = format!("abrq_state_e2e_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            format!("CREATE DATABASE {name}"),
        ] {
            sqlx::query(&sql).execute(&admin).await.expect(&sql);
        }
        let url = pg.url_for(&name).expect("a url");
        (Database { admin, name }, url)
    }

    async fn drop(self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = sqlx::query(&sql).execute(&self.admin).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_runs_on_postgres_state() {
    let (db, url) = Database::fresh().await;
    let mut abrq = Abrq::new();
    let input = abrq.path("orders.ndjson");
    append_ndjson(
        &input,
        (0..2500).map(|i| json!({"id": i, "customer": i % 7})),
    );
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"

[state]
url = "{url}"

[server]
listen = "{listen}"

[[streams]]
name = "orders"
[streams.source]
engine = "file"
path = "{input}"
[streams.batch]
max_records = 500

[[streams.destinations]]
name = "lake"
engine = "local"
database = "{lake}"
format = "jsonl"
"#,
        data = abrq.p("data"),
        listen = abrq.listen(),
        input = input.display(),
        lake = abrq.p("out/lake"),
    ));
    let config = abrq.config_path().display().to_string();

    let (status, stdout, stderr) = abrq.cli(&["check", "--config", &config]).await;
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("ok    state store"), "{stdout}");

    let run = [
        "run",
        "--config",
        &config,
        "--until-drained",
        "--no-progress",
    ];
    abrq.spawn(&run);
    assert!(abrq.wait_exit(Duration::from_secs(120)).await.success());
    let out = read_dest(&abrq.path("out/lake"));
    assert_eq!(out.records().count(), 2500);
    assert_eq!(out.objects.len(), 5, "{:?}", out.objects.keys());
    // nothing of the state is in the data dir
    assert!(!abrq.path("data/state.db").exists());

    // Again, with the data dir gone: the state in PostgreSQL says the
    // file was read and delivered, so nothing is delivered twice.
    std::fs::remove_dir_all(abrq.path("data")).ok();
    abrq.spawn(&run);
    assert!(abrq.wait_exit(Duration::from_secs(120)).await.success());
    assert_eq!(read_dest(&abrq.path("out/lake")).records().count(), 2500);

    // The operator API on it: pause shows in status, and in the audit log.
    abrq.start().await;
    abrq.act("orders", "lake", "pause").await;
    let st = abrq.status("orders").await;
    assert_eq!(dest_of(&st, "lake")["paused"], true, "{st}");
    assert_eq!(u(&dest_of(&st, "lake")["high_water_mark"]), 5);
    let audit = abrq.get("/v1/audit").await;
    assert_eq!(audit["entries"][0]["action"], "pause", "{audit}");
    abrq.kill();
    db.drop().await;
}
