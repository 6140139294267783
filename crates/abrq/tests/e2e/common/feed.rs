//! A producer for the long-running tests: records with a unique integer
//! id (a pure function of the id, so the check needs no copy of what was
//! appended), appended to a followed NDJSON file at a steady pace on a
//! thread of its own.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::append_ndjson;

/// A test's size or seed from the environment, `default` when unset.
pub fn knob(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        _ => default,
    }
}

/// Record `id`: `customer` to key Kafka messages by, an integer, and a
/// payload whose length and characters vary with the id, among them what
/// CSV must quote and what is beyond ASCII.
pub fn record(id: u64) -> Map<String, Value> {
    const PIECES: [&str; 6] = [
        "plain",
        "comma, inside",
        "a \"quote\"",
        "naïve café €",
        "tab\there",
        "line\nbreak",
    ];
    let h = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let n = 1 + (h >> 60) as usize;
    let payload: Vec<&str> = (0..n)
        .map(|i| PIECES[((h >> (3 * i)) % 6) as usize])
        .collect();
    let Value::Object(m) = json!({
        "id": id,
        "customer": format!("c{}", id % 97),
        "amount": (h % 100_000) as i64,
        "payload": payload.join(" "),
    }) else {
        unreachable!()
    };
    m
}

/// Appends records 1..=total to a file at `rate` a second, fsyncing every
/// chunk as a producer would, never past `limit` (which the test may
/// raise as it goes).
pub struct Feeder {
    appended: Arc<AtomicU64>,
    limit: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Feeder {
    pub fn start(path: PathBuf, total: u64, rate: u64) -> Feeder {
        let appended = Arc::new(AtomicU64::new(0));
        let limit = Arc::new(AtomicU64::new(total));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, l, s) = (appended.clone(), limit.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let mut done = 0;
            while done < total && !s.load(Ordering::SeqCst) {
                let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
                let upto = due.min(total).min(l.load(Ordering::SeqCst));
                if upto > done {
                    // bounded chunks, so a high rate still writes steadily
                    let upto = upto.min(done + 20_000);
                    append_ndjson(&path, (done + 1..=upto).map(|i| Value::Object(record(i))));
                    done = upto;
                    a.store(done, Ordering::SeqCst);
                    continue;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Feeder {
            appended,
            limit,
            stop,
            thread: Some(thread),
        }
    }

    /// The last id appended so far.
    pub fn appended(&self) -> u64 {
        self.appended.load(Ordering::SeqCst)
    }

    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::SeqCst);
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::SeqCst)
    }

    pub fn done(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops early: what is appended stays appended.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Waits for the feed to end; the last id appended.
    pub fn join(mut self) -> u64 {
        if let Some(t) = self.thread.take() {
            t.join().expect("feeder thread");
        }
        self.appended()
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop();
    }
}
