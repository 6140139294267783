//! A consumer polling the target directory while 1,000 batches are
//! delivered (some twice, renaming over their own earlier copy) never sees
//! a final `part-*` name whose content is incomplete: every object it
//! downloads decompresses completely with all its rows, and every manifest
//! is whole JSON matching its object. Then: each batch present exactly
//! once by name, and no temporary file left behind.

mod ftp_support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abrq_core::Destination;
use abrq_sinks::ftp::{FtpSettings, FtpTransport};
use abrq_sinks::object::ObjectDestination;
use ftp_support::{assert_complete, assert_manifest, batch, download, object_name, raw, walk};

const BATCHES: u64 = 1_000;
const ROWS: u64 = 200;
const WRITERS: u64 = 4;
const PREFIX: &str = "exports/orders";

#[derive(Debug, Default)]
struct Seen {
    objects: usize,
    manifests: usize,
    /// checked while the writers were still writing
    raced: usize,
    listings: usize,
    listing_failures: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ftp_poller_never_sees_a_partial_object() {
    run(ftp_support::ftp("ftp-poller")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ftps_poller_never_sees_a_partial_object() {
    run(ftp_support::ftps("ftps-poller")).await;
}

async fn run(settings: FtpSettings) {
    let dir = format!("{}/{PREFIX}/dt=2026-07-30", settings.base_dir);
    let seqs: HashMap<String, u64> = (0..BATCHES).map(|s| (object_name(s), s)).collect();
    let done = Arc::new(AtomicBool::new(false));
    let poller = tokio::spawn(poll(
        settings.clone(),
        dir.clone(),
        seqs.clone(),
        done.clone(),
    ));

    let transport = FtpTransport::new(settings.clone());
    let dest = Arc::new(ObjectDestination::new(
        transport.clone(),
        ftp_support::object_settings(PREFIX),
    ));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let dest = dest.clone();
            tokio::spawn(async move {
                for seq in (w..BATCHES).step_by(WRITERS as usize) {
                    let b = batch(seq, ROWS);
                    dest.deliver(&b)
                        .await
                        .unwrap_or_else(|e| panic!("{seq}: {}", e.describe()));
                    // a replay: the same name again, renamed over the first copy
                    if seq % 10 == 0 {
                        dest.deliver(&b)
                            .await
                            .unwrap_or_else(|e| panic!("{seq}: {}", e.describe()));
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = poller.await.unwrap();
    println!("{}: {seen:?}", settings.server());
    // the poller really raced the writers, on both kinds of file
    assert_eq!(
        (seen.objects, seen.manifests),
        (BATCHES as usize, BATCHES as usize)
    );
    assert!(seen.raced > 100, "{seen:?}");
    // pooled, not piling up: at most what the writers held at once (each
    // delivery holds two sessions, the object's and the manifest's)
    assert!(transport.idle_sessions() <= 2 * WRITERS as usize);

    let mut s = raw(&settings).await;
    let files = walk(&mut s, &settings.base_dir).await;
    let names: BTreeSet<&str> = files
        .keys()
        .map(|p| p.rsplit('/').next().unwrap())
        .collect();
    let mut expected = BTreeSet::new();
    for name in seqs.keys() {
        expected.insert(name.clone());
        expected.insert(format!("{name}.manifest.json"));
    }
    let expected: BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(files.len(), names.len(), "a name in two places");
    assert_eq!(
        names, expected,
        "exactly one of each, nothing else (no temp files)"
    );
}

/// Lists the directory in a tight loop and downloads the names that
/// appeared since the previous listing at once, while they are newest (a
/// final name shown too early would be caught then). Names it had no time
/// for are checked in a last full pass after the writers are done.
async fn poll(
    settings: FtpSettings,
    dir: String,
    seqs: HashMap<String, u64>,
    done: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen::default();
    let mut checked = BTreeSet::new();
    let mut before = BTreeSet::new();
    let mut s = raw(&settings).await;
    loop {
        let last = done.load(Ordering::SeqCst);
        seen.listings += 1;
        let names = match s.nlst(Some(&dir)).await {
            Ok(names) => names,
            // not made yet, or (FTPS, under load) the server dropped the
            // listing's data connection: the listing is not what is tested
            Err(e) => {
                assert!(!last || seen.objects > 0, "final listing failed: {e}");
                seen.listing_failures += 1;
                if !matches!(e, suppaftp::FtpError::UnexpectedResponse(_)) {
                    s = raw(&settings).await;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let names: BTreeSet<String> = names
            .iter()
            .map(|n| n.rsplit('/').next().unwrap().to_string())
            .filter(|n| n.starts_with("part-"))
            .collect();
        let fresh: Vec<String> = names
            .iter()
            .filter(|n| !checked.contains(*n) && (last || !before.contains(*n)))
            .take(if last { usize::MAX } else { 8 })
            .cloned()
            .collect();
        before = names;
        for name in fresh {
            let object = name.trim_end_matches(".manifest.json");
            let seq = *seqs
                .get(object)
                .unwrap_or_else(|| panic!("unexpected {name}"));
            let data = download(&mut s, &format!("{dir}/{name}"))
                .await
                .unwrap_or_else(|e| panic!("{name} was listed but cannot be read: {e}"));
            if name.ends_with(".manifest.json") {
                // the manifest is written after its object: both are there
                let obj = download(&mut s, &format!("{dir}/{object}"))
                    .await
                    .unwrap_or_else(|e| panic!("{name} is there but not {object}: {e}"));
                assert_manifest(&name, &data, &obj);
                assert_complete(object, &obj, seq, ROWS);
                seen.manifests += 1;
            } else {
                assert_complete(&name, &data, seq, ROWS);
                seen.objects += 1;
            }
            checked.insert(name);
            if !last {
                seen.raced += 1;
            }
        }
        if last {
            return seen;
        }
    }
}
