//! One test's `abrq` process: its directory, config, log, spawn, kill,
//! readiness and the operator CLI.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::turns::Shared;
use super::{free_port, nap, wait_until, BIN, LONG};

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
    /// None for the processes of a test that has the machine alone.
    _turn: Option<Shared>,
}

impl Default for Abrq {
    fn default() -> Self {
        Self::new()
    }
}

impl Abrq {
    /// Waits while a test that has the machine alone runs (`turns`).
    pub fn new() -> Abrq {
        Self::with_turn(Some(Shared::take()))
    }

    /// For [`super::turns::Alone::abrq`].
    pub(super) fn unshared() -> Abrq {
        Self::with_turn(None)
    }

    fn with_turn(turn: Option<Shared>) -> Abrq {
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
            _turn: turn,
        }
    }

    pub fn dir(&self) -> &Path {
        self.tmp.as_ref().expect("temp dir").path()
    }

    /// Overwrites the spooled payload of batch `seq` in the SQLite state,
    /// as rot on disk would; abrq must be stopped.
    pub fn rot_spooled(&self, seq: u64, payload: &[u8]) {
        let db = rusqlite::Connection::open(self.path("data/state.db")).expect("open state.db");
        let n = db
            .execute(
                "UPDATE spool SET payload = ?1 WHERE seq = ?2",
                rusqlite::params![payload, seq as i64],
            )
            .expect("corrupt the payload");
        assert_eq!(n, 1, "batch {seq} is spooled");
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

    /// `abrq run`, then waits for /healthz only: for a run whose /readyz
    /// is meant to say something is failing.
    pub async fn start_live(&mut self) {
        let config = self.config_path().display().to_string();
        self.spawn(&["run", "--config", &config]);
        let healthz = format!("{}/healthz", self.base());
        wait_until(LONG, "abrq to answer /healthz", async || {
            self.assert_alive();
            matches!(self.http.get(&healthz).send().await, Ok(r) if r.status().is_success())
        })
        .await;
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

/// A `VmRSS:` or `VmHWM:` line of a process's status, in KiB.
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
