//! TLS and SASL SCRAM against a real broker (tansu with `--cert`, `--key`
//! and `--authentication`), configured the way an operator writes it:
//! `tls_ca_file`, `username`, `password`, `sasl_mechanism`.
//!
//! The right credentials over TLS deliver every record with its headers; a
//! wrong password, an untrusted certificate or plaintext against the TLS
//! port are transient failures (an operator fixes them, the batch is not
//! to blame) whose message says what went wrong, for `abrq check` and the
//! destination's status.

mod kafka_support;

use std::time::Duration;

use abrq_core::config::Config;
use abrq_core::Destination;
use abrq_sinks::kafka::{KafkaDestination, KafkaSettings};
use kafka_support::secured::SecuredBroker;
use kafka_support::*;

fn destination(extra: &str) -> KafkaDestination {
    // a refused check fails in seconds, not the default 30
    destination_with(extra, Duration::from_secs(4))
}

fn destination_with(extra: &str, message_timeout: Duration) -> KafkaDestination {
    let dest = Config::destination("k", &format!("engine = \"kafka\"\n{extra}")).unwrap();
    let mut settings = KafkaSettings::from_config("orders", &dest).unwrap();
    settings.message_timeout = message_timeout;
    KafkaDestination::new(settings)
}

fn config(b: &SecuredBroker, password: &str, ca: Option<&str>) -> String {
    config_with(b, password, ca, "SCRAM-SHA-256")
}

fn config_with(b: &SecuredBroker, password: &str, ca: Option<&str>, mechanism: &str) -> String {
    let ca = ca.map_or(String::new(), |c| format!("tls_ca_file = {c:?}\n"));
    format!(
        "host = \"{}\"\ndatabase = \"{}\"\ntls = true\n{ca}username = \"{}\"\n\
         password = \"{password}\"\nsasl_mechanism = \"{mechanism}\"\npartition_key = \"customer\"",
        b.addr, b.topic, b.user
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_over_tls_delivers_and_bad_credentials_or_trust_are_explained() {
    let broker = SecuredBroker::start().await;
    let ca = broker.ca_file.display().to_string();

    // Right password, private CA trusted: check and delivery succeed, with
    // either SCRAM mechanism.
    for (mechanism, seqs) in [("SCRAM-SHA-256", 1..=2), ("SCRAM-SHA-512", 3..=3)] {
        let dest = destination(&config_with(
            &broker,
            &broker.password,
            Some(&ca),
            mechanism,
        ));
        let report = dest.check().await.expect("check over sasl_ssl");
        assert!(report.detail.contains("4 partitions"), "{}", report.detail);
        for seq in seqs {
            let b = batch(seq, records((seq as usize - 1) * 200, 200, 7));
            dest.deliver(&b)
                .await
                .unwrap_or_else(|e| panic!("{mechanism}: {}", e.describe()));
        }
    }
    let consumed = consume_with(broker.client(), &broker.topic, 600).await;
    assert_eq!(consumed.len(), 600);
    for m in &consumed {
        for h in ["abrq_idempotency_key", "abrq_stream", "abrq_op"] {
            assert!(m.headers.contains_key(h), "{h} missing: {m:?}");
        }
    }

    // Wrong password: the broker refuses the SCRAM exchange.
    let wrong = destination(&config(&broker, "not-the-password", Some(&ca)));
    let e = wrong.check().await.unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());
    let why = e.describe().to_lowercase();
    assert!(
        why.contains("auth") || why.contains("sasl"),
        "the failure should name authentication: {why}"
    );
    // A delivery fails as soon as the refusal is known, not after the
    // message timeout: the records are purged from the producer's queue.
    let patient = destination_with(
        &config(&broker, "not-the-password", Some(&ca)),
        Duration::from_secs(120),
    );
    let started = std::time::Instant::now();
    let e = patient
        .deliver(&batch(9, records(0, 10, 3)))
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());
    println!("a refused delivery failed after {:?}", started.elapsed());
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "waited {:?} for a refused delivery",
        started.elapsed()
    );
    let why = e.describe().to_lowercase();
    assert!(why.contains("sasl"), "the failure should name SASL: {why}");

    // TLS without the private CA: the system's roots do not know it.
    let untrusted = destination(&config(&broker, &broker.password, None));
    let e = untrusted.check().await.unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());
    let why = e.describe().to_lowercase();
    assert!(
        why.contains("ssl") || why.contains("certificate"),
        "the failure should name the certificate: {why}"
    );

    // Plaintext against the TLS listener never gets through either.
    let plain = destination(&format!(
        "host = \"{}\"\ndatabase = \"{}\"",
        broker.addr, broker.topic
    ));
    let e = plain.check().await.unwrap_err();
    assert!(e.is_transient(), "{}", e.describe());

    // Nothing of the refused attempts reached the topic.
    let after = consume_with(broker.client(), &broker.topic, 600).await;
    assert_eq!(after.len(), 600);
}
