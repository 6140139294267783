//! Building from config: every cloud engine validates its fields without
//! any I/O and names what is wrong.

use super::config;

fn build_err(engine: &str, fields: &[(&str, &str)]) -> String {
    match crate::build("orders", &config(engine, fields, "")) {
        Ok(_) => panic!("{engine} {fields:?} built"),
        Err(e) => e.to_string(),
    }
}

/// (The bucket or container itself is required by config parsing.)
#[test]
fn azure_needs_the_account_name() {
    let e = build_err("azure_blob", &[("database", "c")]);
    assert!(e.contains("username (the storage account name)"), "{e}");
}

#[test]
fn s3_keys_come_as_a_pair_and_host_is_a_url() {
    let e = build_err("s3", &[("database", "b"), ("username", "id")]);
    assert!(e.contains("set together"), "{e}");
    let e = build_err("s3", &[("database", "b"), ("host", "127.0.0.1:4566")]);
    assert!(e.contains("https:// or http://"), "{e}");
    // no keys at all: the ambient credentials, resolved on first use
    let ok = config("s3", &[("database", "b"), ("region", "eu-west-1")], "");
    assert_eq!(crate::build("orders", &ok).unwrap().kind(), "s3");
}

#[test]
fn a_gcs_key_that_is_not_json_is_refused_without_quoting_it() {
    let e = build_err("gcs", &[("database", "b"), ("password", "not-json-secret")]);
    assert!(e.contains("service-account key JSON"), "{e}");
    assert!(!e.contains("not-json-secret"), "{e}");
    let anonymous = config(
        "gcs",
        &[("database", "b"), ("host", "http://127.0.0.1:1")],
        "",
    );
    assert_eq!(crate::build("orders", &anonymous).unwrap().kind(), "gcs");
}
