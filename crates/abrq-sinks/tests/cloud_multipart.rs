//! A batch larger than one part goes up in parts (S3 and Azure multipart,
//! GCS resumable chunks), each part a slice of the one encoded buffer, and
//! reads back byte for byte with a manifest that matches.

mod cloud_support;

use abrq_core::Destination;
use abrq_sinks::cloud::{self, PART_SIZE};
use abrq_sinks::object::encode::encode;
use abrq_sinks::object::{
    naming, Manifest, ObjectDestination, ObjectFormat, ObjectSettings, ObjectTransport,
};
use sha2::{Digest, Sha256};

/// About 26 MB of jsonl: four parts of 8 MiB, the last one short.
const MB: usize = 26;

fn settings() -> ObjectSettings {
    ObjectSettings {
        stream: "orders".into(),
        destination: "lake".into(),
        prefix: "big".into(),
        // uncompressed, so the object really is bigger than a part
        format: ObjectFormat::Jsonl,
        date_partitioning: true,
        manifest: true,
    }
}

async fn round_trip<T: ObjectTransport + Clone + 'static>(t: T) -> String {
    let batch = cloud_support::batch(1, MB << 10);
    let expected = encode(ObjectFormat::Jsonl, &batch).unwrap().data;
    assert!(expected.len() > 3 * PART_SIZE, "{} bytes", expected.len());
    let dest = ObjectDestination::new(t.clone(), settings());
    let report = dest.deliver(&batch).await.unwrap();
    assert_eq!(report.bytes, expected.len() as u64);
    let key = dest.object_key(&batch).unwrap();
    let stored = t.get(&key).await.unwrap();
    assert!(
        stored == expected,
        "stored object differs from the encoded batch"
    );
    let m: Manifest =
        serde_json::from_slice(&t.get(&naming::manifest_key(&key)).await.unwrap()).unwrap();
    assert_eq!(m.bytes, stored.len() as u64);
    assert_eq!(m.sha256, hex::encode(Sha256::digest(&stored)));
    assert_eq!(m.rows, batch.meta.records);
    // a replay of the large batch overwrites it with the same bytes
    dest.deliver(&batch).await.unwrap();
    assert_eq!(
        hex::encode(Sha256::digest(t.get(&key).await.unwrap())),
        m.sha256
    );
    key
}

/// The emulators keep everything in memory: leave no 26 MB behind.
async fn clean_up<T: ObjectTransport>(t: &T, key: &str) {
    t.delete(key).await.unwrap();
    t.delete(&naming::manifest_key(key)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_large_batch_goes_up_in_parts() {
    use object_store::{path::Path, ObjectStoreExt};
    let cfg = cloud_support::s3("").await;
    let t = cloud::s3::transport(&cfg).unwrap();
    let key = round_trip(t.clone()).await;
    // S3 names a multipart object's ETag "{md5 of part md5s}-{parts}"
    let direct = cloud_support::direct_s3(cfg.database.as_ref().unwrap().as_str());
    let etag = direct
        .head(&Path::from(key.as_str()))
        .await
        .unwrap()
        .e_tag
        .unwrap();
    assert!(etag.trim_matches('"').ends_with("-4"), "{etag}");
    clean_up(&t, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_large_batch_goes_up_in_blocks() {
    let t = cloud::azure::transport(&cloud_support::azure("").await).unwrap();
    let key = round_trip(t.clone()).await;
    clean_up(&t, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_large_batch_goes_up_in_resumable_chunks() {
    let t = cloud::gcs::transport(&cloud_support::gcs("").await).unwrap();
    let key = round_trip(t.clone()).await;
    clean_up(&t, &key).await;
}
