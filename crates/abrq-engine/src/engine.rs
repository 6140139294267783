//! The engine: registers streams and destinations, starts a source task, a
//! GC task and one drain loop per destination for every stream, and stops
//! them gracefully.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use abrq_core::config::{Config, StreamConfig};
use abrq_core::{Breaker, Destination};
use abrq_sources::SourceFactory;
use abrq_state::{DeadLetterState, StateStore};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::cluster::{self, Cluster, Membership};
use crate::destination::{DestShared, Switches};
use crate::events::{DestLabels, Events};
use crate::mark::Mark;
use crate::metrics::Metrics;
use crate::stream::StreamShared;
use crate::supervise::{Failure, LoopHealth, LoopKind};
use crate::tenure::TenureSlot;
use crate::{drain, gc, source_task};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] abrq_state::StoreError),
    #[error("stream {stream:?}, destination {destination:?}: {message}")]
    Destination {
        stream: String,
        destination: String,
        message: String,
    },
}

/// Builds the destination object for a config entry; the binary passes the
/// sinks crate's factory, tests may pass their own. (Sources come from an
/// [`abrq_sources::SourceFactory`], by default [`abrq_sources::open`].)
pub type DestinationFactory = dyn Fn(&str, &abrq_core::config::DestinationConfig) -> Result<Arc<dyn Destination>, String>
    + Send
    + Sync;

pub struct Engine {
    streams: BTreeMap<String, Arc<StreamShared>>,
    pub metrics: Arc<Metrics>,
    pub store: Arc<dyn StateStore>,
    cancel: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
    /// One permit per ingest request being read and staged.
    ingest_permits: Arc<Semaphore>,
    max_ingest_requests: usize,
    /// Set when processes share the state: leases decide what runs here.
    pub cluster: Option<Arc<Cluster>>,
}

impl Engine {
    /// Runs every source and drain in this process (a state of its own),
    /// with the sources crate's sources.
    pub async fn start(
        config: &Config,
        store: Arc<dyn StateStore>,
        metrics: Arc<Metrics>,
        build: &DestinationFactory,
    ) -> Result<Arc<Engine>, StartError> {
        let sources = Arc::new(abrq_sources::open);
        Engine::start_with(config, store, None, metrics, build, sources).await
    }

    /// With `membership`, the state is shared: this process runs the
    /// sources and drains whose leases it holds.
    pub async fn start_with(
        config: &Config,
        store: Arc<dyn StateStore>,
        membership: Option<Membership>,
        metrics: Arc<Metrics>,
        build: &DestinationFactory,
        sources: Arc<SourceFactory>,
    ) -> Result<Arc<Engine>, StartError> {
        let solo = membership.is_none();
        let cancel = CancellationToken::new();
        let events = Events::new(metrics.clone());
        let mut streams = BTreeMap::new();
        for sc in &config.streams {
            let sc = sc.get_ref();
            let shared = register_stream(
                sc,
                config,
                store.clone(),
                events.clone(),
                cancel.clone(),
                Factories {
                    destinations: build,
                    sources: sources.clone(),
                },
                solo,
            )
            .await?;
            streams.insert(shared.name.clone(), shared);
        }
        let engine = Arc::new(Engine {
            streams,
            metrics,
            store,
            cancel,
            tasks: Mutex::new(JoinSet::new()),
            ingest_permits: Arc::new(Semaphore::new(config.server.max_ingest_requests)),
            max_ingest_requests: config.server.max_ingest_requests,
            cluster: membership.map(|m| Arc::new(Cluster::new(m))),
        });
        match &engine.cluster {
            None => engine.spawn_tasks(config),
            Some(cluster) => engine.spawn_shared(cluster.clone(), config),
        }
        Ok(engine)
    }

    fn spawn_tasks(&self, config: &Config) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for sc in &config.streams {
            let sc = sc.get_ref();
            let s = self.streams[sc.name.as_str()].clone();
            for d in &s.destinations {
                tasks.spawn(drain::run(s.clone(), d.clone()));
                tasks.spawn(drain::run_marks(s.clone(), d.clone()));
            }
            tasks.spawn(gc::run(s.clone(), config.spool.gc_interval.0));
            if s.source_engine.pulled() {
                let cancel = s.source_tenure.cancel();
                tasks.spawn(source_task::run_supervised(s.clone(), cancel));
            }
        }
    }

    /// Shared state: the GC and a follower per stream on every process;
    /// sources and drains by lease.
    fn spawn_shared(&self, cluster: Arc<Cluster>, config: &Config) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let streams: Vec<_> = self.streams.values().cloned().collect();
        for s in &streams {
            tasks.spawn(gc::run(s.clone(), config.spool.gc_interval.0));
            tasks.spawn(cluster::run_follower(s.clone(), self.cancel.clone()));
        }
        let events = match streams.first() {
            Some(s) => s.events.clone(),
            None => Events::new(self.metrics.clone()),
        };
        tasks.spawn(cluster::run_coordinator(
            cluster,
            streams,
            events,
            self.cancel.clone(),
        ));
    }

    /// A permit to read and stage one ingest request, or None when
    /// `server.max_ingest_requests` are in flight already.
    pub fn ingest_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.ingest_permits.clone().try_acquire_owned().ok()
    }

    pub fn max_ingest_requests(&self) -> usize {
        self.max_ingest_requests
    }

    pub fn stream(&self, name: &str) -> Option<Arc<StreamShared>> {
        self.streams.get(name).cloned()
    }

    pub fn streams(&self) -> impl Iterator<Item = &Arc<StreamShared>> {
        self.streams.values()
    }

    /// The first stream whose source is failing, and why.
    pub fn failure(&self) -> Option<String> {
        self.streams.values().find_map(|s| {
            s.source_health
                .failure()
                .map(|f| format!("stream {}: {}", s.name, f.error))
        })
    }

    /// Every supervised task that is failing now: what `/readyz` reports.
    /// `/metrics`: every series, with each supervised task's failing
    /// gauge read from its health first.
    pub fn render_metrics(&self) -> String {
        for h in self.task_healths() {
            self.metrics
                .loop_failing
                .with_label_values(&[&h.stream, &h.destination, h.kind.as_str()])
                .set(i64::from(h.is_failing()));
        }
        self.metrics.render()
    }

    pub fn failing_tasks(&self) -> Vec<(String, Failure)> {
        self.task_healths()
            .filter_map(|h| Some((h.describe(), h.failure()?)))
            .collect()
    }

    /// Every supervised task: per stream its source and GC, per
    /// destination its drain loop and mark writer.
    fn task_healths(&self) -> impl Iterator<Item = &LoopHealth> {
        let leases = self.cluster.as_ref().map(|c| &c.health);
        leases
            .into_iter()
            .chain(self.streams.values().flat_map(|s| {
                [&s.source_health, &s.gc_health].into_iter().chain(
                    s.destinations
                        .iter()
                        .flat_map(|d| [&d.drain_health, &d.marks_health]),
                )
            }))
    }

    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// True when every finite source is exhausted and every enabled
    /// destination has passed the last staged batch.
    pub fn drained(&self) -> bool {
        self.streams.values().all(|s| {
            *s.source_done.borrow()
                && s.destinations
                    .iter()
                    .all(|d| !d.switches().enabled || d.mark.durable() >= s.last_seq())
        })
    }

    /// Waits until [`Engine::drained`], or fails when a source failed.
    pub async fn wait_drained(&self) -> Result<(), String> {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
        loop {
            if let Some(e) = self.failure() {
                return Err(e);
            }
            if self.drained() {
                return Ok(());
            }
            tokio::select! {
                _ = self.cancel.cancelled() => return Err("interrupted".into()),
                _ = tick.tick() => {}
            }
        }
    }

    /// Stops sources and drain loops; in-flight attempts finish or time
    /// out; then the last delivered marks are committed.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        while let Some(r) = tasks.join_next().await {
            if let Err(e) = r {
                tracing::error!(error = %e, "task ended abnormally");
            }
        }
        if self.cluster.is_some() {
            return; // each held drain's mark was committed as its lease was handed back
        }
        for s in self.streams.values() {
            for d in &s.destinations {
                drain::flush_mark(s, d).await;
            }
        }
    }
}

/// What makes a stream's destinations and its source.
struct Factories<'a> {
    destinations: &'a DestinationFactory,
    sources: Arc<SourceFactory>,
}

async fn register_stream(
    sc: &StreamConfig,
    config: &Config,
    store: Arc<dyn StateStore>,
    events: Events,
    cancel: CancellationToken,
    make: Factories<'_>,
    solo: bool,
) -> Result<Arc<StreamShared>, StartError> {
    let Factories {
        destinations: build,
        sources: open_source,
    } = make;
    let name = sc.name.as_str();
    let source_engine = sc.source.get_ref().engine;
    let row = store.register_stream(name).await?;
    let stats = store.spool_stats(name).await?;
    let mut destinations = Vec::new();
    for dc in &sc.destinations {
        let dc = dc.get_ref();
        let dname = dc.name.as_str();
        let dest = build(name, dc).map_err(|message| StartError::Destination {
            stream: name.to_string(),
            destination: dname.to_string(),
            message,
        })?;
        let kind = dc.engine.as_str();
        let mut drow = store
            .register_destination(name, dname, kind, dc.enabled)
            .await?;
        let labels = DestLabels {
            stream: name.to_string(),
            destination: dname.to_string(),
            kind: kind.to_string(),
        };
        if drow.enabled {
            // Catches a destination that fell behind the GC while it was
            // disabled, or one newly added to a stream whose spool moved on.
            if let Some(range) = store.set_enabled(name, dname, true).await? {
                events.skipped(&labels, &range);
                drow = store.destination(name, dname).await?;
            }
        }
        let pending = store
            .dead_letters(name, dname, Some(DeadLetterState::Pending))
            .await?
            .len();
        events
            .metrics
            .dead_letters_pending
            .with_label_values(&labels.d())
            .set(pending as i64);
        events.register(&labels);
        events.breaker_changed(&labels, &drow.breaker);
        events.marks(&labels, drow.high_water_mark, row.last_seq);
        let (switches, _) = watch::channel(Switches {
            enabled: drow.enabled,
            paused: drow.paused,
        });
        let drain_health = LoopHealth::new(name, dname, LoopKind::Drain);
        let marks_health = LoopHealth::new(name, dname, LoopKind::Marks);
        events.register_task(&drain_health);
        events.register_task(&marks_health);
        destinations.push(Arc::new(DestShared {
            labels,
            destination: dest,
            retry: dc.retry.into(),
            breaker: Mutex::new(Breaker {
                config: dc.breaker.into(),
                state: drow.breaker,
            }),
            switches,
            wake: Notify::new(),
            mark: Mark::new(drow.high_water_mark),
            drain_health,
            marks_health,
            tenure: TenureSlot::new(store.clone(), cancel.clone(), solo),
        }));
    }
    let source_health = LoopHealth::new(name, "", LoopKind::Source);
    let gc_health = LoopHealth::new(name, "", LoopKind::Gc);
    events.register_task(&source_health);
    events.register_task(&gc_health);
    let (staged, _) = watch::channel(row.last_seq);
    let (source_done, _) = watch::channel(false);
    events
        .metrics
        .source_paused
        .with_label_values(&[name])
        .set(0);
    events
        .metrics
        .spool_max_bytes
        .with_label_values(&[name])
        .set(i64::try_from(config.spool.max_bytes.0).unwrap_or(i64::MAX));
    Ok(Arc::new(StreamShared {
        name: name.to_string(),
        uuid: row.uuid,
        source_engine,
        source: sc.source.get_ref().clone(),
        open_source,
        batch: sc.batch.clone(),
        events,
        staged,
        spool_bytes: AtomicU64::new(stats.bytes),
        max_spool_bytes: config.spool.max_bytes.0,
        spool_freed: Notify::new(),
        source_paused: AtomicBool::new(false),
        source_done,
        source_progress: std::sync::Mutex::new(None),
        backfill_requests: std::sync::Mutex::new(Vec::new()),
        source_health,
        gc_health,
        clock: Clock::new(),
        idempotency_window: config.server.idempotency_window.0,
        destinations,
        source_tenure: TenureSlot::new(store.clone(), cancel.clone(), solo),
        store,
        cancel,
    }))
}
