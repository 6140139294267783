//! `abrq check` as a new user meets it: seven destinations, six of them
//! unreachable or misconfigured. It must answer within 5 s (the probes run
//! at once), print one checklist line per destination with its root cause
//! and a hint, say no cause twice, and keep the client libraries quiet.

use std::time::{Duration, Instant};

use crate::common::*;

#[tokio::test(flavor = "multi_thread")]
async fn every_server_down_is_a_short_checklist_within_five_seconds() {
    let abrq = Abrq::new();
    let (pg, my) = (
        std::env::var("ABRQ_TEST_POSTGRES_URL").expect("ABRQ_TEST_POSTGRES_URL"),
        std::env::var("ABRQ_TEST_MYSQL_URL").expect("ABRQ_TEST_MYSQL_URL"),
    );
    let pg = reqwest::Url::parse(&pg).unwrap();
    let my = reqwest::Url::parse(&my).unwrap();
    // ports nothing listens on
    let closed: Vec<u16> = (0..4).map(|_| free_port()).collect();
    abrq.write_config(&format!(
        r#"
data_dir = "{data}"

[[streams]]
name = "orders"
[streams.source]
engine = "http"

[[streams.destinations]]
name = "lake"
engine = "local"
database = "{lake}"

[[streams.destinations]]
name = "nodb"
engine = "postgres"
host = "{pg_host}"
port = {pg_port}
database = "no_such_db"
username = "{pg_user}"
table = "orders"

[[streams.destinations]]
name = "closedpg"
engine = "postgres"
host = "127.0.0.1"
port = {c0}
database = "test"
username = "postgres"
table = "orders"

[[streams.destinations]]
name = "events"
engine = "kafka"
host = "127.0.0.1:{c1}"
database = "orders"

[[streams.destinations]]
name = "bucket"
engine = "s3"
host = "http://127.0.0.1:{c2}"
database = "nobucket"
username = "test"
password = "test"
region = "us-east-1"

[[streams.destinations]]
name = "drop"
engine = "ftp"
host = "127.0.0.1"
port = {c3}
database = "/in"
username = "u"
password = "p"

[[streams.destinations]]
name = "nobody"
engine = "mysql"
host = "{my_host}"
port = {my_port}
database = "test"
username = "nobody_at_all"
table = "orders"
"#,
        data = abrq.p("data"),
        lake = abrq.p("out/lake"),
        pg_host = pg.host_str().unwrap(),
        pg_port = pg.port().unwrap_or(5432),
        pg_user = pg.username(),
        my_host = my.host_str().unwrap(),
        my_port = my.port().unwrap_or(3306),
        c0 = closed[0],
        c1 = closed[1],
        c2 = closed[2],
        c3 = closed[3],
    ));
    let config = abrq.config_path().display().to_string();
    let started = Instant::now();
    let (status, stdout, stderr) = abrq.cli(&["check", "--config", &config]).await;
    let took = started.elapsed();
    assert!(!status.success(), "{stdout}");
    assert!(took < Duration::from_secs(5), "took {took:?}:\n{stdout}");

    let fail = |label: &str| -> (String, String) {
        let head = format!("FAIL  orders/{label}");
        let mut lines = stdout.lines().skip_while(|l| !l.starts_with(&head));
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("no {head:?} in:\n{stdout}"));
        let hint = lines.next().unwrap_or_default();
        assert!(hint.trim_start().starts_with("hint: "), "{line}\n{hint}");
        (line.to_string(), hint.to_string())
    };
    let refused = "nothing listens there";
    for (label, cause, hint) in [
        (
            "nodb (postgres)",
            "database \"no_such_db\" does not exist",
            "create the database",
        ),
        ("closedpg (postgres)", "Connection refused", refused),
        ("events (kafka)", "Connection refused", refused),
        ("bucket (s3)", "Connection refused", refused),
        ("drop (ftp)", "Connection refused", refused),
        (
            "nobody (mysql)",
            "Access denied",
            "`username` and `password`",
        ),
    ] {
        let (line, hint_line) = fail(label);
        assert!(line.contains(cause), "{line}");
        assert!(hint_line.contains(hint), "{hint_line}");
        // a cause is said once
        assert_eq!(line.matches(cause).count(), 1, "{line}");
    }
    assert!(stdout.contains("ok    orders/lake (local)"), "{stdout}");
    // one line per destination plus a hint per failure, a header of two
    assert_eq!(stdout.lines().count(), 2 + 1 + 6 * 2, "{stdout}");
    // The harness runs with ABRQ_LOG=info, so the client libraries speak
    // (by default `check` shows only abrq's own events); each of their
    // messages once: librdkafka alone says "brokers are down" twice every
    // 50 ms.
    assert!(stderr.lines().count() <= 8, "{stderr}");
}
