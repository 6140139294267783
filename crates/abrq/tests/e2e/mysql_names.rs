//! Field names MySQL cannot take as column names, through the real binary:
//! an HTTP-fed stream with a MariaDB destination and a local one. Each bad
//! batch (a field that is a case twin of another or of a column, a name
//! ending in a space, a name with an emoji) is dead-lettered for MariaDB
//! at its first attempt as `rejected`, naming its bad records; the breaker
//! stays closed and the good batches after it land; the local destination
//! gets everything. Then the operator renames the column the source now
//! spells differently, and the replay of that dead letter lands.
//!
//! Retries are short and the breaker trips at 2 failures, so a name error
//! misfiled as transient fails here in seconds (attempts, breaker), rather
//! than hanging.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool, Row};
use rand::Rng;
use serde_json::{json, Value};

const STREAM: &str = "people";
const DL: &str = "/v1/streams/people/destinations/my/dead-letters";

struct Server {
    password: String,
    url: String,
}

fn server(url: &str) -> Server {
    let u = reqwest::Url::parse(url).expect("database url");
    Server {
        password: u.password().unwrap_or_default().to_string(),
        url: url.to_string(),
    }
}

fn config(abrq: &Abrq, my: &Server, database: &str) -> String {
    let dest = Destination::mysql("my")
        .connection(&my.url)
        .database(database)
        .table("people")
        .max_attempts(3)
        .backoff("10ms", "20ms")
        .attempt_timeout("20s")
        .failure_threshold(2)
        .cooldown("1h");
    let dest = match my.password.is_empty() {
        true => dest,
        false => dest.password(&my.password),
    };
    Config::new(abrq)
        .stream(
            Stream::new(STREAM, Source::http())
                .destination(dest)
                .destination(Destination::local("lake", abrq.p("out/lake")).format("jsonl")),
        )
        .to_string()
}

fn ndjson(records: &[Value]) -> String {
    records.iter().map(|r| format!("{r}\n")).collect()
}

/// A bad batch: its records, and the causes its dead letter must name.
struct Bad {
    records: Vec<Value>,
    causes: Vec<&'static str>,
}

#[tokio::test(flavor = "multi_thread")]
async fn names_mysql_cannot_take_are_rejected_at_once_and_a_fixed_table_takes_the_replay() {
    let my = server(&abrq_testkit::Mysql::from_env().url);
    let database = format!("abrq_names_{:012x}", rand::rng().random::<u64>() >> 16);
    let admin = MySqlPool::connect(&my.url).await.expect("mariadb");
    sqlx::query(&format!("CREATE DATABASE `{database}`"))
        .execute(&admin)
        .await
        .unwrap();

    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &my, &database));
    abrq.start().await;

    let good = |id: u64| vec![json!({"id": id, "name": format!("p{id}")})];
    let bad = [
        // seq 2: one record with both spellings (never lands as it is)
        Bad {
            records: vec![
                json!({"id": 10, "name": "ok"}),
                json!({"id": 11, "Name": "Cy", "name": "cy"}),
            ],
            causes: vec![
                r#"record 1: field "Name" collides with column "name" of the table (MySQL column names are case-insensitive)"#,
            ],
        },
        // seq 4: a trailing space
        Bad {
            records: vec![
                json!({"id": 20, "name": "ok"}),
                json!({"id": 21, "name ": "x"}),
                json!({"id": 22, "name ": "y"}),
            ],
            causes: vec![
                r#"record 1: field "name ": the name ends with ' '"#,
                r#"record 2: field "name ": the name ends with ' '"#,
            ],
        },
        // seq 6: an emoji (outside the BMP)
        Bad {
            records: vec![json!({"id": 30, "mood😀": "fine"})],
            causes: vec![r#"record 0: field "mood😀": the name contains '😀' (U+1F600)"#],
        },
        // seq 8: the source now spells the field `Name`
        Bad {
            records: vec![
                json!({"id": 40, "Name": "Ivy"}),
                json!({"id": 41, "Name": "Jo"}),
            ],
            causes: vec![
                r#"record 0: field "Name" collides with column "name" of the table"#,
                r#"record 1: field "Name" collides with column "name" of the table"#,
            ],
        },
    ];
    // good, bad, good, bad, ... good: seqs 1..=9, each request one batch
    let mut records = 0;
    for (i, b) in bad.iter().enumerate() {
        let g = good(i as u64 + 1);
        for batch in [&g, &b.records] {
            let ack = abrq.ingest(STREAM, &ndjson(batch)).await;
            assert_eq!(ack["batches"], 1, "{ack}");
            records += batch.len();
        }
    }
    let last = good(5);
    let ack = abrq.ingest(STREAM, &ndjson(&last)).await;
    assert_eq!(ack["last_seq"], 9, "{ack}");
    records += last.len();

    let st = abrq
        .wait_status(STREAM, "both destinations past seq 9", |st| {
            // a name error taken for transient opens it within 2 attempts
            let mine = dest_of(st, "my");
            assert_eq!(mine["breaker"]["state"], "closed", "{mine}");
            u(&mine["high_water_mark"]) == 9 && u(&dest_of(st, "lake")["high_water_mark"]) == 9
        })
        .await;
    let mine = dest_of(&st, "my");
    assert_eq!(mine["breaker"]["state"], "closed", "{mine}");
    assert_eq!(u(&mine["pending_dead_letters"]), 4, "{mine}");
    assert_eq!(u(&mine["delivered_batches"]), 5, "{mine}");

    let mut dls = abrq.dead_letters(STREAM, "my").await;
    dls.sort_by_key(|d| u(&d["seq"]));
    assert_eq!(dls.len(), 4, "{dls:?}");
    for (dl, (b, seq)) in dls.iter().zip(bad.iter().zip([2, 4, 6, 8])) {
        assert_eq!(u(&dl["seq"]), seq, "{dl}");
        assert_eq!(dl["reason_class"], "rejected", "{dl}");
        assert_eq!(u(&dl["attempts"]), 1, "dead-lettered at once: {dl}");
        let error = dl["error"].as_str().unwrap();
        for cause in &b.causes {
            assert!(error.contains(cause), "{cause:?} not in {error}");
        }
        // only the bad records are named
        let named = error.matches("record ").count();
        assert_eq!(named, b.causes.len(), "{error}");
    }
    let m = abrq.metrics().await;
    assert_eq!(
        m.get(
            "abrq_stream_fanout_circuit_opened_total",
            &[("destination_kind", "mysql")]
        ),
        0.0
    );
    assert_eq!(
        m.get(
            "abrq_stream_fanout_dead_lettered_batches_total",
            &[("destination", "my"), ("reason_class", "rejected")]
        ),
        4.0
    );

    // the good batches landed, nothing of the bad ones did
    let ids = |pool: &MySqlPool| {
        let sql = format!("SELECT id FROM `{database}`.`people` ORDER BY id");
        let pool = pool.clone();
        async move {
            sqlx::query(&sql)
                .fetch_all(&pool)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<i64, _>(0))
                .collect::<Vec<i64>>()
        }
    };
    assert_eq!(ids(&admin).await, vec![1, 2, 3, 4, 5]);
    // the local destination got every record
    let lake = read_dest(&abrq.path("out/lake"));
    assert_eq!(lake.record_count(), records);

    // the operator follows the source's new spelling and replays seq 8
    sqlx::query(&format!(
        "ALTER TABLE `{database}`.`people` RENAME COLUMN `name` TO `Name`"
    ))
    .execute(&admin)
    .await
    .unwrap();
    let id = dls[3]["id"].clone();
    abrq.post(&format!("{DL}/{id}/replay")).await;
    abrq.wait_for("the replay of seq 8 to land", async || {
        abrq.dead_letters(STREAM, "my")
            .await
            .iter()
            .any(|d| d["id"] == id && d["state"] == "replayed")
    })
    .await;
    assert_eq!(ids(&admin).await, vec![1, 2, 3, 4, 5, 40, 41]);
    let name: Option<String> = sqlx::query_scalar(&format!(
        "SELECT `Name` FROM `{database}`.`people` WHERE id = 41"
    ))
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(name.as_deref(), Some("Jo"));
    let mine = abrq.dest(STREAM, "my").await;
    assert_eq!(mine["breaker"]["state"], "closed", "{mine}");
    assert_eq!(u(&mine["pending_dead_letters"]), 3, "{mine}");

    sqlx::query(&format!("DROP DATABASE `{database}`"))
        .execute(&admin)
        .await
        .unwrap();
}
