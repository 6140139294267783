//! The `abrq run` processes of one test, on one shared state.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use abrq_sinks::relational::sqlx::PgPool;

use super::state::{drain_resource, leases, live_lease, source_resource, Database, Lease};
use super::{HEARTBEAT, LEASE_TIMEOUT, STREAM};
use crate::common::turns::Alone;
use crate::common::*;

/// How often the leases table is read while a takeover is timed.
pub(super) const LEASE_POLL: Duration = Duration::from_millis(50);

/// Three (or more) `abrq run` processes on one shared state.
pub(super) struct Nodes {
    /// The input file and the local destinations' directories.
    shared: tempfile::TempDir,
    pub(super) nodes: Vec<Abrq>,
    /// The instance each running process made at start (`/v1/cluster`).
    pub(super) instances: Vec<Option<String>>,
    pub(super) state: PgPool,
    pub(super) resources: Vec<String>,
}

impl Nodes {
    /// `n` processes whose configs differ only in `node_id`, `listen` and
    /// `data_dir`; `destinations(shared)` are the stream's destinations,
    /// given the shared directory.
    pub(super) fn new(
        alone: &Alone,
        n: usize,
        state: &Database,
        destinations: impl Fn(&Path) -> Vec<Destination>,
    ) -> Nodes {
        let shared = tempfile::Builder::new()
            .prefix("abrq-scale-")
            .tempdir()
            .expect("create the shared dir");
        let input = shared.path().join("orders.ndjson");
        let dests = destinations(shared.path());
        let nodes: Vec<Abrq> = (0..n).map(|_| alone.abrq()).collect();
        for (i, node) in nodes.iter().enumerate() {
            node.write_config(
                &Config::new(node)
                    .state_url(&state.url)
                    .node_id(&Self::node_id(i))
                    .lease_timeout(&format!("{}s", LEASE_TIMEOUT.as_secs()))
                    .heartbeat(&format!("{}s", HEARTBEAT.as_secs()))
                    .stream(
                        Stream::new(STREAM, Source::file(&input).follow())
                            .max_records(500)
                            .max_wait("200ms")
                            .destinations(dests.clone()),
                    )
                    .to_string(),
            );
        }
        let mut resources = vec![source_resource()];
        resources.extend(dests.iter().map(|d| drain_resource(d.name())));
        Nodes {
            shared,
            instances: vec![None; n],
            nodes,
            state: state.pool.clone(),
            resources,
        }
    }

    pub(super) fn input(&self) -> PathBuf {
        self.shared.path().join("orders.ndjson")
    }

    pub(super) fn out(&self, rel: &str) -> PathBuf {
        self.shared.path().join(rel)
    }

    pub(super) fn node_id(i: usize) -> String {
        format!("node-{i}")
    }

    /// Starts process `i` (waits for /readyz) and notes its instance.
    pub(super) async fn start(&mut self, i: usize) {
        self.nodes[i].start().await;
        let cluster = self.nodes[i].get("/v1/cluster").await;
        assert_eq!(
            cluster["node_id"],
            Self::node_id(i),
            "node-{i} answers as another node: {cluster}"
        );
        let instance = cluster["instance"]
            .as_str()
            .unwrap_or_else(|| panic!("no instance in /v1/cluster: {cluster}"))
            .to_string();
        self.instances[i] = Some(instance);
    }

    /// SIGKILLs process `i`; returns the moment just before the signal.
    pub(super) fn kill(&mut self, i: usize) -> Instant {
        self.nodes[i].note("SIGKILL from the test");
        let at = Instant::now();
        self.nodes[i].kill();
        self.instances[i] = None;
        at
    }

    /// Which running process a live lease names, by its instance.
    pub(super) fn index_of(&self, lease: &Lease) -> Option<usize> {
        let instance = lease.instance.as_deref()?;
        self.instances
            .iter()
            .position(|x| x.as_deref() == Some(instance))
    }

    /// The running process holding `resource` now, with its lease.
    pub(super) async fn holder(&self, resource: &str) -> (usize, Lease) {
        let lease = live_lease(&self.state, resource)
            .await
            .unwrap_or_else(|| panic!("nobody holds {resource}"));
        let i = self
            .index_of(&lease)
            .unwrap_or_else(|| panic!("{resource} is held by no running process: {lease:?}"));
        assert_eq!(lease.node_id.as_deref(), Some(Self::node_id(i).as_str()));
        (i, lease)
    }

    /// Waits until every resource is held by a running process and every
    /// running process holds at least one (the fair share reached).
    pub(super) async fn wait_balanced(&self) -> Vec<Lease> {
        let running = self.instances.iter().filter(|i| i.is_some()).count();
        let start = Instant::now();
        loop {
            for n in &self.nodes {
                if n.pid().is_some() {
                    n.assert_alive();
                }
            }
            let last = leases(&self.state).await;
            let held_by_running = self.resources.iter().all(|r| {
                last.iter()
                    .any(|l| &l.resource == r && l.live && self.index_of(l).is_some())
            });
            let per_node: Vec<usize> = (0..self.nodes.len())
                .map(|i| {
                    last.iter()
                        .filter(|l| l.live && self.index_of(l) == Some(i))
                        .count()
                })
                .collect();
            let everyone_works = (0..self.nodes.len())
                .filter(|i| self.instances[*i].is_some())
                .all(|i| per_node[i] >= 1);
            if held_by_running && everyone_works {
                assert_eq!(
                    per_node.iter().sum::<usize>(),
                    self.resources.len(),
                    "a live lease of an unknown resource: {last:?}"
                );
                eprintln!(
                    "[scale_out] balanced after {:?} over {running} processes: {:?}",
                    start.elapsed(),
                    last.iter()
                        .filter(|l| l.live)
                        .map(|l| format!("{}={}", l.resource, l.node_id.as_deref().unwrap_or("-")))
                        .collect::<Vec<_>>()
                );
                return last;
            }
            if start.elapsed() > Duration::from_secs(60) {
                panic!(
                    "the leases never settled on {running} processes (instances {:?}): {last:#?}",
                    self.instances
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Times the takeover of `resource` after its holder (`old`) was killed
    /// at `killed_at`: polls the leases table until another instance holds
    /// it live. Returns the time taken and the new lease.
    pub(super) async fn time_takeover(
        &self,
        resource: &str,
        old: &Lease,
        killed_at: Instant,
    ) -> (Duration, Lease) {
        loop {
            let now = live_lease(&self.state, resource).await;
            if let Some(l) = now {
                if l.instance != old.instance {
                    let took = killed_at.elapsed();
                    assert!(
                        l.epoch > old.epoch,
                        "a takeover must raise the epoch: {old:?} -> {l:?}"
                    );
                    return (took, l);
                }
            }
            if killed_at.elapsed() > Duration::from_secs(60) {
                panic!(
                    "nobody took {resource} over within 60s of the kill: {:#?}",
                    leases(&self.state).await
                );
            }
            tokio::time::sleep(LEASE_POLL).await;
        }
    }

    /// Any running process.
    pub(super) fn any(&self) -> &Abrq {
        let i = (0..self.nodes.len())
            .find(|i| self.instances[*i].is_some())
            .expect("a running process");
        &self.nodes[i]
    }

    /// The sum over the running processes of `abrq_node_leases_held`, each
    /// read from its own /metrics under its own node label.
    pub(super) async fn leases_held_metric(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if self.instances[i].is_none() {
                continue;
            }
            let id = Self::node_id(i);
            let v = n.metric("abrq_node_leases_held", &[("node", &id)]).await;
            out.push((id, v));
        }
        out
    }
}
