//! Shared by the cloud tests, in `tests/cloud_*.rs` and in the crate
//! (`src/cloud/tests/`, which includes this file): a destination config for
//! each cloud engine pointing at a fresh bucket or container on the
//! services of `scripts/services.sh`, whose endpoints and keys only
//! abrq-testkit knows.

#![allow(dead_code)] // each test file uses its own part of this

use abrq_core::config::{Config, DestinationConfig};
use abrq_testkit::{names, Azure, Gcs, S3};

/// A destination config for `engine` with the given connection fields and
/// any extra TOML lines.
pub fn config(engine: &str, fields: &[(&str, &str)], extra: &str) -> DestinationConfig {
    let mut lines = format!("engine = \"{engine}\"\n");
    for (k, v) in fields {
        // Rust's string escapes are TOML's for these values
        lines.push_str(&format!("{k} = {v:?}\n"));
    }
    lines.push_str(extra);
    Config::destination("lake", &lines).unwrap()
}

/// A fresh S3 bucket, as a destination config.
pub async fn s3(extra: &str) -> DestinationConfig {
    let s3 = S3::from_env();
    let bucket = names::bucket("s3");
    s3.create_bucket(&bucket).await.unwrap();
    let fields = [
        ("host", s3.endpoint.as_str()),
        ("database", &bucket),
        ("username", &s3.access_key_id),
        ("password", s3.secret_access_key.expose()),
        ("region", &s3.region),
    ];
    config("s3", &fields, extra)
}

/// A fresh Azure container, as a destination config.
pub async fn azure(extra: &str) -> DestinationConfig {
    let az = Azure::from_env();
    let container = names::container("azure");
    az.create_container(&container).await.unwrap();
    let fields = [
        ("host", az.endpoint.as_str()),
        ("database", &container),
        ("username", &az.account),
        ("password", az.key.expose()),
    ];
    config("azure_blob", &fields, extra)
}

/// A fresh GCS bucket, as a destination config (anonymous).
pub async fn gcs(extra: &str) -> DestinationConfig {
    let gcs = Gcs::from_env();
    let bucket = names::bucket("gcs");
    gcs.create_bucket(&bucket).await.unwrap();
    let fields = [("host", gcs.endpoint.as_str()), ("database", &bucket)];
    config("gcs", &fields, extra)
}

/// Batch `seq` of `kib` records of about 1 KiB each, each saying which
/// batch and row it is, with text that compresses like real events.
pub fn batch(seq: u64, kib: usize) -> abrq_core::Batch {
    use abrq_core::{idempotency_key, Batch, BatchMeta, Item, Record};
    let words: Vec<String> = (0..997).map(|n| format!("w{n} ")).collect();
    let items: Vec<Item> = (0..kib)
        .map(|i| {
            let mut text = String::with_capacity(1100);
            for w in 0..200 {
                text.push_str(&words[(i * 31 + w * 7) % 997]);
            }
            let v = serde_json::json!({"seq": seq, "i": i, "text": text});
            let serde_json::Value::Object(fields) = v else {
                unreachable!()
            };
            Item::Record(Record::insert(fields))
        })
        .collect();
    Batch {
        meta: BatchMeta {
            stream: "orders".into(),
            seq,
            idempotency_key: idempotency_key(uuid::Uuid::from_u128(0xc1), seq, uuid::Uuid::nil()),
            // a past day, late in UTC: dt= must be this day, not today's
            staged_at: chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2024, 2, 29, 23, 30, 0)
                .unwrap(),
            records: kib as u64,
            bytes: (kib as u64) << 10,
        },
        items,
        lines: None,
    }
}

/// An object_store client straight to the S3 service's `bucket`, for
/// looking at what landed (the transport itself never lists).
pub fn direct_s3(bucket: &str) -> object_store::aws::AmazonS3 {
    let s3 = S3::from_env();
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&s3.endpoint)
        .with_region(&s3.region)
        .with_bucket_name(bucket)
        .with_access_key_id(&s3.access_key_id)
        .with_secret_access_key(s3.secret_access_key.expose())
        .with_allow_http(true)
        .build()
        .unwrap()
}
