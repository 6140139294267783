//! `spool.max_bytes` pauses the source while a destination lags, and
//! nothing is lost once it catches up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use abrq_core::config::Config;
use abrq_core::{Batch, CheckReport, DeliveryError, DeliveryReport, Destination};
use abrq_engine::{Engine, Metrics, Switch};
use abrq_state::{MarksWrite, SpoolRead, SpoolWrite, SqliteStore};
use async_trait::async_trait;

#[derive(Default)]
struct Collect(Mutex<Vec<u64>>);

#[async_trait]
impl Destination for Collect {
    fn kind(&self) -> &'static str {
        "collect"
    }
    async fn deliver(&self, batch: &Batch) -> Result<DeliveryReport, DeliveryError> {
        self.0.lock().unwrap().push(batch.meta.seq);
        Ok(DeliveryReport::default())
    }
    async fn check(&self) -> Result<CheckReport, DeliveryError> {
        Ok(CheckReport::default())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn full_spool_pauses_the_source_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    // Each generated batch of 100 records is about 17 kB; the spool holds
    // at most 50 kB before the source must wait.
    let config = Config::parse(
        r#"
[spool]
max_bytes = "50KB"
gc_interval = "20ms"
[[streams]]
name = "s"
[streams.source]
engine = "generate"
records = 3000
[streams.batch]
max_records = 100
[[streams.destinations]]
name = "d"
engine = "local"
database = "unused"
"#,
        "test",
    )
    .unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("state.db")).unwrap());
    store.register_stream("s").await.unwrap();
    store
        .register_destination("s", "d", "collect", true)
        .await
        .unwrap();
    store.set_paused("s", "d", true).await.unwrap();
    let sink = Arc::new(Collect::default());
    let s2 = sink.clone();
    let factory = move |_: &str, _: &abrq_core::config::DestinationConfig| {
        Ok(s2.clone() as Arc<dyn Destination>)
    };
    let metrics = Arc::new(Metrics::new());
    let engine = Engine::start(&config, store.clone(), metrics.clone(), &factory)
        .await
        .unwrap();
    let paused = || metrics.source_paused.with_label_values(&["s"]).get() == 1;
    for _ in 0..2000 {
        if paused() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(paused(), "source never paused");
    let stats = store.spool_stats("s").await.unwrap();
    assert!(stats.batches < 30, "spool kept growing: {stats:?}");
    assert!(stats.bytes < 50_000 + 20_000, "spool overshot: {stats:?}");
    engine
        .switch("s", "d", Switch::Resume, "test")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), engine.wait_drained())
        .await
        .expect("drained in time")
        .unwrap();
    assert_eq!(*sink.0.lock().unwrap(), (1..=30).collect::<Vec<u64>>());
    assert_eq!(metrics.source_paused.with_label_values(&["s"]).get(), 0);
    engine.shutdown().await;
}
