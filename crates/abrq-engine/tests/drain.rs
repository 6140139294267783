//! The drain loop against an in-process destination whose failures the
//! test scripts: ordering, retries, breaker, dead letters, replay, pause.
//! (The real binary against real files is tested in crates/abrq/tests.)

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abrq_core::config::Config;
use abrq_core::{Batch, CheckReport, DeliveryError, DeliveryReport, Destination, ReasonClass};
use abrq_engine::{Engine, Metrics, Switch};
use abrq_state::{DeadLetterState, DeadLettersRead, MarksRead, SpoolRead, SqliteStore};
use async_trait::async_trait;

/// What the scripted destination does on its next attempts.
#[derive(Clone, Copy, Debug)]
enum Step {
    Ok,
    Transient,
    Reject,
}

#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Step>>,
    delivered: Mutex<Vec<u64>>,
    attempts: Mutex<u64>,
}

#[async_trait]
impl Destination for Scripted {
    fn kind(&self) -> &'static str {
        "scripted"
    }

    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        *self.attempts.lock().unwrap() += 1;
        let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Ok);
        match step {
            Step::Ok => {
                self.delivered.lock().unwrap().push(batch.meta.seq);
                Ok(DeliveryReport::default())
            }
            Step::Transient => Err(DeliveryError::transient(std::io::Error::other(
                "scripted outage",
            ))),
            Step::Reject => Err(DeliveryError::dead_letter(
                ReasonClass::Rejected,
                std::io::Error::other("scripted rejection"),
            )
            .at_record(3)),
        }
    }

    async fn check(&self) -> Result<CheckReport, DeliveryError> {
        Ok(CheckReport::default())
    }
}

struct Rig {
    engine: Arc<Engine>,
    store: Arc<SqliteStore>,
    dest: Arc<Scripted>,
    _dir: tempfile::TempDir,
}

async fn rig(max_attempts: u32, threshold: u32, cooldown: &str, script: Vec<Step>) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[[streams]]
name = "s"
[streams.source]
engine = "http"
[[streams.destinations]]
name = "d"
engine = "local"
database = "unused"
[streams.destinations.retry]
max_attempts = {max_attempts}
initial_backoff = "1ms"
max_backoff = "5ms"
[streams.destinations.breaker]
failure_threshold = {threshold}
cooldown = "{cooldown}"
"#
    );
    let config = Config::parse(&text, "test").unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("state.db")).unwrap());
    let dest = Arc::new(Scripted::default());
    dest.script.lock().unwrap().extend(script);
    let d2 = dest.clone();
    let factory = move |_: &str, _: &abrq_core::config::DestinationConfig| {
        Ok(d2.clone() as Arc<dyn Destination>)
    };
    let engine = Engine::start(&config, store.clone(), Arc::new(Metrics::new()), &factory)
        .await
        .unwrap();
    Rig {
        engine,
        store,
        dest,
        _dir: dir,
    }
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn ingest(r: &Rig, n: usize) {
    for i in 0..n {
        r.engine
            .ingest("s", format!("{{\"i\":{i}}}").into(), None)
            .await
            .unwrap();
    }
}

fn hwm(r: &Rig) -> u64 {
    r.engine
        .stream("s")
        .unwrap()
        .destination("d")
        .unwrap()
        .mark()
        .durable()
}

fn attempts(r: &Rig) -> u64 {
    *r.dest.attempts.lock().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn delivers_in_order_through_transient_failures() {
    let r = rig(
        10,
        100,
        "1s",
        vec![Step::Transient, Step::Transient, Step::Ok, Step::Transient],
    )
    .await;
    ingest(&r, 5).await;
    wait_for("all five", || hwm(&r) == 5).await;
    assert_eq!(*r.dest.delivered.lock().unwrap(), vec![1, 2, 3, 4, 5]);
    assert_eq!(*r.dest.attempts.lock().unwrap(), 8);
    r.engine.shutdown().await;
    // the mark writer committed the last mark before shutdown returned
    assert_eq!(
        r.store.destination("s", "d").await.unwrap().high_water_mark,
        5
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rejection_dead_letters_at_once_and_the_rest_flows() {
    let r = rig(10, 100, "1s", vec![Step::Ok, Step::Reject]).await;
    ingest(&r, 4).await;
    wait_for("all four passed", || hwm(&r) == 4).await;
    assert_eq!(*r.dest.delivered.lock().unwrap(), vec![1, 3, 4]);
    let dls = r.store.dead_letters("s", "d", None).await.unwrap();
    assert_eq!(dls.len(), 1);
    assert_eq!(dls[0].seq, 2);
    assert_eq!(dls[0].reason_class, ReasonClass::Rejected);
    assert!(dls[0].error.contains("record 3"), "{}", dls[0].error);
    assert_eq!(dls[0].attempts, 1);
    // a targeted replay delivers it to this destination once
    r.engine
        .replay("s", "d", Some(dls[0].id), "test")
        .await
        .unwrap();
    wait_for("replayed", || r.dest.delivered.lock().unwrap().len() == 4).await;
    assert_eq!(*r.dest.delivered.lock().unwrap(), vec![1, 3, 4, 2]);
    // The dead letter is marked after the destination accepted it.
    let mut state = DeadLetterState::Pending;
    for _ in 0..2000 {
        state = r.store.dead_letter_get(dls[0].id).await.unwrap().0.state;
        if state == DeadLetterState::Replayed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(state, DeadLetterState::Replayed);
    r.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retries_exhausted_becomes_a_dead_letter() {
    let r = rig(3, 100, "1s", vec![Step::Transient; 3]).await;
    ingest(&r, 2).await;
    wait_for("both passed", || hwm(&r) == 2).await;
    let dls = r
        .store
        .dead_letters("s", "d", Some(DeadLetterState::Pending))
        .await
        .unwrap();
    assert_eq!(dls.len(), 1);
    assert_eq!(dls[0].reason_class, ReasonClass::RetriesExhausted);
    assert_eq!(dls[0].attempts, 3);
    assert_eq!(*r.dest.delivered.lock().unwrap(), vec![2]);
    r.engine.shutdown().await;
}

// The tests below stop tokio's clock once the loop is where they want it
// and move it by hand: an hour of cooldown passes at once, and "nothing
// happened" is checked over that hour instead of a real-time sleep. (The
// state store works on real threads, so the clock runs while it does.)

#[tokio::test]
async fn open_breaker_makes_no_attempts_until_reset() {
    let r = rig(1000, 2, "1h", vec![Step::Transient; 2]).await;
    ingest(&r, 1).await;
    let m = r.engine.metrics.clone();
    wait_for("breaker open", || {
        m.circuit_opened.with_label_values(&["local"]).get() == 1
    })
    .await;
    assert_eq!(attempts(&r), 2);
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(59 * 60)).await;
    tokio::task::yield_now().await;
    assert_eq!(attempts(&r), 2, "no attempts while open");
    tokio::time::resume();
    r.engine.reset_breaker("s", "d", "test").await.unwrap();
    wait_for("delivered after reset", || hwm(&r) == 1).await;
    assert_eq!(attempts(&r), 3);
    r.engine.shutdown().await;
}

#[tokio::test]
async fn open_breaker_lets_one_trial_through_after_its_cooldown() {
    let r = rig(1000, 2, "1h", vec![Step::Transient; 3]).await;
    ingest(&r, 1).await;
    let m = r.engine.metrics.clone();
    wait_for("breaker open", || {
        m.circuit_opened.with_label_values(&["local"]).get() == 1
    })
    .await;
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(59 * 60)).await;
    tokio::task::yield_now().await;
    assert_eq!(attempts(&r), 2, "still cooling down");
    // Past the cooldown: one trial, which fails and opens the circuit
    // again (a second trip), then no attempt for another hour.
    tokio::time::advance(Duration::from_secs(2 * 60)).await;
    tokio::time::resume();
    wait_for("a second trip", || {
        m.circuit_opened.with_label_values(&["local"]).get() == 2
    })
    .await;
    assert_eq!(attempts(&r), 3, "exactly one trial");
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(59 * 60)).await;
    tokio::task::yield_now().await;
    assert_eq!(attempts(&r), 3);
    // The next trial succeeds and closes it.
    tokio::time::advance(Duration::from_secs(2 * 60)).await;
    tokio::time::resume();
    wait_for("delivered by the second trial", || hwm(&r) == 1).await;
    assert_eq!(attempts(&r), 4);
    let state = r.store.destination("s", "d").await.unwrap().breaker;
    assert_eq!(state, abrq_core::BreakerState::Closed { failures: 0 });
    r.engine.shutdown().await;
}

#[tokio::test]
async fn paused_destination_waits_and_keeps_its_batches() {
    let r = rig(10, 100, "1s", vec![]).await;
    r.engine
        .switch("s", "d", Switch::Pause, "test")
        .await
        .unwrap();
    ingest(&r, 3).await;
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(3600)).await;
    tokio::task::yield_now().await;
    tokio::time::resume();
    assert_eq!(hwm(&r), 0);
    assert_eq!(attempts(&r), 0);
    abrq_engine::gc::collect(&r.engine.stream("s").unwrap(), &*r.store)
        .await
        .unwrap();
    assert_eq!(r.store.spool_stats("s").await.unwrap().batches, 3);
    r.engine
        .switch("s", "d", Switch::Resume, "test")
        .await
        .unwrap();
    wait_for("drained after resume", || hwm(&r) == 3).await;
    assert_eq!(*r.dest.delivered.lock().unwrap(), vec![1, 2, 3]);
    r.engine.shutdown().await;
}
