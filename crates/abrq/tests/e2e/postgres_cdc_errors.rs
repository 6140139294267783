//! What the `postgres` cdc source says when it cannot work, through the
//! binary:
//!
//! - `abrq check` against a server without `wal_level = logical` and a
//!   table without a primary key names both prerequisites and their fix;
//! - a slot dropped while abrq was stopped is a hard, named error: the
//!   source is `stopped` in status with the slot's name and the recovery,
//!   it does not restart by itself, `/readyz` says so, and no change after
//!   the cursor is read from a new slot silently. While it ran, status
//!   showed the slot and its confirmed position;
//! - a definite failure an operator can fix (a table not created yet)
//!   stops the source until `abrq source restart`, after which it copies
//!   and streams as if it had started then.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

fn config(abrq: &Abrq, url: &str, table: &str, slot: &str) -> String {
    Config::new(abrq)
        .stream(
            Stream::new(
                "t",
                Source::postgres("cdc")
                    .connection(url)
                    .table(table)
                    .slot(slot)
                    .publication(slot),
            )
            .max_wait("50ms")
            .destination(Destination::local("out", abrq.p("out"))),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn check_names_every_missing_prerequisite() {
    // the machine's own server runs with wal_level = replica
    let url = abrq_testkit::Postgres::from_env().url;
    let pool = PgPool::connect(&url).await.expect("postgres");
    let schema = format!("cdc_check_{}", pg::tag());
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE TABLE \"{schema}\".nokey (a int, b text)"))
        .execute(&pool)
        .await
        .unwrap();
    let abrq = Abrq::new();
    abrq.write_config(&config(
        &abrq,
        &url,
        &format!("{schema}.nokey"),
        "abrq_check_never",
    ));
    let path = abrq.config_path().display().to_string();
    let (status, out, err) = abrq.cli(&["check", "-c", &path]).await;
    assert!(!status.success(), "{out}{err}");
    assert!(
        out.contains("FAIL  t source (postgres)")
            && out.contains("wal_level is \"replica\": set wal_level = logical")
            && out.contains("has no primary key and REPLICA IDENTITY DEFAULT")
            && out.contains("REPLICA IDENTITY FULL"),
        "{out}"
    );
    sqlx::query(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_slot_is_a_named_failure_never_a_silent_restart() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let t = pg::tag();
    let (schema, slot) = (format!("cdc_lost_{t}"), format!("abrq_lost_{t}"));
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&src)
        .await
        .unwrap();
    let table = format!("\"{schema}\".items");
    sqlx::query(&format!(
        "CREATE TABLE {table} (id int PRIMARY KEY, name text)"
    ))
    .execute(&src)
    .await
    .unwrap();
    let mut abrq = Abrq::new();
    abrq.write_config(&config(
        &abrq,
        &pg::cdc_url(),
        &format!("{schema}.items"),
        &slot,
    ));
    abrq.start().await;
    pg::wait_slot_ready(&src, &slot).await;
    sqlx::query(&format!(
        "INSERT INTO {table} SELECT g, 'n' || g FROM generate_series(1, 10) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
    let st = abrq
        .wait_status("t", "the inserts delivered and the slot confirmed", |st| {
            // a status reads the spool before the destinations: the mark
            // equal to the last seq says the spool read is not behind
            let last = u(&st["spool"]["last_seq"]);
            u(&dest_of(st, "out")["delivered_records"]) == 10
                && last > 0
                && u(&dest_of(st, "out")["high_water_mark"]) == last
                && st["source"]["position"]["confirmed_lsn"].is_string()
        })
        .await;
    assert_eq!(st["source"]["position"]["slot"], slot.as_str(), "{st}");
    let staged = u(&st["spool"]["last_seq"]);
    let (_, shown, _) = abrq.cli(&["status", "--server", &abrq.base()]).await;
    assert!(shown.contains(&format!("slot {slot}, read ")), "{shown}");
    assert!(
        abrq.metrics().await.has("abrq_source_lag_seconds"),
        "lag metric exported"
    );

    abrq.kill();
    wait_until(LONG, "the slot is released", async || {
        sqlx::query("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active")
            .bind(&slot)
            .fetch_optional(&src)
            .await
            .unwrap()
            .is_none()
    })
    .await;
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(&src)
        .await
        .unwrap();
    sqlx::query(&format!("INSERT INTO {table} VALUES (11, 'after')"))
        .execute(&src)
        .await
        .unwrap();

    // not `start`: /readyz is not meant to answer 200 now
    let config = abrq.config_path().display().to_string();
    abrq.spawn(&["run", "--config", &config]);
    let healthz = format!("{}/healthz", abrq.base());
    wait_until(LONG, "abrq to answer /healthz", async || {
        abrq.assert_alive();
        matches!(abrq.http.get(&healthz).send().await, Ok(r) if r.status().is_success())
    })
    .await;
    let st = abrq
        .wait_status("t", "the source stopped on the lost slot", |st| {
            st["source"]["state"] == "stopped"
        })
        .await;
    let error = st["source"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("replication slot \"{slot}\" no longer exists"))
            && error.contains("Recovery"),
        "{st}"
    );
    let recovery = st["source"]["recovery"].as_str().unwrap_or_default();
    assert!(recovery.contains("re-snapshot"), "{st}");
    // the CLI's status names the source's failure and the slot
    let (_, shown, _) = abrq.cli(&["status", "--server", &abrq.base()]).await;
    assert!(
        shown.contains("stopped") && shown.contains("no longer exists"),
        "{shown}"
    );
    let (code, body) = abrq.call(reqwest::Method::GET, "/readyz", None, &[]).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.to_string().contains("no longer exists"), "{body}");
    let failing = abrq
        .metric(
            "abrq_stream_loop_failing",
            &[("stream", "t"), ("loop", "source")],
        )
        .await;
    assert_eq!(failing, 1.0);
    // it does not restart by itself: the same error every time would only
    // look busy
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let st = abrq.status("t").await;
    assert_eq!(st["source"]["state"], "stopped", "{st}");
    assert_eq!(u(&st["source"]["restarts"]), 0, "{st}");
    // no new slot was made behind the operator's back
    let again: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&slot)
            .fetch_optional(&src)
            .await
            .unwrap();
    assert!(again.is_none(), "a slot was created again");
    let st = abrq.status("t").await;
    assert_eq!(
        u(&st["spool"]["last_seq"]),
        staged,
        "nothing staged since: {st}"
    );
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_source_runs_again_when_the_operator_restarts_it() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let t = pg::tag();
    let (schema, slot) = (format!("cdc_later_{t}"), format!("abrq_later_{t}"));
    sqlx::query(&format!("CREATE SCHEMA \"{schema}\""))
        .execute(&src)
        .await
        .unwrap();
    let table = format!("\"{schema}\".items");
    let mut abrq = Abrq::new();
    abrq.write_config(&config(
        &abrq,
        &pg::cdc_url(),
        &format!("{schema}.items"),
        &slot,
    ));
    // not `start`: /readyz is not meant to answer 200 now
    let path = abrq.config_path().display().to_string();
    abrq.spawn(&["run", "--config", &path]);
    let healthz = format!("{}/healthz", abrq.base());
    wait_until(LONG, "abrq to answer /healthz", async || {
        abrq.assert_alive();
        matches!(abrq.http.get(&healthz).send().await, Ok(r) if r.status().is_success())
    })
    .await;
    let st = abrq
        .wait_status("t", "the source stopped: its table does not exist", |st| {
            st["source"]["state"] == "stopped"
        })
        .await;
    let error = st["source"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("does not exist"), "{st}");
    assert!(
        st["source"]["recovery"]
            .as_str()
            .is_some_and(|r| r.contains("abrq source restart")),
        "{st}"
    );

    // the operator creates the table, then restarts the source
    sqlx::query(&format!(
        "CREATE TABLE {table} (id int PRIMARY KEY, name text)"
    ))
    .execute(&src)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {table} SELECT g, 'n' || g FROM generate_series(1, 5) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
    let (code, out, err) = abrq
        .cli(&[
            "source",
            "restart",
            "--stream",
            "t",
            "--server",
            &abrq.base(),
        ])
        .await;
    assert!(code.success(), "{out}{err}");
    assert!(out.contains("starts again"), "{out}");
    abrq.wait_status("t", "the copy delivered", |st| {
        st["source"]["state"] == "running" && u(&dest_of(st, "out")["delivered_records"]) == 5
    })
    .await;
    sqlx::query(&format!("INSERT INTO {table} VALUES (6, 'six')"))
        .execute(&src)
        .await
        .unwrap();
    abrq.wait_status("t", "the change after the copy delivered", |st| {
        u(&dest_of(st, "out")["delivered_records"]) == 6
    })
    .await;
    let audit = abrq.get("/v1/audit?stream=t").await;
    assert!(
        audit["entries"]
            .as_array()
            .is_some_and(|es| es.iter().any(|e| e["action"] == "source_restart")),
        "{audit}"
    );
    // a restart of a running source changes nothing
    let (code, out, _) = abrq
        .cli(&[
            "source",
            "restart",
            "--stream",
            "t",
            "--server",
            &abrq.base(),
        ])
        .await;
    assert!(code.success() && out.contains("had not stopped"), "{out}");
    abrq.kill();
    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
