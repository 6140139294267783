//! The engine: registers streams and destinations, starts a source task, a
//! GC task and one drain loop per destination for every stream, and stops
//! them gracefully.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use abrq_core::config::{Config, StreamConfig};
use abrq_core::Destination;
use abrq_sources::SourceFactory;
use abrq_state::{DeadLetterState, StateRead, StateStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cluster::{self, Cluster, Membership};
use crate::destination::DestShared;
use crate::events::{DestLabels, Events};
use crate::metrics::Metrics;
use crate::stream::StreamShared;
use crate::supervise::{Failure, LoopHealth};
use crate::tenure::Tenures;
use crate::unfenced::Unfenced;
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
    store: Arc<dyn StateRead>,
    /// What operator actions, ingest and the GC write through.
    pub(crate) unfenced: Unfenced,
    cancel: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
    /// One permit per ingest request being read and staged.
    ingest_permits: Arc<Semaphore>,
    max_ingest_requests: usize,
    /// Set when processes share the state: leases decide what runs here.
    pub cluster: Option<Arc<Cluster>>,
}

/// What every stream of an engine is built with.
pub(crate) struct Handles {
    pub store: Arc<dyn StateRead>,
    pub events: Events,
    pub cancel: CancellationToken,
    pub tenures: Tenures,
    /// Makes each stream's source.
    pub sources: Arc<SourceFactory>,
}

impl Engine {
    /// Runs every source and drain in this process (a state of its own).
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
        // the one unfenced write handle: see `unfenced.rs` for its users
        let unfenced = Unfenced::new(store.clone());
        let tenures = match &membership {
            None => Tenures::Own(store.clone().write_half()),
            Some(m) => Tenures::Shared {
                leases: m.leases.clone(),
                instance: m.node.instance,
            },
        };
        let handles = Handles {
            store: store.read_half(),
            events: Events::new(metrics.clone()),
            cancel: CancellationToken::new(),
            tenures,
            sources,
        };
        let mut streams = BTreeMap::new();
        for sc in &config.streams {
            let sc = sc.get_ref();
            let shared = register_stream(sc, config, &handles, &unfenced, build).await?;
            streams.insert(shared.name().to_string(), shared);
        }
        let engine = Arc::new(Engine {
            streams,
            metrics,
            store: handles.store,
            unfenced,
            cancel: handles.cancel,
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
            for d in s.destinations() {
                tasks.spawn(drain::run(s.clone(), d.clone()));
                tasks.spawn(drain::run_marks(s.clone(), d.clone()));
            }
            let every = config.spool.gc_interval.0;
            tasks.spawn(gc::run(s.clone(), self.unfenced.clone(), every));
            if s.source_engine().pulled() {
                let cancel = s.source_tenure().cancel();
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
            let every = config.spool.gc_interval.0;
            tasks.spawn(gc::run(s.clone(), self.unfenced.clone(), every));
            tasks.spawn(cluster::run_follower(s.clone(), self.cancel.clone()));
        }
        let events = match streams.first() {
            Some(s) => s.events().clone(),
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

    /// The state, for reading (writes go through operator actions).
    pub fn store(&self) -> &dyn StateRead {
        &*self.store
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
            s.source_health()
                .failure()
                .map(|f| format!("stream {}: {}", s.name(), f.error))
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
                [s.source_health(), s.gc_health()].into_iter().chain(
                    s.destinations()
                        .iter()
                        .flat_map(|d| [d.drain_health(), d.marks_health()]),
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
            s.source_done()
                && s.destinations()
                    .iter()
                    .all(|d| !d.switches().enabled || d.mark().durable() >= s.last_seq())
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
            for d in s.destinations() {
                drain::flush_mark(s, d).await;
            }
        }
    }
}

/// Registers a stream and its destinations (unfenced: every process does
/// at start, and registering is idempotent).
async fn register_stream(
    sc: &StreamConfig,
    config: &Config,
    handles: &Handles,
    unfenced: &Unfenced,
    build: &DestinationFactory,
) -> Result<Arc<StreamShared>, StartError> {
    let (store, events) = (&*handles.store, &handles.events);
    let name = sc.name.as_str();
    let row = unfenced.register_stream(name).await?;
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
        let mut drow = unfenced
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
            if let Some(range) = unfenced.set_enabled(name, dname, true).await? {
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
        let resource = abrq_state::drain_resource(name, dname);
        let tenure = handles.tenures.slot(resource, handles.cancel.clone());
        let d = DestShared::new(labels, dest, dc, &drow, tenure, events);
        destinations.push(Arc::new(d));
    }
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
    let s = StreamShared::new(sc, config, &row, stats.bytes, destinations, handles);
    Ok(Arc::new(s))
}
