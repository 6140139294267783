//! The sampler: every mark and lease read every 30ms for the whole test,
//! and what must hold over all the samples.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::{self, postgres::PgPool};

use super::state::{try_leases, try_marks, Lease};

/// How often the sampler reads marks and leases.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_millis(30);

/// What the sampler read at one moment.
#[derive(Debug)]
pub(super) struct Sample {
    pub(super) at: Instant,
    pub(super) hwm: BTreeMap<String, i64>,
    pub(super) last_seq: i64,
    pub(super) leases: Vec<Lease>,
}

/// Reads marks and leases every [`SAMPLE_EVERY`] until told to stop; until
/// the first process has made the schema, a failed read is retried.
pub(super) fn start_sampler(
    pool: PgPool,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let read =
                async { Ok::<_, sqlx::Error>((try_marks(&pool).await?, try_leases(&pool).await?)) };
            match read.await {
                Ok(((hwm, last_seq), leases)) => samples.push(Sample {
                    at: Instant::now(),
                    hwm,
                    last_seq,
                    leases,
                }),
                Err(e) if samples.is_empty() => {
                    let _ = e; // no schema yet
                }
                Err(e) => panic!("the sampler cannot read the state: {e}"),
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        samples
    })
}

/// Marks and last_seq never went back, a mark never passed last_seq, each
/// lease's epoch only grew and named one holder, and after the thaw A's
/// instance shows on a lease only at an epoch above the one B took it at.
pub(super) fn check_samples(
    samples: &[Sample],
    a_instance: &str,
    taken_epochs: &BTreeMap<String, i64>,
    frozen_at: Instant,
    thawed_at: Instant,
) {
    let during = samples
        .iter()
        .filter(|s| s.at > frozen_at && s.at < thawed_at)
        .count();
    println!(
        "[test] {} samples, {during} while A was frozen",
        samples.len()
    );
    assert!(samples.len() >= 100, "too few samples: {}", samples.len());
    assert!(during >= 20, "too few samples while A was frozen: {during}");
    for w in samples.windows(2) {
        let (p, n) = (&w[0], &w[1]);
        assert!(
            n.last_seq >= p.last_seq,
            "last_seq went back: {} -> {}",
            p.last_seq,
            n.last_seq
        );
        for (d, m) in &p.hwm {
            let next = n.hwm.get(d).copied().unwrap_or(i64::MIN);
            assert!(next >= *m, "{d}: high-water mark went back {m} -> {next}");
        }
        for l in &p.leases {
            if let Some(nl) = n.leases.iter().find(|x| x.resource == l.resource) {
                assert!(
                    nl.epoch >= l.epoch,
                    "{}: epoch went back {} -> {}",
                    l.resource,
                    l.epoch,
                    nl.epoch
                );
            }
        }
    }
    for s in samples {
        for (d, m) in &s.hwm {
            assert!(
                *m <= s.last_seq,
                "{d}: mark {m} past last_seq {}",
                s.last_seq
            );
        }
    }
    // (resource, epoch) -> the one instance that held it
    let mut holder: BTreeMap<(String, i64), String> = BTreeMap::new();
    for s in samples {
        for l in &s.leases {
            let Some(i) = &l.instance else { continue };
            let prev = holder
                .entry((l.resource.clone(), l.epoch))
                .or_insert_with(|| i.clone());
            assert_eq!(
                prev, i,
                "{} epoch {} held by two instances",
                l.resource, l.epoch
            );
        }
    }
    // Once thawed, A shows on a lease only at an epoch above the one B
    // took it over at: never back at the epoch it held when frozen.
    for s in samples.iter().filter(|s| s.at >= thawed_at) {
        for l in &s.leases {
            if l.instance.as_deref() == Some(a_instance) {
                let took = taken_epochs[&l.resource];
                assert!(
                    l.epoch > took,
                    "{}: A shows at epoch {} after the thaw; B took it at {took}",
                    l.resource,
                    l.epoch
                );
            }
        }
    }
}
