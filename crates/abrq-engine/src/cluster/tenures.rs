//! Starting and stopping the work of one lease.

use std::sync::Arc;

use abrq_state::{drain_resource, source_resource, Fence, LeaseStore, StoreResult};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::destination::{DestShared, Switches};
use crate::stream::StreamShared;
use crate::supervise::describe;
use crate::tenure::Tenure;
use crate::{drain, source_task};

/// Work a lease stands for.
#[derive(Clone)]
pub(super) enum Resource {
    Source(Arc<StreamShared>),
    Drain(Arc<StreamShared>, Arc<DestShared>),
}

impl Resource {
    pub(super) fn name(&self) -> String {
        match self {
            Resource::Source(s) => source_resource(s.name()),
            Resource::Drain(s, d) => drain_resource(s.name(), &d.labels().destination),
        }
    }

    /// The stream whose work it is.
    pub(super) fn stream(&self) -> &str {
        match self {
            Resource::Source(s) | Resource::Drain(s, _) => s.name(),
        }
    }

    /// Every resource of these streams, each stream's together: a source
    /// per stream this process reads itself (not HTTP ingest: any process
    /// stages what it is sent), a drain per destination.
    pub(super) fn all(streams: &[Arc<StreamShared>]) -> Vec<Resource> {
        let mut out = Vec::new();
        for s in streams {
            if s.source_engine().pulled() {
                out.push(Resource::Source(s.clone()));
            }
            for d in s.destinations() {
                out.push(Resource::Drain(s.clone(), d.clone()));
            }
        }
        out
    }
}

/// A lease this process holds and the tasks doing its work.
pub(super) struct Held {
    pub resource: Resource,
    pub fence: Fence,
    cancel: CancellationToken,
    tasks: JoinSet<()>,
}

/// Starts the work of a lease just claimed, from what the store holds now:
/// the previous holder's last committed mark (or cursor), breaker and
/// switches.
pub(super) async fn start(
    leases: &dyn LeaseStore,
    resource: Resource,
    fence: Fence,
) -> StoreResult<Held> {
    let store = leases.fenced(fence.clone());
    let mut tasks = JoinSet::new();
    let cancel;
    match &resource {
        Resource::Drain(s, d) => {
            let row = s
                .store()
                .destination(s.name(), &d.labels().destination)
                .await?;
            let stats = s.store().spool_stats(s.name()).await?;
            s.saw_staged(stats.last_seq);
            d.mark().reset_to(row.high_water_mark);
            d.with_breaker(|b| b.state = row.breaker);
            d.set_switches(Switches::from(&row));
            s.events().breaker_changed(d.labels(), &row.breaker);
            s.events()
                .marks(d.labels(), row.high_water_mark, stats.last_seq);
            cancel = s.cancel().child_token();
            d.tenure().set(Tenure {
                store,
                cancel: cancel.clone(),
            });
            d.tenure().set_held(true);
            tasks.spawn(drain::run(s.clone(), d.clone()));
            tasks.spawn(drain::run_marks(s.clone(), d.clone()));
        }
        Resource::Source(s) => {
            let stats = s.store().spool_stats(s.name()).await?;
            s.saw_staged(stats.last_seq);
            cancel = s.cancel().child_token();
            s.source_tenure().set(Tenure {
                store,
                cancel: cancel.clone(),
            });
            s.source_tenure().set_held(true);
            tasks.spawn(source_task::run_supervised(s.clone(), cancel.clone()));
        }
    }
    tracing::info!(resource = %fence.resource, epoch = fence.epoch, "lease claimed; work started");
    Ok(Held {
        resource,
        fence,
        cancel,
        tasks,
    })
}

/// Ends the work of a lease. `graceful`: this process still holds the
/// lease, so the last delivered mark is committed before it is handed
/// back. Otherwise the lease was lost: the work stops and nothing more is
/// written (the store would refuse it anyway).
pub(super) async fn stop(leases: Arc<dyn LeaseStore>, mut held: Held, graceful: bool) {
    held.cancel.cancel();
    while let Some(r) = held.tasks.join_next().await {
        if let Err(e) = r {
            tracing::error!(resource = %held.fence.resource, error = %e, "task ended abnormally");
        }
    }
    match &held.resource {
        Resource::Drain(s, d) => {
            d.tenure().set_held(false);
            if graceful {
                drain::flush_mark(s, d).await;
            }
        }
        Resource::Source(s) => s.source_tenure().set_held(false),
    }
    if graceful {
        match leases.release(&held.fence).await {
            Ok(()) => {
                tracing::info!(resource = %held.fence.resource, epoch = held.fence.epoch, "lease handed back")
            }
            Err(e) => {
                tracing::warn!(resource = %held.fence.resource, error = %describe(&e), "lease not handed back; it expires instead")
            }
        }
    } else {
        tracing::warn!(resource = %held.fence.resource, epoch = held.fence.epoch, "lease lost to another process; its work stopped here");
    }
}
