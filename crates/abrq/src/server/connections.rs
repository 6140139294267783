//! The connections open now, within `max_connections`. When every place
//! is taken, a new connection takes the place of the one that has waited
//! longest without being served (no whole request head yet, or kept alive
//! between requests), as web servers do: a flood of idle connections
//! cannot lock out probes or operators, and costs no more descriptors
//! than the limit. A connection being served is never closed for another;
//! when all are, the new one is closed at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::timeouts::Activity;

/// How long a new connection waits for an evicted one to let go of its
/// place (it only has to notice and drop its socket).
const HAND_OVER: Duration = Duration::from_millis(500);

pub struct Connections {
    places: Arc<Semaphore>,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
}

/// A connection's place; dropping it frees the place.
pub struct Place {
    connections: Arc<Connections>,
    id: u64,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.connections.open_map().remove(&self.id);
    }
}

/// How a new connection got in.
pub enum Admission {
    Free(Place),
    /// An idle connection was closed to make room.
    Evicted(Place),
    /// Every connection is being served.
    Refused,
}

impl Connections {
    pub fn new(places: usize) -> Arc<Connections> {
        Arc::new(Connections {
            places: Arc::new(Semaphore::new(places)),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        })
    }

    fn open_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        // a panic while holding it leaves a map that is still whole
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn admit(self: &Arc<Self>, activity: &Arc<Activity>) -> Admission {
        if let Ok(permit) = self.places.clone().try_acquire_owned() {
            return Admission::Free(self.place(activity, permit));
        }
        let Some(victim) = self.longest_waiting() else {
            return Admission::Refused;
        };
        victim.evict();
        let acquired = self.places.clone().acquire_owned();
        match tokio::time::timeout(HAND_OVER, acquired).await {
            Ok(Ok(permit)) => Admission::Evicted(self.place(activity, permit)),
            // the victim started a request meanwhile, and keeps its place
            _ => Admission::Refused,
        }
    }

    fn place(self: &Arc<Self>, activity: &Arc<Activity>, permit: OwnedSemaphorePermit) -> Place {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open_map().insert(id, activity.clone());
        Place {
            connections: self.clone(),
            id,
            _permit: permit,
        }
    }

    /// The open connection that has waited longest without being served.
    fn longest_waiting(&self) -> Option<Arc<Activity>> {
        self.open_map()
            .values()
            .filter_map(|a| a.waiting_since().map(|since| (since, a)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, a)| a.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::timeouts::Timeouts;

    fn activity() -> Arc<Activity> {
        let t = Duration::from_secs(60);
        Activity::new(Timeouts {
            header: t,
            idle: t,
            body: t,
        })
    }

    #[tokio::test]
    async fn a_new_connection_takes_the_longest_waiting_place() {
        let c = Connections::new(2);
        let (a, b, new) = (activity(), activity(), activity());
        let Admission::Free(pa) = c.admit(&a).await else {
            panic!("a free place")
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let Admission::Free(_pb) = c.admit(&b).await else {
            panic!("a free place")
        };
        // `a` waited longest: it is told to go, and its place is handed on
        // once it lets go
        let evicted = tokio::spawn({
            let a = a.clone();
            async move {
                a.evicted().await;
                drop(pa);
            }
        });
        assert!(matches!(c.admit(&new).await, Admission::Evicted(_)));
        evicted.await.unwrap();
    }

    #[tokio::test]
    async fn connections_being_served_keep_their_places() {
        let c = Connections::new(1);
        let a = activity();
        let Admission::Free(_pa) = c.admit(&a).await else {
            panic!("a free place")
        };
        a.busy();
        assert!(matches!(c.admit(&activity()).await, Admission::Refused));
    }
}
