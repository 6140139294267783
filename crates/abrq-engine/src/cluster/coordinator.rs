//! The heartbeat loop: renew, stop what was lost, balance, claim.
//!
//! Balance is a fair share: resources / live processes, rounded up. A
//! process above it hands leases back (gracefully: the last mark committed
//! first) so a process that joined finds free ones; one below it claims
//! free or expired leases. Each process starts its scan at its own offset
//! (the first resource of a stream), so processes joining at once do not
//! all race for the same leases and each takes whole streams where it can.
//!
//! Two rules keep leases from moving back and forth at start: a process
//! announces itself and waits a short join window before its first claim
//! (so processes started together see each other and claim their shares,
//! not all of it), and a lease it handed back to balance is not claimed by
//! it again for two heartbeats (the others get the first chance).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_state::{Fence, LeaseStore, StoreResult};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::tenures::{self, Held, Resource};
use super::Cluster;
use crate::events::Events;
use crate::stream::StreamShared;
use crate::supervise::describe;

pub(crate) async fn run(
    cluster: Arc<Cluster>,
    streams: Vec<Arc<StreamShared>>,
    events: Events,
    cancel: CancellationToken,
) {
    let mut c = Coordinator {
        resources: Resource::all(&streams),
        held: BTreeMap::new(),
        renewed_at: Instant::now(),
        stopping: JoinSet::new(),
        stopping_names: BTreeSet::new(),
        handed_back: HashMap::new(),
        events,
        cluster,
    };
    let every = c.cluster.membership.heartbeat;
    c.announce(&cancel).await;
    while !cancel.is_cancelled() {
        // A tick stuck on the database must not pass silently: after a
        // lease timeout it counts as failed (and is tried again).
        let limit = c.cluster.membership.lease_timeout;
        let ticked = match tokio::time::timeout(limit, c.tick()).await {
            Ok(r) => r.map_err(|e| describe(&e)),
            Err(_) => Err(format!(
                "no answer from the state database within {limit:?}"
            )),
        };
        match ticked {
            Ok(()) => c.cluster.health.progressed(),
            Err(e) => {
                let error = format!("cannot renew or claim leases: {e}");
                c.cluster.health.fail(&error);
                tracing::warn!(error, "heartbeat failed");
                // Past the timeout another process may hold these leases:
                // stop their work here (the store refuses its writes anyway).
                if c.renewed_at.elapsed() >= c.cluster.membership.lease_timeout {
                    c.lose_all().await;
                }
            }
        }
        c.publish();
        while let Some(done) = c.stopping.try_join_next() {
            if let Ok(name) = done {
                c.stopping_names.remove(&name);
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
    }
    c.hand_back_all().await;
}

struct Coordinator {
    cluster: Arc<Cluster>,
    resources: Vec<Resource>,
    held: BTreeMap<String, Held>,
    /// When the leases were last renewed.
    renewed_at: Instant,
    /// Work being stopped: an attempt in flight finishes first (up to its
    /// timeout), and the heartbeat must not wait for it.
    stopping: JoinSet<String>,
    /// Their resources: not claimed again until stopped here (the tasks
    /// of two tenures of one drain must never run at once).
    stopping_names: BTreeSet<String>,
    /// Leases handed back to balance, and when: not claimed again here
    /// until [`Coordinator::cooldown`] has passed.
    handed_back: HashMap<String, Instant>,
    events: Events,
}

/// The longest a process waits after announcing itself before it claims.
const JOIN_WINDOW: Duration = Duration::from_secs(1);

impl Coordinator {
    /// The first heartbeat only announces this process; claims wait half a
    /// heartbeat (at most [`JOIN_WINDOW`]) for the processes started with
    /// it. A failure here is left to the loop's first tick to report.
    async fn announce(&mut self, cancel: &CancellationToken) {
        let m = &self.cluster.membership;
        let announced = m
            .leases
            .heartbeat(&m.node, &m.host, m.pid, m.lease_timeout)
            .await;
        if announced.is_ok() {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep((m.heartbeat / 2).min(JOIN_WINDOW)) => {}
            }
        }
    }

    /// How long a lease handed back to balance is left to the others.
    fn cooldown(&self) -> Duration {
        self.cluster.membership.heartbeat * 2
    }

    async fn tick(&mut self) -> StoreResult<()> {
        let cluster = self.cluster.clone();
        let m = &cluster.membership;
        let leases = m.leases.clone();
        let started = Instant::now();
        leases
            .heartbeat(&m.node, &m.host, m.pid, m.lease_timeout)
            .await?;
        let fences: Vec<Fence> = self.held.values().map(|h| h.fence.clone()).collect();
        let kept = leases.renew(&fences, m.lease_timeout).await?;
        self.renewed_at = started;
        for f in fences.iter().filter(|f| !kept.contains(f)) {
            if let Some(h) = self.held.remove(&f.resource) {
                self.events
                    .metrics
                    .leases_lost
                    .with_label_values(&[&m.node.node_id])
                    .inc();
                self.stop(&leases, h, false);
            }
        }
        let nodes = leases.nodes().await?;
        let rows = leases.leases().await?;
        let live = nodes.iter().filter(|n| n.live).count().max(1);
        let share = self.resources.len().div_ceil(live);
        // The fewest leases another live process holds: one of ours goes
        // back while we hold two more than it (3 leases on 2 + 1 + 0
        // processes become 1 + 1 + 1).
        let fewest = nodes
            .iter()
            .filter(|n| n.live && n.instance != m.node.instance)
            .map(|n| {
                rows.iter()
                    .filter(|l| l.live && l.instance == Some(n.instance))
                    .count()
            })
            .min();
        let give_back = match fewest {
            _ if self.held.len() > share => self.held.len() - share,
            Some(f) if self.held.len() > f + 1 => 1,
            _ => 0,
        };
        if give_back > 0 {
            for r in self.to_hand_back(give_back) {
                if let Some(h) = self.held.remove(&r) {
                    self.handed_back.insert(r, Instant::now());
                    self.stop(&leases, h, true);
                }
            }
        } else if self.held.len() < share {
            let cooldown = self.cooldown();
            self.handed_back.retain(|_, at| at.elapsed() < cooldown);
            let taken = |name: &str| rows.iter().any(|l| l.resource == name && l.live);
            let offset = self.offset();
            let n = self.resources.len();
            // Streams another process holds leases of, or claimed from as
            // this one scanned: the first pass leaves the rest of them to
            // it (two processes that started at one stream do not share
            // it out); the second takes what is left.
            let mut lost: BTreeSet<String> = BTreeSet::new();
            for (pass, i) in (0..2).flat_map(|pass| (0..n).map(move |i| (pass, i))) {
                if self.held.len() >= share {
                    break;
                }
                let r = self.resources[(offset + i) % n].clone();
                let name = r.name();
                let elsewhere = taken(&name);
                if elsewhere {
                    lost.insert(r.stream().to_owned());
                }
                if elsewhere
                    || self.held.contains_key(&name)
                    || self.stopping_names.contains(&name)
                    || self.handed_back.contains_key(&name)
                    || (pass == 0 && lost.contains(r.stream()))
                {
                    continue;
                }
                let Some(fence) = leases.claim(&name, &m.node, m.lease_timeout).await? else {
                    // claimed by another process since the read
                    lost.insert(r.stream().to_owned());
                    continue;
                };
                match tenures::start(&*leases, r, fence.clone()).await {
                    Ok(h) => {
                        self.held.insert(name, h);
                    }
                    Err(e) => {
                        // Hand it back rather than sit on it unworked.
                        let _ = leases.release(&fence).await;
                        return Err(e);
                    }
                }
            }
        }
        self.cluster.set_view(nodes, leases.leases().await?);
        Ok(())
    }

    /// The `n` leases to hand back: from the streams this process holds
    /// least of, so the streams it keeps stay whole.
    fn to_hand_back(&self, n: usize) -> Vec<String> {
        let held = self
            .held
            .iter()
            .map(|(r, h)| (r.as_str(), h.resource.stream()));
        hand_back_order(held.collect(), n)
    }

    /// Stops a lease's work in the background.
    fn stop(&mut self, leases: &Arc<dyn LeaseStore>, held: Held, graceful: bool) {
        let name = held.fence.resource.clone();
        self.stopping_names.insert(name.clone());
        let leases = leases.clone();
        self.stopping.spawn(async move {
            tenures::stop(leases, held, graceful).await;
            name
        });
    }

    /// Where this process starts scanning for free leases: at the first
    /// resource of one of the streams, so the leases it claims in a row
    /// are a stream's source and drains together (its object
    /// destinations of one format then share each batch's encoding).
    fn offset(&self) -> usize {
        let r = &self.resources;
        let starts: Vec<usize> = (0..r.len())
            .filter(|&i| i == 0 || r[i].stream() != r[i - 1].stream())
            .collect();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.cluster.membership.node.instance.hash(&mut h);
        let pick = (h.finish() as usize) % starts.len().max(1);
        starts.get(pick).copied().unwrap_or(0)
    }

    fn publish(&self) {
        let m = &self.events.metrics;
        let node = &self.cluster.membership.node.node_id;
        m.leases_held
            .with_label_values(&[node])
            .set(self.held.len() as i64);
        let live = self.cluster.view().nodes.iter().filter(|n| n.live).count();
        m.nodes_live.with_label_values(&[node]).set(live as i64);
    }

    async fn lose_all(&mut self) {
        let leases = self.cluster.membership.leases.clone();
        for (_, h) in std::mem::take(&mut self.held) {
            self.stop(&leases, h, false);
        }
    }

    /// Shutdown: every lease handed back at once, so others take over
    /// without waiting for the expiry; then this process leaves.
    async fn hand_back_all(&mut self) {
        let cluster = self.cluster.clone();
        let m = &cluster.membership;
        let leases = m.leases.clone();
        for (_, h) in std::mem::take(&mut self.held) {
            self.stop(&leases, h, true);
        }
        while self.stopping.join_next().await.is_some() {}
        if let Err(e) = leases.leave(&m.node).await {
            tracing::warn!(error = %describe(&e), "could not leave the shared state; this process shows as dead until its heartbeat expires");
        }
    }
}

/// The first `n` of `held` (lease, its stream) to hand back: the leases of
/// the streams held least here first, the last name first among equals.
fn hand_back_order(held: Vec<(&str, &str)>, n: usize) -> Vec<String> {
    let mut per_stream: HashMap<&str, usize> = HashMap::new();
    for (_, stream) in &held {
        *per_stream.entry(stream).or_default() += 1;
    }
    let mut order: Vec<(usize, &str)> = held
        .iter()
        .map(|(lease, stream)| (per_stream[stream], *lease))
        .collect();
    order.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)));
    order
        .into_iter()
        .take(n)
        .map(|(_, r)| r.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::hand_back_order;

    #[test]
    fn leases_go_back_from_the_streams_held_least() {
        let held = vec![
            ("drain/a/x", "a"),
            ("drain/a/y", "a"),
            ("source/a", "a"),
            ("drain/b/x", "b"),
            ("source/c", "c"),
            ("drain/c/x", "c"),
        ];
        assert_eq!(hand_back_order(held.clone(), 1), ["drain/b/x"]);
        assert_eq!(
            hand_back_order(held.clone(), 3),
            ["drain/b/x", "source/c", "drain/c/x"]
        );
        assert_eq!(hand_back_order(held, 9).len(), 6);
        assert!(hand_back_order(vec![], 2).is_empty());
    }
}
