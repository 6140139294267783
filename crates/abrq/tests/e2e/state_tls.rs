//! The PostgreSQL state connection's protection, through the binary:
//! - off loopback, a mode that may send plaintext (`sslmode=prefer`,
//!   sqlx's default, or `disable`) is refused by `check` and `run` until
//!   `state.allow_plaintext` consents;
//! - `sslmode=verify-full` with the server's CA in `sslrootcert` connects
//!   over TLS (the server's `pg_stat_ssl` says so) and `check` says how;
//! - verify-full trusting only the public roots refuses the server's
//!   private certificate, naming it.

use crate::common::*;
use crate::postgres_cdc_tls::ca_file;
use abrq_sinks::relational::sqlx::{self, PgPool};

fn config(abrq: &Abrq, url: &str, allow_plaintext: bool) -> String {
    let config = Config::new(abrq).state_url(url).stream(
        Stream::new("s", Source::http())
            .destination(Destination::local("lake", abrq.p("out/lake"))),
    );
    match allow_plaintext {
        true => config.state_allow_plaintext(),
        false => config,
    }
    .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn off_loopback_a_plaintext_state_connection_needs_consent() {
    let mut abrq = Abrq::new();
    for mode in ["prefer", "disable"] {
        let url = format!("postgres://abrq@state.invalid:5432/abrq?sslmode={mode}");
        abrq.write_config(&config(&abrq, &url, false));
        let cfg = abrq.config_path().display().to_string();
        let (status, _, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
        assert!(!status.success(), "check accepted sslmode={mode}");
        for words in [
            format!("sslmode={mode}"),
            "plaintext".into(),
            "state.allow_plaintext".into(),
        ] {
            assert!(stderr.contains(&words), "check: {words:?} not in {stderr}");
        }
        abrq.spawn(&["run", "--config", &cfg]);
        let exit = abrq.wait_exit(LONG).await;
        assert!(!exit.success(), "run started with sslmode={mode}");
        assert!(
            abrq.log().contains("state.allow_plaintext"),
            "{}",
            abrq.log()
        );
        // with consent, the rule lets it through: what fails now is the
        // name, which does not resolve
        abrq.write_config(&config(&abrq, &url, true));
        let (status, _, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
        assert!(!status.success(), "check reached state.invalid");
        assert!(!stderr.contains("allow_plaintext"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_with_the_servers_ca_connects_over_tls() {
    let admin = PgPool::connect(&pg::cdc_url())
        .await
        .expect("the cdc cluster");
    let db = format!("abrq_state_tls_{}", pg::tag());
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&admin)
        .await
        .unwrap();
    let server = reqwest::Url::parse(&pg::cdc_url()).unwrap();
    let (host, port) = (server.host_str().unwrap(), server.port().unwrap_or(5432));
    let base = format!("postgres://{}@{host}:{port}/{db}", server.username());

    // the public roots do not vouch for the test server's certificate
    let mut abrq = Abrq::new();
    let cfg = abrq.config_path().display().to_string();
    abrq.write_config(&config(
        &abrq,
        &format!("{base}?sslmode=verify-full"),
        false,
    ));
    let (status, _, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
    assert!(!status.success(), "an untrusted certificate was accepted");
    assert!(
        stderr.contains("certificate") || stderr.contains("TLS"),
        "{stderr}"
    );

    let ca = ca_file();
    let url = format!("{base}?sslmode=verify-full&sslrootcert={ca}");
    abrq.write_config(&config(&abrq, &url, false));
    let (status, stdout, stderr) = abrq.cli(&["check", "--config", &cfg]).await;
    assert!(status.success(), "check: {stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "TLS, the server's certificate and name checked against {ca} (sslmode=verify-full)"
        )),
        "{stdout}"
    );
    abrq.start().await;
    abrq.ingest("s", "{\"a\":1}\n").await;
    abrq.wait_status("s", "delivered", |st| {
        dest_of(st, "lake")["high_water_mark"] == 1
    })
    .await;
    let (sessions, encrypted): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.datname = $1",
    )
    .bind(&db)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(sessions > 0, "no state session on {db}");
    assert_eq!(encrypted, sessions, "a state session in plaintext");
    abrq.kill();
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .execute(&admin)
        .await;
}
