//! What the `mysql` cdc source says when it cannot read, through the
//! binary: `check` against a server without a binlog (the machine's own
//! MariaDB, only read) names the setting and its fix; a stream whose
//! binlog file was purged while abrq was down goes on by its GTID position
//! when the next file still holds it, and fails with the documented, named
//! error instead of starting over silently when a change it needs is gone.

use crate::common::turns::Alone;
use crate::common::*;
use abrq_sinks::relational::sqlx::{self, MySqlPool};

fn config(abrq: &Abrq, url: &str, table: &str, out: &str) -> String {
    Config::new(abrq)
        .stream(
            Stream::new(
                "s",
                Source::mysql("cdc")
                    .connection(url)
                    .database("test")
                    .table(table)
                    .snapshot("never"),
            )
            .max_wait("20ms")
            .destination(Destination::local("out", out)),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn check_names_a_server_without_a_binlog() {
    // the machine's MariaDB runs without a binlog; check only reads it
    let plain = abrq_testkit::Mysql::from_env().url;
    let abrq = Abrq::new();
    let out = abrq.p("out");
    abrq.write_config(&config(&abrq, &plain, "nothing_here", &out));
    let config_path = abrq.config_path().display().to_string();
    let (status, shown, _) = abrq.cli(&["check", "-c", &config_path]).await;
    assert!(!status.success());
    assert!(
        shown.contains("FAIL  s source (mysql)")
            && shown.contains("the binlog is off: start the server with log_bin")
            && shown.contains("table test.nothing_here does not exist"),
        "{shown}"
    );
}

/// The binlog file the server writes now.
async fn current_file(src: &MySqlPool) -> String {
    let row: (String, u64, String, String) = sqlx::query_as("SHOW MASTER STATUS")
        .fetch_one(src)
        .await
        .unwrap();
    row.0
}

/// Moves the server to a new binlog file and drops every older one
/// (PURGE skips a file a replica's dump thread still reads: the killed
/// process's thread ends a moment later, so purge until it is gone).
async fn flush_and_purge(src: &MySqlPool) {
    let old = current_file(src).await;
    sqlx::query("FLUSH BINARY LOGS").execute(src).await.unwrap();
    let current = current_file(src).await;
    wait_until(LONG, "the old binlog files purged", async || {
        sqlx::query(&format!("PURGE BINARY LOGS TO '{current}'"))
            .execute(src)
            .await
            .unwrap();
        let logs: Vec<(String, u64)> = sqlx::query_as("SHOW BINARY LOGS")
            .fetch_all(src)
            .await
            .unwrap();
        !logs.iter().any(|(f, _)| *f == old)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purged_position_is_a_named_failure_never_a_silent_restart() {
    let src = MySqlPool::connect(&mysqlcdc::url())
        .await
        .expect("the mysqlcdc server");
    let tag = pg::tag();
    let table = format!("purge_{tag}");
    sqlx::query(&format!(
        "CREATE TABLE `{table}` (id bigint PRIMARY KEY, note text)"
    ))
    .execute(&src)
    .await
    .unwrap();
    // purging binlogs takes files other streams on the server may still
    // read by file and offset: no other test runs meanwhile
    let alone = Alone::take().await;
    let mut abrq = alone.abrq();
    let out = abrq.p("out");
    abrq.write_config(&config(&abrq, &mysqlcdc::url(), &table, &out));
    abrq.start().await;
    abrq.wait_status("s", "the binlog read", |st| {
        !st["source"]["position"]["binlog"].is_null()
    })
    .await;
    sqlx::query(&format!("INSERT INTO `{table}` VALUES (1, 'a'), (2, 'b')"))
        .execute(&src)
        .await
        .unwrap();
    let st = abrq
        .wait_status("s", "the rows staged", |st| {
            u(&st["spool"]["records"]) >= 2 || u(&st["spool"]["last_seq"]) >= 1
        })
        .await;
    let staged = u(&st["spool"]["last_seq"]);
    abrq.kill();

    // the stream's file is gone, but not a change it needs: MariaDB
    // serves its GTID position from the next file and nothing is lost
    flush_and_purge(&src).await;
    sqlx::query(&format!("INSERT INTO `{table}` VALUES (3, 'after')"))
        .execute(&src)
        .await
        .unwrap();
    abrq.start().await;
    let st = abrq
        .wait_status("s", "the change after the purge staged", |st| {
            u(&st["spool"]["last_seq"]) > staged
        })
        .await;
    let binlog = &st["source"]["position"]["binlog"];
    assert!(binlog["gtid"].is_string(), "{st}");
    let staged = u(&st["spool"]["last_seq"]);
    abrq.kill();

    // a change the stream never read is purged with its file: a named
    // failure, never a silent new start
    sqlx::query(&format!("INSERT INTO `{table}` VALUES (4, 'never read')"))
        .execute(&src)
        .await
        .unwrap();
    flush_and_purge(&src).await;
    abrq.start_live().await;
    let st = abrq
        .wait_status("s", "the source stopped on the purged position", |st| {
            st["source"]["state"] == "stopped"
        })
        .await;
    let error = st["source"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("is no longer on the server") && error.contains("Recovery"),
        "{st}"
    );
    assert!(
        st["source"]["recovery"]
            .as_str()
            .is_some_and(|r| r.contains("re-snapshot")),
        "{st}"
    );
    let (code, _) = abrq.call(reqwest::Method::GET, "/readyz", None, &[]).await;
    assert_eq!(code, 503);
    assert_eq!(
        u(&abrq.status("s").await["spool"]["last_seq"]),
        staged,
        "nothing staged since"
    );
    abrq.kill();
    sqlx::query(&format!("DROP TABLE `{table}`"))
        .execute(&src)
        .await
        .unwrap();
}
