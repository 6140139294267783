//! Shared harness for the end-to-end tests. Each test gets its own temp
//! directory and loopback port, spawns the real `abrq` binary on a config
//! written there, and talks to it the way an operator would: the HTTP API,
//! `/metrics`, the CLI, and the files the local destinations leave behind.
//!
//! Nothing here sleeps and hopes: waits poll for an observable condition
//! with a generous deadline (CI has 2 cores and runs these in parallel) and
//! fail fast, with the server's log, if the process dies meanwhile.
//!
//! `process` runs the binary, `config` builds its config file, `api`
//! speaks its HTTP API, `metrics` parses `/metrics`, `output` reads what a
//! local destination wrote; `sinks` reads every other destination kind
//! back, `fleet` provisions one of each, `feed` produces records and
//! `oracle` checks conservation; `pg` serves the database-source tests;
//! `browser` drives Chromium for the console; `turns` gives a test that
//! times things the machine alone.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod api;
pub mod browser;
pub mod config;
pub mod cross;
pub mod feed;
pub mod fleet;
pub mod metrics;
pub mod mysqlcdc;
pub mod oracle;
pub mod output;
pub mod pg;
pub mod process;
pub mod sinks;
pub mod turns;

pub use config::{Config, Destination, Source, Stream};
pub use metrics::Metrics;
pub use output::*;
pub use process::{memory_kib, Abrq};

/// The binary under test, built by cargo for this test run.
pub const BIN: &str = env!("CARGO_BIN_EXE_abrq");

/// Default deadline for anything we wait for.
pub const LONG: Duration = Duration::from_secs(120);

/// How often waits poll.
const POLL: Duration = Duration::from_millis(50);

/// A free loopback port: bind port 0, read it, let it go.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// Polls `f` until it returns true; panics naming `what` at the deadline.
pub async fn wait_until(timeout: Duration, what: &str, mut f: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    loop {
        if f().await {
            return;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        nap().await;
    }
}

pub(crate) async fn nap() {
    tokio::time::sleep(POLL).await;
}

/// Appends `records` to the NDJSON file at `path` (made if missing) and
/// fsyncs it, as a producer feeding a followed file source would.
pub fn append_ndjson(path: &Path, records: impl IntoIterator<Item = Value>) {
    let mut text = String::new();
    for r in records {
        text.push_str(&r.to_string());
        text.push('\n');
    }
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the input file");
    f.write_all(text.as_bytes())
        .expect("append to the input file");
    f.sync_all().expect("fsync the input file");
}

/// A destination's entry in a stream status.
pub fn dest_of(status: &Value, destination: &str) -> Value {
    status["destinations"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["name"] == destination))
        .cloned()
        .unwrap_or_else(|| panic!("no destination {destination:?} in {status}"))
}

pub fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}
