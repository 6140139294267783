//! Shared harness for the end-to-end tests. Each test gets its own temp
//! directory and loopback port, spawns the real `abrq` binary on a config
//! written there, and talks to it the way an operator would: the HTTP API,
//! `/metrics`, the CLI, and the files the local destinations leave behind.
//!
//! Nothing here sleeps and hopes: waits poll for an observable condition
//! with a generous deadline (CI has 2 cores and runs these in parallel) and
//! fail fast, with the server's log, if the process dies meanwhile.

// Each test file is its own crate and uses a different part of this.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub mod feed;
pub mod fleet;
pub mod oracle;
pub mod sinks;

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

async fn nap() {
    tokio::time::sleep(POLL).await;
}

/// One test's `abrq`: its directory, port, config, log and (at most one)
/// running process. Dropping it kills the process; a failing test prints
/// the server's log.
pub struct Abrq {
    /// None only while dropping with ABRQ_E2E_KEEP set.
    tmp: Option<tempfile::TempDir>,
    pub port: u16,
    /// Sent as the bearer token on every API call when set.
    pub admin_token: Option<String>,
    pub http: reqwest::Client,
    child: Mutex<Option<Child>>,
    runs: u32,
}

impl Default for Abrq {
    fn default() -> Self {
        Self::new()
    }
}

impl Abrq {
    pub fn new() -> Abrq {
        let tmp = tempfile::Builder::new()
            .prefix("abrq-e2e-")
            .tempdir()
            .expect("create a temp dir");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            // No keep-alive: a restarted server must never meet a pooled
            // connection to the process it replaced.
            .pool_max_idle_per_host(0)
            .build()
            .expect("http client");
        Abrq {
            tmp: Some(tmp),
            port: free_port(),
            admin_token: None,
            http,
            child: Mutex::new(None),
            runs: 0,
        }
    }

    pub fn dir(&self) -> &Path {
        self.tmp.as_ref().expect("temp dir").path()
    }

    /// A path inside the test's directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir().join(rel)
    }

    /// `path` as a string for a TOML value.
    pub fn p(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    pub fn listen(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn config_path(&self) -> PathBuf {
        self.path("abrq.toml")
    }

    pub fn write_config(&self, text: &str) {
        fs::write(self.config_path(), text).expect("write config");
    }

    /// Every run's stderr, appended, with the harness's own notes between.
    pub fn log_path(&self) -> PathBuf {
        self.path("abrq.log")
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A line in the server log (and the test's output): seeds, kills.
    pub fn note(&self, msg: &str) {
        println!("[harness] {msg}");
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open log");
        writeln!(f, "[harness] {msg}").expect("write log");
    }

    /// Stdout of run number `n` (1-based), e.g. the drained summary.
    pub fn stdout_of_run(&self, n: u32) -> String {
        fs::read_to_string(self.path(&format!("run-{n}.stdout"))).unwrap_or_default()
    }

    pub fn runs(&self) -> u32 {
        self.runs
    }

    fn command(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.dir())
            .env("ABRQ_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("ABRQ_SERVER")
            .env_remove("ABRQ_ADMIN_TOKEN");
        c
    }

    /// Spawns `abrq <args>` in the background: stderr to the log, stdout to
    /// `run-{n}.stdout`.
    pub fn spawn(&mut self, args: &[&str]) {
        assert!(
            self.child.lock().unwrap().is_none(),
            "an abrq process is already running"
        );
        self.runs += 1;
        let n = self.runs;
        self.note(&format!("run #{n}: abrq {}", args.join(" ")));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open log");
        let out = File::create(self.path(&format!("run-{n}.stdout"))).expect("stdout file");
        let child = self
            .command()
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .spawn()
            .expect("spawn abrq");
        *self.child.lock().unwrap() = Some(child);
    }

    /// `abrq run --config abrq.toml`, then waits for /readyz.
    pub async fn start(&mut self) {
        let config = self.config_path().display().to_string();
        self.spawn(&["run", "--config", &config]);
        self.wait_ready().await;
    }

    pub async fn wait_ready(&self) {
        let url = format!("{}/readyz", self.base());
        wait_until(LONG, "abrq to answer /readyz", async || {
            self.assert_alive();
            matches!(self.http.get(&url).send().await, Ok(r) if r.status().is_success())
        })
        .await;
    }

    /// Panics (showing the log) if the process we started has exited.
    pub fn assert_alive(&self) {
        let mut slot = self.child.lock().unwrap();
        if let Some(child) = slot.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                *slot = None;
                drop(slot);
                panic!("abrq exited unexpectedly with {status}");
            }
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(Child::id)
    }

    /// SIGKILL (what `Child::kill` sends on Unix) and reap.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits for the running process to exit on its own.
    pub async fn wait_exit(&self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            {
                let mut slot = self.child.lock().unwrap();
                let child = slot.as_mut().expect("no abrq process to wait for");
                if let Some(status) = child.try_wait().expect("try_wait") {
                    *slot = None;
                    return status;
                }
            }
            if start.elapsed() > timeout {
                panic!("abrq did not exit within {timeout:?}");
            }
            nap().await;
        }
    }

    /// Runs `abrq <args>` to completion (the operator CLI): (exit status,
    /// stdout, stderr).
    pub async fn cli(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let mut c = tokio::process::Command::from(self.command());
        c.args(args).stdin(Stdio::null()).kill_on_drop(true);
        let out = tokio::time::timeout(LONG, c.output())
            .await
            .unwrap_or_else(|_| panic!("abrq {args:?} did not finish"))
            .expect("run abrq");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        println!(
            "[harness] abrq {} -> {}\n{stdout}{stderr}",
            args.join(" "),
            out.status
        );
        (out.status, stdout, stderr)
    }

    // ---- HTTP API ----

    /// Any request: (status code, body as JSON, or a JSON string of the
    /// text when the body is not JSON).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base()));
        if let Some(t) = &self.admin_token {
            req = req.bearer_auth(t);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        // The server refuses state-changing requests a browser form could
        // send; like the CLI, the harness marks its calls with this header.
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("x-abrq-actor"))
        {
            req = req.header("x-abrq-actor", "e2e");
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("response body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// GET that must answer 200.
    pub async fn get(&self, path: &str) -> Value {
        let (code, body) = self.call(reqwest::Method::GET, path, None, &[]).await;
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    /// POST without a body that must answer 200.
    pub async fn post(&self, path: &str) -> Value {
        let (code, body) = self.call(reqwest::Method::POST, path, None, &[]).await;
        assert_eq!(code, 200, "POST {path}: {body}");
        body
    }

    /// `GET /v1/streams/{stream}`.
    pub async fn status(&self, stream: &str) -> Value {
        self.get(&format!("/v1/streams/{stream}")).await
    }

    /// One destination's entry of the stream status.
    pub async fn dest(&self, stream: &str, destination: &str) -> Value {
        dest_of(&self.status(stream).await, destination)
    }

    /// POST a body to the stream's ingest endpoint; must answer 200.
    pub async fn ingest(&self, stream: &str, body: &str) -> Value {
        let (code, ack) = self
            .call(
                reqwest::Method::POST,
                &format!("/v1/streams/{stream}/records"),
                Some(body.as_bytes().to_vec()),
                &[],
            )
            .await;
        assert_eq!(code, 200, "ingest into {stream}: {ack}");
        ack
    }

    /// POST `/v1/streams/{s}/destinations/{d}/{action}`.
    pub async fn act(&self, stream: &str, destination: &str, action: &str) -> Value {
        self.post(&format!(
            "/v1/streams/{stream}/destinations/{destination}/{action}"
        ))
        .await
    }

    pub async fn dead_letters(&self, stream: &str, destination: &str) -> Vec<Value> {
        let v = self
            .get(&format!(
                "/v1/streams/{stream}/destinations/{destination}/dead-letters?state=all"
            ))
            .await;
        v["dead_letters"].as_array().cloned().unwrap_or_default()
    }

    pub async fn metrics(&self) -> Metrics {
        let resp = self
            .http
            .get(format!("{}/metrics", self.base()))
            .send()
            .await
            .expect("GET /metrics");
        assert!(
            resp.status().is_success(),
            "GET /metrics: {}",
            resp.status()
        );
        Metrics::parse(&resp.text().await.expect("metrics body"))
    }

    /// One metric: the sum of the series matching `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.metrics().await.get(name, labels)
    }

    /// Polls the stream status until `pred` holds; returns that status.
    pub async fn wait_status(
        &self,
        stream: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            self.assert_alive();
            let st = self.status(stream).await;
            if pred(&st) {
                return st;
            }
            if start.elapsed() > LONG {
                panic!(
                    "timed out after {LONG:?} waiting for: {what}\nlast status: {}",
                    serde_json::to_string_pretty(&st).unwrap_or_default()
                );
            }
            nap().await;
        }
    }

    /// Waits until every destination of `stream` has passed the last
    /// staged batch and no batch was staged for `quiet` (so a followed
    /// source has staged everything it was given); returns that status.
    pub async fn wait_drained(&self, stream: &str, quiet: Duration, timeout: Duration) -> Value {
        let start = Instant::now();
        let (mut last, mut since) = (u64::MAX, Instant::now());
        loop {
            self.assert_alive();
            let st = self.status(stream).await;
            let seq = u(&st["spool"]["last_seq"]);
            if seq != last {
                (last, since) = (seq, Instant::now());
            }
            let passed = st["destinations"]
                .as_array()
                .expect("destinations")
                .iter()
                .all(|d| u(&d["high_water_mark"]) == seq);
            if passed && since.elapsed() >= quiet {
                return st;
            }
            if start.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {stream} to drain\nlast status: {}",
                    serde_json::to_string_pretty(&st).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls until `f` holds, checking that the server is still alive.
    pub async fn wait_for(&self, what: &str, mut f: impl AsyncFnMut() -> bool) {
        wait_until(LONG, what, async || {
            self.assert_alive();
            f().await
        })
        .await;
    }

    /// Waits until a destination of engine `kind` has tripped its breaker.
    pub async fn wait_circuit_opened(&self, kind: &str) {
        let what = format!("the circuit of a {kind} destination to open");
        self.wait_for(&what, async || {
            self.metric(
                "abrq_stream_fanout_circuit_opened_total",
                &[("destination_kind", kind)],
            )
            .await
                >= 1.0
        })
        .await;
    }
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

impl Drop for Abrq {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "---- abrq log ({}) ----\n{}\n---- end of abrq log ----",
                self.log_path().display(),
                self.log()
            );
        }
        // ABRQ_E2E_KEEP=1 keeps the directory (config, data, output, log).
        if std::env::var_os("ABRQ_E2E_KEEP").is_some() {
            if let Some(tmp) = self.tmp.take() {
                eprintln!("[harness] kept {}", tmp.keep().display());
            }
        }
    }
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

// ---- Prometheus text ----

/// A parsed `/metrics` page.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub text: String,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad metrics line {line:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("bad metric value in {line:?}"));
            let (name, labels) = match series.find('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some(i) => {
                    let body = series[i + 1..]
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("bad labels in {line:?}"));
                    (series[..i].to_string(), parse_labels(body))
                }
            };
            samples.push((name, labels, value));
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// The sum over the series of `name` whose labels include `labels`;
    /// 0 when there is none.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Whether the page names the metric family at all.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(n, _, _)| n == name)
            || self
                .text
                .lines()
                .any(|l| l.starts_with(&format!("# TYPE {name} ")))
    }
}

/// `k="v",k2="v\"2"` → map, with the exposition format's escapes.
fn parse_labels(body: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim().trim_start_matches(',').trim().to_string();
        if key.is_empty() {
            break;
        }
        assert_eq!(
            chars.next(),
            Some('"'),
            "label {key} without a quoted value"
        );
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(key, value);
    }
    out
}

// ---- local destination output ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    JsonlGz,
    Csv,
    CsvGz,
    Parquet,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::JsonlGz,
        Format::Jsonl,
        Format::CsvGz,
        Format::Csv,
        Format::Parquet,
    ];

    pub fn ext(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::JsonlGz => "jsonl.gz",
            Format::Csv => "csv",
            Format::CsvGz => "csv.gz",
            Format::Parquet => "parquet",
        }
    }

    fn is_csv(self) -> bool {
        matches!(self, Format::Csv | Format::CsvGz)
    }

    fn is_gz(self) -> bool {
        matches!(self, Format::JsonlGz | Format::CsvGz)
    }
}

/// One final-named object, fully decoded.
#[derive(Debug, Clone)]
pub struct Object {
    /// The key: path relative to the destination root, '/'-separated.
    pub rel: String,
    /// The 16 hex digits of `part-{p}.{ext}`.
    pub part: String,
    pub format: Format,
    /// The bytes as stored.
    pub raw: Vec<u8>,
    /// JSONL: each line's object. CSV: header -> cell, every cell a string.
    /// Parquet: column -> value, typed as its column (see `sinks`).
    pub records: Vec<Map<String, Value>>,
}

/// Everything under a destination's root: a local base directory, or a
/// bucket, container or directory `sinks` read.
#[derive(Debug, Default)]
pub struct DestOutput {
    pub objects: BTreeMap<String, Object>,
    /// Parsed manifests, keyed by the object key they sit beside.
    pub manifests: BTreeMap<String, Value>,
    /// `.{name}.tmp-*` leftovers of interrupted writes (never read).
    pub temp_files: Vec<String>,
    /// Anything that is none of the above.
    pub other: Vec<String>,
}

/// Reads a local destination's tree. Panics on any final-named file that
/// does not decode completely: a consumer must never see a partial object.
pub fn read_dest(root: &Path) -> DestOutput {
    let mut out = DestOutput::default();
    if root.is_dir() {
        walk(root, root, &mut out);
    }
    out
}

/// Whether the last segment of `rel` names an interrupted write's
/// temporary file, which a reader never needs to fetch.
pub fn is_temp_name(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.starts_with('.') && name.contains(".tmp")
}

fn walk(root: &Path, dir: &Path, out: &mut DestOutput) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("below root")
            .to_string_lossy()
            .replace('\\', "/");
        if is_temp_name(&rel) {
            out.temp_files.push(rel);
        } else {
            let raw = fs::read(&path).unwrap();
            out.add(rel, raw);
        }
    }
}

impl DestOutput {
    /// Files one stored file or object under `rel` (its key below the
    /// destination's root): temporary file, manifest, object or other.
    /// Panics on a final-named object or manifest that does not decode.
    pub fn add(&mut self, rel: String, raw: Vec<u8>) {
        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
        if is_temp_name(&rel) {
            self.temp_files.push(rel);
        } else if let Some(object) = rel.strip_suffix(".manifest.json") {
            let m: Value = serde_json::from_slice(&raw)
                .unwrap_or_else(|e| panic!("manifest {rel} is not complete JSON: {e}"));
            self.manifests.insert(object.to_string(), m);
        } else if let Some((part, format)) = object_name(&name) {
            let records = decode(&rel, format, &raw);
            self.objects.insert(
                rel.clone(),
                Object {
                    rel,
                    part,
                    format,
                    raw,
                    records,
                },
            );
        } else {
            self.other.push(rel);
        }
    }
}

/// `part-{16 hex}.{ext}` → (hex, format).
fn object_name(name: &str) -> Option<(String, Format)> {
    let rest = name.strip_prefix("part-")?;
    Format::ALL.iter().find_map(|f| {
        let part = rest.strip_suffix(&format!(".{}", f.ext()))?;
        (part.len() == 16 && part.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| (part.to_string(), *f))
    })
}

/// Decodes a whole object or panics saying why it is not complete.
pub fn decode(rel: &str, format: Format, raw: &[u8]) -> Vec<Map<String, Value>> {
    if format == Format::Parquet {
        return sinks::parquet_rows(rel, raw);
    }
    let text = if format.is_gz() {
        let mut plain = Vec::new();
        flate2::read::GzDecoder::new(raw)
            .read_to_end(&mut plain)
            .unwrap_or_else(|e| panic!("{rel}: gzip does not decompress completely: {e}"));
        plain
    } else {
        raw.to_vec()
    };
    if !text.is_empty() {
        assert!(
            text.ends_with(b"\n"),
            "{rel}: does not end with a newline: partial object?"
        );
    }
    if format.is_csv() {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(false)
            .from_reader(text.as_slice());
        let headers = rdr
            .headers()
            .unwrap_or_else(|e| panic!("{rel}: bad CSV header: {e}"))
            .clone();
        rdr.records()
            .map(|r| {
                let r = r.unwrap_or_else(|e| panic!("{rel}: bad CSV row: {e}"));
                headers
                    .iter()
                    .zip(r.iter())
                    .map(|(h, c)| (h.to_string(), Value::String(c.to_string())))
                    .collect()
            })
            .collect()
    } else {
        let text = std::str::from_utf8(&text).unwrap_or_else(|e| panic!("{rel}: not UTF-8: {e}"));
        text.lines()
            .enumerate()
            .map(|(i, line)| match serde_json::from_str(line) {
                Ok(Value::Object(m)) => m,
                other => panic!("{rel} line {}: not a JSON object: {other:?}", i + 1),
            })
            .collect()
    }
}

/// What a CSV row of `record` holds: strings raw, null as an empty cell,
/// anything else as compact JSON (the encoder's documented rules).
pub fn csv_cells(record: &Map<String, Value>) -> Map<String, Value> {
    record
        .iter()
        .map(|(k, v)| {
            let cell = match v {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), Value::String(cell))
        })
        .collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl DestOutput {
    pub fn record_count(&self) -> usize {
        self.objects.values().map(|o| o.records.len()).sum()
    }

    /// Every record, object by object (key order).
    pub fn records(&self) -> impl Iterator<Item = &Map<String, Value>> {
        self.objects.values().flat_map(|o| o.records.iter())
    }

    /// Checks every object has a manifest that describes it exactly (path,
    /// rows, bytes, sha256, format, stream, the key its name came from, and
    /// the dt= partition of its staging day); returns (seq, object key)
    /// sorted by seq.
    pub fn verify_manifests(&self, stream: &str) -> Vec<(u64, String)> {
        for key in self.manifests.keys() {
            assert!(
                self.objects.contains_key(key),
                "manifest {key}.manifest.json has no object"
            );
        }
        let mut seqs = Vec::new();
        for (key, o) in &self.objects {
            let m = self
                .manifests
                .get(key)
                .unwrap_or_else(|| panic!("object {key} has no manifest"));
            assert_eq!(m["path"], key.as_str(), "{key}: manifest path");
            assert_eq!(
                u(&m["rows"]),
                o.records.len() as u64,
                "{key}: manifest rows"
            );
            assert_eq!(u(&m["bytes"]), o.raw.len() as u64, "{key}: manifest bytes");
            assert_eq!(
                m["sha256"],
                sha256_hex(&o.raw).as_str(),
                "{key}: manifest sha256"
            );
            assert_eq!(m["format"], o.format.ext(), "{key}: manifest format");
            assert_eq!(m["stream"], stream, "{key}: manifest stream");
            let idem = m["idempotency_key"].as_str().expect("idempotency_key");
            assert_eq!(idem.len(), 32, "{key}: idempotency key {idem}");
            assert_eq!(&idem[..16], o.part, "{key}: name is not the key's prefix");
            let staged = m["staged_at"].as_str().expect("staged_at");
            if let Some(dt) = key.split('/').find_map(|p| p.strip_prefix("dt=")) {
                assert_eq!(&staged[..10], dt, "{key}: partition is not the staging day");
            }
            seqs.push((u(&m["seq"]), key.clone()));
        }
        seqs.sort();
        seqs
    }
}

/// The records of `out` keyed by `field` (a u64), asserting each appears
/// once.
pub fn by_id<'a>(out: &'a DestOutput, field: &str) -> BTreeMap<u64, &'a Map<String, Value>> {
    let mut seen = BTreeMap::new();
    for r in out.records() {
        let id = match &r[field] {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("record without a numeric {field}: {r:?}"));
        assert!(seen.insert(id, r).is_none(), "{field} {id} appears twice");
    }
    seen
}
