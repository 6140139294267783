//! The FTP control channel through a proxy the test controls: a pooled
//! session that died while idle is replaced without the caller noticing,
//! and an outage mid-run makes attempts fail as transient (so the drain
//! loop retries and the breaker opens) until the link is back, after which
//! every batch is present exactly once by name and whole.

mod ftp_support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abrq_core::Destination;
use abrq_sinks::ftp::{FtpSettings, FtpTransport};
use abrq_sinks::object::{ObjectDestination, ObjectTransport};
use abrq_testkit::{Ftp, Proxy};

use ftp_support::{assert_complete, assert_manifest, batch, download, object_name, raw, walk};

const ROWS: u64 = 50;

/// Settings for the proxy's port, and the server's own (for looking).
async fn behind_proxy(test: &str) -> (Proxy, FtpSettings, FtpSettings) {
    let direct = ftp_support::ftp(test);
    let proxy = Proxy::start(Ftp::from_env().addr()).await;
    let mut via = direct.clone();
    via.port = proxy.port();
    (proxy, via, direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_pooled_session_is_replaced_unnoticed() {
    let (proxy, via, _) = behind_proxy("ftp-stale").await;
    let t = FtpTransport::new(via);
    t.put("a/one", "1".into()).await.unwrap();
    assert_eq!(t.idle_sessions(), 1);
    proxy.drop_connections();
    tokio::time::sleep(Duration::from_millis(100)).await;
    t.put("a/two", "2".into()).await.unwrap();
    assert_eq!(t.get("a/one").await.unwrap(), "1");
    assert_eq!(t.get("a/two").await.unwrap(), "2");
    assert_eq!(t.idle_sessions(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_transient_and_every_batch_lands_once() {
    const BATCHES: u64 = 60;
    let (proxy, via, direct) = behind_proxy("ftp-outage").await;
    let dest = Arc::new(ObjectDestination::new(
        FtpTransport::new(via),
        ftp_support::object_settings("out"),
    ));
    let delivered = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    // the drain loop in miniature: retry the same batch until it lands
    let writer = {
        let (dest, delivered, failures) = (dest.clone(), delivered.clone(), failures.clone());
        tokio::spawn(async move {
            for seq in 0..BATCHES {
                let b = batch(seq, ROWS);
                while let Err(e) = dest.deliver(&b).await {
                    assert!(e.is_transient(), "{}", e.describe());
                    failures.lock().unwrap().push(e.describe());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                delivered.store(seq + 1, Ordering::SeqCst);
            }
        })
    };

    wait_for(|| delivered.load(Ordering::SeqCst) >= 20).await;
    proxy.cut();
    let cut_at = delivered.load(Ordering::SeqCst);
    wait_for(|| failures.lock().unwrap().len() >= 5).await;
    // nothing got through while the link was down (at most the one batch
    // that was between its last command and "delivered" at the cut)
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

    // every batch once by name, each whole and matching its manifest
    let mut s = raw(&direct).await;
    let files = walk(&mut s, &direct.base_dir).await;
    let parts: BTreeSet<String> = files
        .keys()
        .map(|p| p.rsplit('/').next().unwrap().to_string())
        .filter(|n| n.starts_with("part-"))
        .collect();
    let dir = format!("{}/out/dt=2026-07-30", direct.base_dir);
    let mut expected = BTreeSet::new();
    for seq in 0..BATCHES {
        let name = object_name(seq);
        let obj = download(&mut s, &format!("{dir}/{name}")).await.unwrap();
        assert_complete(&name, &obj, seq, ROWS);
        let m = download(&mut s, &format!("{dir}/{name}.manifest.json"))
            .await
            .unwrap();
        assert_manifest(&name, &m, &obj);
        expected.insert(format!("{name}.manifest.json"));
        expected.insert(name);
    }
    assert_eq!(parts, expected);
    // an upload cut mid-transfer may leave its dot-named temp file: never a
    // `part-*` name, so consumers never see it
    let temps = files.len() - parts.len();
    println!("{temps} temporary files left by cut uploads");
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
