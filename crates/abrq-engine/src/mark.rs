//! A destination's high-water mark, owned in one place.
//!
//! Two readings exist and each has one use. The *accepted* mark is the
//! highest seq the destination took (delivered or dead-lettered); the drain
//! loop reads it to pick the next batch. The *durable* mark is the highest
//! seq committed to the state store; everyone else reads it: status, the
//! gauges, `drained()` and so `run --until-drained`, and the spool GC
//! (through the store). A crash loses at most the difference, and those
//! batches are delivered again under the same names and keys.

use std::sync::atomic::{AtomicU64, Ordering};

use abrq_state::{StateWrite, StoreError};
use tokio::sync::watch;

pub struct Mark {
    accepted: AtomicU64,
    durable: AtomicU64,
    /// Delivered seqs for the committer; it coalesces what arrives while
    /// a commit is in flight.
    wanted: watch::Sender<u64>,
}

impl Mark {
    /// The mark as the store holds it at start.
    pub fn new(stored: u64) -> Mark {
        Mark {
            accepted: AtomicU64::new(stored),
            durable: AtomicU64::new(stored),
            wanted: watch::Sender::new(stored),
        }
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Acquire)
    }

    /// The reading for everyone but the drain loop.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The destination durably accepted batch `seq`: the committer will
    /// commit it.
    pub fn delivered(&self, seq: u64) {
        self.accepted.fetch_max(seq, Ordering::AcqRel);
        self.wanted.send_if_modified(|w| {
            let newer = seq > *w;
            if newer {
                *w = seq;
            }
            newer
        });
    }

    /// Batch `seq` was dead-lettered: the store moved the mark in the same
    /// transaction, so it is durable already.
    pub fn dead_lettered(&self, seq: u64) {
        self.moved_by_store(seq);
    }

    /// An enable moved the mark past batches the GC removed, in the store.
    pub fn skipped_to(&self, seq: u64) {
        self.moved_by_store(seq);
    }

    /// Another process moved the mark (this one does not drain it now).
    pub fn observed(&self, stored: u64) {
        self.moved_by_store(stored);
    }

    /// A new tenure starts from the mark the store holds, even one below
    /// what this process accepted in an earlier tenure and never
    /// committed: those batches are delivered again.
    pub fn reset_to(&self, stored: u64) {
        self.accepted.store(stored, Ordering::Release);
        self.durable.store(stored, Ordering::Release);
        self.wanted.send_replace(stored);
    }

    fn moved_by_store(&self, seq: u64) {
        self.accepted.fetch_max(seq, Ordering::AcqRel);
        self.durable.fetch_max(seq, Ordering::AcqRel);
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.wanted.subscribe()
    }

    /// Commits the latest delivered seq if it is ahead of the durable mark.
    /// Returns whether the durable mark moved.
    pub async fn commit(
        &self,
        store: &dyn StateWrite,
        stream: &str,
        destination: &str,
    ) -> Result<bool, StoreError> {
        let want = *self.wanted.borrow();
        if want <= self.durable() {
            return Ok(false);
        }
        store.advance(stream, destination, want).await?;
        self.durable.fetch_max(want, Ordering::AcqRel);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_state::{MarksRead, MarksWrite, NewBatch, SpoolWrite, SqliteStore};

    #[tokio::test]
    async fn delivered_becomes_durable_only_by_a_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).unwrap();
        store.register_stream("s").await.unwrap();
        store
            .register_destination("s", "d", "local", true)
            .await
            .unwrap();
        let batch = || NewBatch {
            payload: b"I{}\n".to_vec(),
            records: 1,
            bytes: 3,
        };
        store
            .stage("s", vec![batch(), batch(), batch()], None, None)
            .await
            .unwrap();

        let m = Mark::new(0);
        m.delivered(2);
        m.delivered(1);
        assert_eq!((m.accepted(), m.durable()), (2, 0));
        assert!(m.commit(&store, "s", "d").await.unwrap());
        assert_eq!(m.durable(), 2);
        assert_eq!(
            store.destination("s", "d").await.unwrap().high_water_mark,
            2
        );
        assert!(!m.commit(&store, "s", "d").await.unwrap(), "nothing new");

        m.dead_lettered(3);
        assert_eq!((m.accepted(), m.durable()), (3, 3));
        m.delivered(3);
        assert!(
            !m.commit(&store, "s", "d").await.unwrap(),
            "durable already"
        );
    }
}
