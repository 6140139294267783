//! The `postgres` cdc source over TLS, through the binary: with `tls =
//! true` and the server's CA in `tls_ca_file`, the replication session and
//! the catalog connection are encrypted (the server's `pg_stat_ssl` says
//! so) and changes arrive; trusting only the public roots, the server's
//! private certificate is refused with an error that names TLS, and
//! nothing is read in plain text instead.

use crate::common::*;
use abrq_sinks::relational::sqlx::{self, PgPool};

pub fn ca_file() -> String {
    std::env::var("ABRQ_TEST_PGCDC_CA_FILE").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/abrq/certs/ftps.crt")
    })
}

/// `tls = true`, trusting `ca_file` if given, else the public roots.
fn config(abrq: &Abrq, schema: &str, slot: &str, ca_file: Option<&str>) -> String {
    let source = Source::postgres("cdc")
        .connection(&pg::cdc_url())
        .table(&format!("{schema}.items"))
        .slot(slot)
        .publication(slot)
        .tls(true);
    let source = match ca_file {
        Some(file) => source.tls_ca_file(file),
        None => source,
    };
    Config::new(abrq)
        .stream(
            Stream::new("s", source)
                .max_wait("20ms")
                .destination(Destination::local("history", abrq.p("out/history")).format("jsonl")),
        )
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_arrive_over_tls_and_an_untrusted_server_is_refused() {
    let src = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let tag = pg::tag();
    let (schema, slot) = (format!("cdc_tls_{tag}"), format!("abrq_tls_{tag}"));
    let table = format!("\"{schema}\".items");
    for sql in [
        format!("CREATE SCHEMA \"{schema}\""),
        format!("CREATE TABLE {table} (id bigint PRIMARY KEY, note text)"),
        format!("INSERT INTO {table} SELECT g, 'before' FROM generate_series(1, 100) AS g"),
    ] {
        sqlx::query(&sql).execute(&src).await.unwrap();
    }

    // the public roots do not vouch for the test server's certificate
    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &schema, &slot, None));
    abrq.start_live().await;
    let st = abrq
        .wait_status("s", "the source failing on TLS", |st| {
            st["source"]["state"] == "failing"
        })
        .await;
    let error = st["source"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("certificate") || error.contains("TLS"),
        "{st}"
    );
    assert_eq!(u(&st["spool"]["last_seq"]), 0, "nothing read: {st}");
    abrq.kill();

    let mut abrq = Abrq::new();
    abrq.write_config(&config(&abrq, &schema, &slot, Some(&ca_file())));
    abrq.start().await;
    abrq.wait_status("s", "the copy staged", |st| {
        st["source"]["position"]["snapshot"]["state"] == "done"
    })
    .await;
    sqlx::query(&format!(
        "INSERT INTO {table} SELECT g, 'after' FROM generate_series(101, 150) AS g"
    ))
    .execute(&src)
    .await
    .unwrap();
    wait_until(LONG, "every row at the destination", async || {
        let out = read_dest(&abrq.path("out/history"));
        out.records()
            .filter_map(|r| r["id"].as_i64())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            == 150
    })
    .await;
    let encrypted: Option<bool> = sqlx::query_scalar(
        "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
         WHERE r.application_name = $1",
    )
    .bind(format!("abrq {slot}"))
    .fetch_optional(&src)
    .await
    .unwrap();
    assert_eq!(
        encrypted,
        Some(true),
        "the replication session is encrypted"
    );
    abrq.kill();

    pg::drop_cdc(&src, &slot, &[&schema]).await;
}
