//! Config, classification and message shape, without a broker.

use abrq_core::config::{Config, DestinationConfig};
use abrq_core::{Disposition, Op, ReasonClass, Record};
use rdkafka::error::RDKafkaErrorCode as Code;
use rdkafka::message::Headers;
use serde_json::json;

use super::config::KafkaSettings;
use super::errors::classify;
use super::message;

fn dest(extra: &str) -> DestinationConfig {
    Config::destination("k", &format!("engine = \"kafka\"\n{extra}")).unwrap()
}

/// The settings as `build` takes them: checked, then the CA file looked at.
fn settings(extra: &str) -> Result<KafkaSettings, String> {
    KafkaSettings::from_config("orders", &dest(extra)).and_then(|s| s.check_ca_file().map(|()| s))
}

#[test]
fn hosts_get_a_default_port() {
    let s = settings("host = \"a, b:9093\"\ndatabase = \"t\"").unwrap();
    assert_eq!(s.brokers, "a:9092,b:9093");
    let s = settings("host = \"a\"\nport = 19092\ndatabase = \"t\"").unwrap();
    assert_eq!(s.brokers, "a:19092");
}

#[test]
fn host_is_required_and_topic_checked() {
    assert!(settings("database = \"t\"").unwrap_err().contains("host"));
    assert!(settings("host = \"a\"\ndatabase = \"a b\"").is_err());
}

#[test]
fn security_protocol_follows_tls_and_sasl() {
    let protocol = |extra: &str| {
        let s = settings(&format!("host = \"a\"\ndatabase = \"t\"\n{extra}")).unwrap();
        let c = s.client_config();
        c.get("security.protocol").unwrap().to_string()
    };
    assert_eq!(protocol(""), "plaintext");
    assert_eq!(protocol("tls = true"), "ssl");
    assert_eq!(protocol("username = \"u\""), "sasl_plaintext");
    assert_eq!(protocol("tls = true\nusername = \"u\""), "sasl_ssl");
}

#[test]
fn sasl_is_off_when_username_is_empty_and_password_hidden() {
    let s = settings("host = \"a\"\ndatabase = \"t\"").unwrap();
    assert!(s.client_config().get("sasl.mechanisms").is_none());
    let s = settings("host = \"a\"\ndatabase = \"t\"\nusername = \"u\"\npassword = \"hunter2\"")
        .unwrap();
    let c = s.client_config();
    assert_eq!(c.get("security.protocol"), Some("sasl_plaintext"));
    assert_eq!(c.get("sasl.mechanisms"), Some("PLAIN"));
    assert_eq!(c.get("sasl.password"), Some("hunter2"));
    assert!(!format!("{s:?}").contains("hunter2"));
}

#[test]
fn scram_mechanisms_are_named_and_checked() {
    let base = "host = \"a\"\ndatabase = \"t\"\nusername = \"u\"\npassword = \"p\"\n";
    for (given, name) in [
        ("scram-sha-256", "SCRAM-SHA-256"),
        ("SCRAM-SHA-512", "SCRAM-SHA-512"),
        ("plain", "PLAIN"),
    ] {
        let s = settings(&format!("{base}sasl_mechanism = \"{given}\"")).unwrap();
        assert_eq!(s.client_config().get("sasl.mechanisms"), Some(name));
    }
    let e = settings(&format!("{base}sasl_mechanism = \"GSSAPI\"")).unwrap_err();
    assert!(e.contains("SCRAM-SHA-256"), "{e}");
    let e = settings("host = \"a\"\ndatabase = \"t\"\nsasl_mechanism = \"PLAIN\"").unwrap_err();
    assert!(e.contains("username"), "{e}");
}

#[test]
fn tls_trusts_the_ca_file_or_the_system_roots() {
    let c = settings("host = \"a\"\ndatabase = \"t\"\ntls = true")
        .unwrap()
        .client_config();
    assert_eq!(c.get("ssl.ca.location"), Some("probe"));
    assert_eq!(
        c.get("ssl.endpoint.identification.algorithm"),
        Some("https")
    );
    let ca = std::env::temp_dir().join(format!("abrq-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, "not checked here").unwrap();
    // a CA file implies tls
    let s = settings(&format!(
        "host = \"a\"\ndatabase = \"t\"\ntls_ca_file = {:?}",
        ca.display().to_string()
    ))
    .unwrap();
    let c = s.client_config();
    assert_eq!(c.get("security.protocol"), Some("ssl"));
    assert_eq!(c.get("ssl.ca.location"), Some(ca.to_str().unwrap()));
    std::fs::remove_file(&ca).unwrap();
    let e = settings(&format!(
        "host = \"a\"\ndatabase = \"t\"\ntls_ca_file = {:?}",
        ca.display().to_string()
    ))
    .unwrap_err();
    assert!(e.contains("tls_ca_file"), "{e}");
}

#[test]
fn records_time_out_inside_the_attempt() {
    let s = settings("host = \"a\"\ndatabase = \"t\"").unwrap();
    assert_eq!(s.message_timeout, std::time::Duration::from_secs(27));
    let s = settings(
        "host = \"a\"\ndatabase = \"t\"\n[streams.destinations.retry]\nattempt_timeout = \"5s\"",
    )
    .unwrap();
    assert_eq!(s.client_config().get("message.timeout.ms"), Some("4500"));
}

#[test]
fn producer_is_idempotent_with_java_placement() {
    let c = settings("host = \"a\"\ndatabase = \"t\"")
        .unwrap()
        .client_config();
    assert_eq!(c.get("acks"), Some("all"));
    assert_eq!(c.get("enable.idempotence"), Some("true"));
    assert_eq!(c.get("partitioner"), Some("murmur2_random"));
}

#[test]
fn oversize_and_invalid_records_are_rejected_the_rest_retried() {
    for code in [
        Code::MessageSizeTooLarge,
        Code::InvalidRecord,
        Code::InvalidMessageSize,
    ] {
        assert_eq!(
            classify(code).disposition(),
            Disposition::DeadLetter(ReasonClass::Rejected),
            "{code:?}"
        );
    }
    for code in [
        Code::BrokerNotAvailable,
        Code::LeaderNotAvailable,
        Code::MessageTimedOut,
        Code::NotEnoughReplicas,
        Code::AllBrokersDown,
        Code::NetworkException,
        Code::UnknownTopicOrPartition,
        Code::GroupIdNotFound,
    ] {
        assert_eq!(classify(code).disposition(), Disposition::Retry, "{code:?}");
    }
}

fn rec(op: Op, v: serde_json::Value) -> Record {
    Record {
        op,
        fields: v.as_object().unwrap().clone(),
    }
}

#[test]
fn value_marks_only_non_inserts_and_key_is_the_fields_text() {
    let v = message::value(&rec(Op::Insert, json!({"id": 1, "n": "x"})), 0).unwrap();
    assert_eq!(v, br#"{"id":1,"n":"x"}"#);
    let v = message::value(&rec(Op::Delete, json!({"id": 1})), 0).unwrap();
    assert_eq!(v, br#"{"id":1,"_abrq_op":"delete"}"#);
    let e = message::value(&rec(Op::Update, json!({"_abrq_op": 1})), 7).unwrap_err();
    assert_eq!(e.record_index, Some(7));

    let r = rec(Op::Insert, json!({"s": "abc", "n": 42, "z": null}));
    assert_eq!(message::key(&r, "s").as_deref(), Some("abc"));
    assert_eq!(message::key(&r, "n").as_deref(), Some("42"));
    assert_eq!(message::key(&r, "z"), None);
    assert_eq!(message::key(&r, "missing"), None);
}

#[test]
fn without_a_partition_key_a_declared_primary_key_keys_the_message() {
    let declared = json!({
        "region": {"type": "text", "primary_key": true},
        "v": {"type": "integer"},
        "id": {"type": "integer", "primary_key": true},
    });
    let key = abrq_core::key_columns(declared.as_object().unwrap());
    assert_eq!(key, ["region", "id"]);
    let insert = rec(Op::Insert, json!({"id": 7, "region": "eu", "v": 1}));
    let delete = rec(Op::Delete, json!({"region": "eu", "id": 7}));
    let want = Some(r#"{"region":"eu","id":7}"#.to_string());
    assert_eq!(message::primary_key(&insert, &key), want);
    assert_eq!(message::primary_key(&delete, &key), want);
    assert_eq!(
        message::primary_key(&rec(Op::Delete, json!({"id": 7})), &key),
        None
    );
    assert_eq!(message::primary_key(&insert, &[]), None);
}

#[test]
fn headers_name_record_stream_and_op() {
    let id = message::idempotency_key("k", 3, "");
    let h = message::headers(&id, "orders", Op::Update.as_str(), None, &[]);
    let got: Vec<(String, Vec<u8>)> = h
        .iter()
        .map(|h| (h.key.to_string(), h.value.unwrap().to_vec()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("abrq_idempotency_key".into(), b"k:3".to_vec()),
            ("abrq_stream".into(), b"orders".to_vec()),
            ("abrq_op".into(), b"update".to_vec()),
        ]
    );
}
