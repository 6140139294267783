//! S3 through a loopback proxy the test controls: an outage mid-run makes
//! attempts fail as transient (so the drain loop retries and the breaker
//! opens) and `check()` report it, until the link is back; after that
//! every batch is in the bucket exactly once by name, byte for byte what
//! its batch encodes to, with a manifest that matches.

mod cloud_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abrq_core::config::Text;
use abrq_sinks::cloud;
use abrq_sinks::object::encode::encode;
use abrq_sinks::object::{naming, Manifest, ObjectDestination, ObjectFormat, ObjectTransport};
use abrq_testkit::Proxy;
use futures::TryStreamExt;
use object_store::{path::Path, ObjectStore};
use sha2::{Digest, Sha256};

const BATCHES: u64 = 40;
const KIB: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_transient_and_every_batch_lands_once() {
    let extra =
        "prefix = \"out\"\nformat = \"jsonl.gz\"\ndate_partitioning = true\nmanifest = true\n";
    let direct_cfg = cloud_support::s3(extra).await;
    let endpoint = abrq_testkit::S3::from_env().endpoint;
    let upstream = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let proxy = Proxy::start(upstream.to_string()).await;
    let mut via = direct_cfg.clone();
    via.host = Some(Text(format!("http://127.0.0.1:{}", proxy.port())));
    let dest = abrq_sinks::build("orders", &via).unwrap();

    let delivered = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    // the drain loop in miniature: retry the same batch until it lands,
    // each attempt bounded as the drain loop bounds it
    let writer = {
        let (dest, delivered, failures) = (dest.clone(), delivered.clone(), failures.clone());
        tokio::spawn(async move {
            for seq in 1..=BATCHES {
                let b = cloud_support::batch(seq, KIB);
                loop {
                    match tokio::time::timeout(Duration::from_secs(10), dest.deliver(&b)).await {
                        Ok(Ok(_)) => break,
                        Ok(Err(e)) => {
                            assert!(e.is_transient(), "{}", e.describe());
                            failures.lock().unwrap().push(e.describe());
                        }
                        Err(_) => failures.lock().unwrap().push("attempt timed out".into()),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                delivered.store(seq, Ordering::SeqCst);
            }
        })
    };

    wait_for(|| delivered.load(Ordering::SeqCst) >= 10).await;
    proxy.cut();
    let cut_at = delivered.load(Ordering::SeqCst);
    wait_for(|| failures.lock().unwrap().len() >= 3).await;
    // nothing got through while the link was down (at most the batch that
    // was between its last request and "delivered" at the cut)
    assert!(delivered.load(Ordering::SeqCst) <= cut_at + 1);
    assert!(dest.check().await.unwrap_err().is_transient());
    proxy.restore();
    tokio::time::timeout(Duration::from_secs(60), writer)
        .await
        .expect("delivery resumes after the outage")
        .unwrap();

    let failures = failures.lock().unwrap().clone();
    println!(
        "{} failed attempts, e.g. {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        failures.iter().any(|f| f.contains("refused")),
        "{failures:?}"
    );

    // every batch once by name, each exactly its encoding, manifest matching
    let bucket = direct_cfg.database.as_ref().unwrap().as_str();
    let listed: BTreeSet<String> = cloud_support::direct_s3(bucket)
        .list(Some(&Path::from("out")))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    let t = cloud::s3::transport(&direct_cfg).unwrap();
    let look = ObjectDestination::new(
        t.clone(),
        abrq_sinks::object_settings("orders", &direct_cfg).unwrap(),
    );
    let mut expected = BTreeSet::new();
    for seq in 1..=BATCHES {
        let b = cloud_support::batch(seq, KIB);
        let key = look.object_key(&b).unwrap();
        let obj = t.get(&key).await.unwrap();
        assert!(
            obj == encode(ObjectFormat::JsonlGz, &b).unwrap().data,
            "{key}"
        );
        let m: Manifest =
            serde_json::from_slice(&t.get(&naming::manifest_key(&key)).await.unwrap()).unwrap();
        assert_eq!(m.sha256, hex::encode(Sha256::digest(&obj)), "{key}");
        expected.insert(naming::manifest_key(&key));
        expected.insert(key);
    }
    assert_eq!(listed, expected);
}

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
