//! An outage between abrq and the broker: a tansu broker of the test's own
//! behind a TCP proxy the test cuts mid-batch. Attempts fail transiently
//! while cut; after it is restored every record is in the topic, and after
//! deduplicating on `abrq_idempotency_key` each key's records are in
//! source order.

mod kafka_support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abrq_core::Destination;
use abrq_testkit::java_partition;
use abrq_testkit::ProxiedBroker;
use kafka_support::*;
use tokio::time::{sleep, Instant};

const BATCHES: usize = 20;
const PER_BATCH: usize = 500;
const KEYS: usize = 31;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_fails_transiently_then_delivers_everything_in_key_order() {
    let broker = ProxiedBroker::start().await;
    let brokers = broker.brokers();
    let topic = create_topic(&brokers, "outage").await;
    let mut s = settings(&brokers, &topic, Some("customer"));
    // short, so attempts during the cut fail quickly instead of waiting
    s.message_timeout = Duration::from_secs(3);
    let dest = Arc::new(destination(s));

    // A minimal drain loop: each batch retried until it is delivered.
    let started = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let drain = {
        let (dest, started, failures) = (dest.clone(), started.clone(), failures.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(90);
            for n in 0..BATCHES {
                started.store(n, Ordering::SeqCst);
                let b = batch(n as u64, records(n * PER_BATCH, PER_BATCH, KEYS));
                while let Err(e) = dest.deliver(&b).await {
                    eprintln!("batch {n}: {}", e.describe());
                    failures
                        .lock()
                        .unwrap()
                        .push((n, e.is_transient(), e.describe()));
                    assert!(Instant::now() < deadline, "batch {n} never delivered");
                    sleep(Duration::from_millis(200)).await;
                }
            }
        })
    };

    while started.load(Ordering::SeqCst) < BATCHES / 2 {
        sleep(Duration::from_millis(5)).await;
    }
    broker.proxy.cut();
    // long enough for several attempts to time out
    sleep(Duration::from_secs(8)).await;
    assert!(
        !drain.is_finished(),
        "delivered everything through a cut proxy"
    );
    broker.proxy.restore();
    drain.await.expect("drain loop");

    let failures = failures.lock().unwrap().clone();
    assert!(!failures.is_empty(), "no attempt failed during the cut");
    for (n, transient, why) in &failures {
        assert!(transient, "batch {n}: not transient: {why}");
    }

    let total = BATCHES * PER_BATCH;
    let got = consume(&brokers, &topic, total).await;
    let mut seen = HashSet::new();
    let mut last: HashMap<String, u64> = HashMap::new();
    for m in &got {
        if !seen.insert(m.headers["abrq_idempotency_key"].clone()) {
            continue; // a redelivered duplicate
        }
        let key = m.key.clone().expect("a key");
        assert_eq!(m.partition, java_partition(key.as_bytes(), PARTITIONS));
        if let Some(prev) = last.insert(key.clone(), m.seq()) {
            assert!(prev < m.seq(), "key {key}: {} after {prev}", m.seq());
        }
    }
    assert_eq!(seen.len(), total, "records missing after the outage");
    eprintln!(
        "{} failed attempts during the cut; {} messages for {total} records",
        failures.len(),
        got.len()
    );
}
