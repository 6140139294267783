//! The producer appending to the followed file, and what the local
//! destinations hold.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

pub(super) fn record(id: u64) -> Value {
    json!({"id": id, "customer": id % 7, "amount": (id * 37) % 1000, "note": "scale-out"})
}

/// Appends records to the followed file from its own thread, `chunk`
/// every `every`, until stopped or `cap` records were written.
pub(super) struct Appender {
    written: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Appender {
    pub(super) fn start(path: &Path, from: u64, chunk: u64, every: Duration, cap: u64) -> Appender {
        let written = Arc::new(AtomicU64::new(from));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, s, path) = (written.clone(), stop.clone(), path.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let next = w.load(Ordering::SeqCst);
                if next >= cap {
                    break;
                }
                let end = (next + chunk).min(cap);
                append_ndjson(&path, (next..end).map(record));
                w.store(end, Ordering::SeqCst);
                std::thread::sleep(every);
            }
        });
        Appender {
            written,
            stop,
            thread: Some(thread),
        }
    }

    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    pub(super) fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread; returns how many records were written in all.
    pub(super) fn stop(mut self) -> u64 {
        self.halt();
        self.written()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("the appender thread panicked");
        }
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every `id` of a local destination's records (duplicates folded).
pub(super) fn local_ids(root: &Path) -> (usize, BTreeSet<u64>) {
    let out = read_dest(root);
    assert!(
        out.other.is_empty(),
        "unexpected files in {}: {:?}",
        root.display(),
        out.other
    );
    let mut n = 0;
    let mut ids = BTreeSet::new();
    for r in out.records() {
        n += 1;
        ids.insert(r["id"].as_u64().unwrap_or_else(|| panic!("no id in {r:?}")));
    }
    (n, ids)
}

pub(super) fn missing(ids: &BTreeSet<u64>, total: u64) -> Vec<u64> {
    (0..total).filter(|i| !ids.contains(i)).take(20).collect()
}
