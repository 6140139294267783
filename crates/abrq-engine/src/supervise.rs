//! Every long-running task of a stream (its source, its GC, and per
//! destination the drain loop and the mark writer) runs under a supervisor.
//! An error or a panic never ends a task silently: it is logged with the
//! stream and destination, counted, shown in status and `/readyz`, and the
//! task starts again after a full-jitter backoff. The task clears the
//! failure itself once it makes progress again.
//!
//! A [`Fault::Definite`] one (a source whose position is gone, whose
//! credentials are refused) would fail the same way at every restart: the
//! task stops instead, shown `stopped` with the recovery an operator
//! follows, and starts again when the operator asks
//! ([`LoopHealth::request_restart`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use abrq_core::retry::{backoff_ceiling, full_jitter};
use chrono::{DateTime, Utc};
use futures::FutureExt;
use rand::SeedableRng;
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::events::Events;

/// Backoff between restarts of a failing task.
const RESTART_INITIAL: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);

/// Which task of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopKind {
    Source,
    Gc,
    Drain,
    Marks,
    /// Heartbeat, lease renewal and claims, with PostgreSQL state.
    Leases,
}

impl LoopKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LoopKind::Source => "source",
            LoopKind::Gc => "gc",
            LoopKind::Drain => "drain",
            LoopKind::Marks => "marks",
            LoopKind::Leases => "leases",
        }
    }
}

/// A task's failure as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    pub error: String,
    /// When the task started failing (the first failure of this run of
    /// failures, not the latest).
    pub since: DateTime<Utc>,
    /// Restarts since the task last made progress.
    pub restarts: u64,
    /// Set when the task stopped: restarting cannot help until an
    /// operator does this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
}

impl Failure {
    /// The task stopped on a definite failure (it is not restarting).
    pub fn stopped(&self) -> bool {
        self.recovery.is_some()
    }
}

/// Why a task ended, by what its supervisor does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Restart after a backoff: it may pass.
    Transient(String),
    /// Restarting cannot help: stop until an operator restarts the task.
    Definite { error: String, recovery: String },
}

impl Fault {
    /// A transient fault with the error's causes.
    pub fn transient(e: &dyn std::error::Error) -> Fault {
        Fault::Transient(describe(e))
    }
}

/// The health of one supervised task.
pub struct LoopHealth {
    pub stream: String,
    /// Empty for the stream's own tasks (source, gc).
    pub destination: String,
    pub kind: LoopKind,
    failing: AtomicBool,
    failure: Mutex<Option<Failure>>,
    restarts: AtomicU64,
    /// An operator asked a stopped task to start again.
    restart: Notify,
}

impl LoopHealth {
    pub fn new(stream: &str, destination: &str, kind: LoopKind) -> LoopHealth {
        LoopHealth {
            stream: stream.to_string(),
            destination: destination.to_string(),
            kind,
            failing: AtomicBool::new(false),
            failure: Mutex::new(None),
            restarts: AtomicU64::new(0),
            restart: Notify::new(),
        }
    }

    pub fn failure(&self) -> Option<Failure> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// Restarts over the process's life.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Records a failure; returns how many failures in a row this makes.
    pub fn fail(&self, error: &str) -> u64 {
        self.record(error, None)
    }

    /// Records a definite failure: the task stops until
    /// [`LoopHealth::request_restart`].
    pub fn stop(&self, error: &str, recovery: &str) {
        self.record(error, Some(recovery.to_string()));
    }

    fn record(&self, error: &str, recovery: Option<String>) -> u64 {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        let next = match f.take() {
            Some(prev) => Failure {
                error: error.to_string(),
                since: prev.since,
                restarts: prev.restarts + 1,
                recovery,
            },
            None => Failure {
                error: error.to_string(),
                since: Utc::now(),
                restarts: 1,
                recovery,
            },
        };
        let n = next.restarts;
        *f = Some(next);
        self.failing.store(true, Ordering::Release);
        n
    }

    /// Whether the task stopped on a definite failure.
    pub fn is_stopped(&self) -> bool {
        self.failure().is_some_and(|f| f.stopped())
    }

    /// Starts a stopped task again (an operator fixed the cause). False
    /// when it was not stopped.
    pub fn request_restart(&self) -> bool {
        let stopped = self.is_stopped();
        if stopped {
            self.restart.notify_one();
        }
        stopped
    }

    /// The task made progress: a failure it had is over. Cheap when healthy.
    pub fn progressed(&self) {
        if !self.failing.load(Ordering::Acquire) {
            return;
        }
        let was = self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.failing.store(false, Ordering::Release);
        if let Some(f) = was {
            tracing::info!(stream = %self.stream, destination = %self.destination, task = self.kind.as_str(), failing_since = %f.since, restarts = f.restarts, "task recovered");
        }
    }

    /// "stream orders, destination lake, drain" for messages.
    pub fn describe(&self) -> String {
        if self.destination.is_empty() {
            format!("stream {}, {}", self.stream, self.kind.as_str())
        } else {
            format!(
                "stream {}, destination {}, {}",
                self.stream,
                self.destination,
                self.kind.as_str()
            )
        }
    }
}

/// Runs `body` until it returns Ok (it ended on purpose: shutdown, or a
/// finite source done) or `cancel` fires. An Err or a panic is recorded on
/// `health` and the body runs again after a backoff; a definite fault
/// stops it until an operator asks for a restart.
pub async fn supervise<F, Fut>(
    health: &LoopHealth,
    events: &Events,
    cancel: &CancellationToken,
    mut body: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Fault>>,
{
    let mut rng = rand::rngs::StdRng::from_os_rng();
    loop {
        let error = match AssertUnwindSafe(body()).catch_unwind().await {
            Ok(Ok(())) => return,
            Ok(Err(Fault::Transient(e))) => e,
            Ok(Err(Fault::Definite { error, recovery })) => {
                if cancel.is_cancelled() {
                    return;
                }
                health.stop(&error, &recovery);
                events.task_stopped(health, &error, &recovery);
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = health.restart.notified() => {}
                }
                tracing::info!(stream = %health.stream, task = health.kind.as_str(), "task restarted by an operator");
                continue;
            }
            Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
        };
        if cancel.is_cancelled() {
            return;
        }
        let in_a_row = health.fail(&error);
        health.restarts.fetch_add(1, Ordering::Relaxed);
        let pause = full_jitter(
            backoff_ceiling(in_a_row as u32, RESTART_INITIAL, RESTART_MAX),
            &mut rng,
        );
        events.task_failed(health, &error, pause);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// An error with its causes, "outer: inner: root", each said once: what a
/// task's failure shows (a store error's own message is often only where
/// it happened, "sqlite stage", and its cause says why).
pub fn describe(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn restarts_after_errors_and_panics_until_ok() {
        let health = LoopHealth::new("s", "d", LoopKind::Drain);
        let events = Events::new(Arc::new(Metrics::new()));
        let cancel = CancellationToken::new();
        let runs = AtomicU32::new(0);
        supervise(&health, &events, &cancel, || async {
            match runs.fetch_add(1, Ordering::SeqCst) {
                0 => Err(Fault::Transient("store is locked".to_string())),
                1 => panic!("bad state"),
                _ => Ok(()),
            }
        })
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(health.restarts(), 2);
        let f = health
            .failure()
            .expect("still failing: no progress was made");
        assert_eq!(f.restarts, 2);
        assert!(f.error.contains("bad state"), "{}", f.error);
        let restarts = events
            .metrics
            .loop_restarts
            .with_label_values(&["s", "d", "drain"])
            .get();
        assert_eq!(restarts, 2);
        health.progressed();
        assert!(health.failure().is_none() && !health.is_failing());
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_ends_the_backoff() {
        let health = LoopHealth::new("s", "", LoopKind::Source);
        let events = Events::new(Arc::new(Metrics::new()));
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        supervise(&health, &events, &cancel, move || {
            let c = c.clone();
            async move {
                c.cancel();
                Err(Fault::Transient("boom".to_string()))
            }
        })
        .await;
        assert!(
            health.failure().is_none(),
            "a failure during shutdown is not recorded"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_definite_fault_stops_until_an_operator_restarts() {
        let health = Arc::new(LoopHealth::new("s", "", LoopKind::Source));
        let events = Events::new(Arc::new(Metrics::new()));
        let cancel = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let task = {
            let (health, runs) = (health.clone(), runs.clone());
            tokio::spawn(async move {
                supervise(&health, &events, &cancel, || async {
                    match runs.fetch_add(1, Ordering::SeqCst) {
                        0 => Err(Fault::Definite {
                            error: "slot gone".into(),
                            recovery: "re-snapshot".into(),
                        }),
                        _ => Ok(()),
                    }
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 1, "no restart by itself");
        let f = health.failure().expect("stopped");
        assert_eq!(f.recovery.as_deref(), Some("re-snapshot"));
        assert!(health.is_failing() && health.is_stopped());
        assert!(health.request_restart());
        task.await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
