//! The conformance suite against the SQLite backend: a fresh file in a
//! temporary directory per test, reopened from the same path on demand.

use std::sync::Arc;

use abrq_state::conformance::Opener;
use abrq_state::{SpoolRead, SpoolWrite, SqliteStore, StateStore};

async fn fresh() -> Opener {
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    Arc::new(move || {
        // The closure owns the directory, so it lives as long as the opener.
        let path = dir.path().join("state").join("abrq.db");
        Box::pin(async move {
            let store = SqliteStore::open(&path).expect("open sqlite store");
            Box::new(store) as Box<dyn StateStore>
        })
    })
}

abrq_state::state_store_conformance!(fresh);

#[tokio::test]
async fn run_all_runs_the_whole_suite() {
    abrq_state::conformance::run_all(fresh).await;
}

#[tokio::test]
async fn open_url_creates_directories_in_wal_mode() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("a").join("b").join("state.db");
    let store = SqliteStore::open_url(&format!("sqlite://{}", path.display())).expect("open");
    assert_eq!(store.path(), path);
    store.register_stream("s").await.expect("register");
    let raw = rusqlite::Connection::open(&path).expect("raw");
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    let err = SqliteStore::open_url("sqlite::memory:").expect_err("memory is not durable");
    assert!(err.to_string().contains("invalid state url"), "{err}");
}

/// WAL lets drain reads run while a write transaction holds the lock (here
/// another process's, simulated by a raw connection); writes wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_do_not_wait_for_a_writer() {
    use std::time::Duration;
    use tokio::time::timeout;

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("state.db");
    let store = SqliteStore::open(&path).expect("open");
    store.register_stream("s").await.expect("register");
    let batch = abrq_state::NewBatch {
        payload: vec![],
        records: 0,
        bytes: 0,
    };
    store
        .stage("s", vec![batch.clone()], None, None)
        .await
        .expect("stage");

    let raw = rusqlite::Connection::open(&path).expect("raw");
    raw.execute_batch("BEGIN IMMEDIATE; UPDATE streams SET cursor = 'held';")
        .expect("hold the write lock");

    let read = timeout(Duration::from_secs(2), store.next_batch("s", 0)).await;
    assert_eq!(
        read.expect("read not blocked")
            .expect("read")
            .map(|b| b.meta.seq),
        Some(1)
    );
    let stats = timeout(Duration::from_secs(2), store.spool_stats("s")).await;
    assert_eq!(stats.expect("stats not blocked").expect("stats").batches, 1);

    let writer = store.clone();
    let stage = tokio::spawn(async move { writer.stage("s", vec![batch], None, None).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!stage.is_finished(), "a write must wait for the lock");
    raw.execute_batch("ROLLBACK").expect("release");
    let staged = timeout(Duration::from_secs(5), stage)
        .await
        .expect("stage finishes");
    assert_eq!(
        staged.expect("join").expect("stage"),
        abrq_state::StageOutcome::Staged(vec![2])
    );
}
