//! Group commit for a pull source: while one group of batches is being
//! staged (encoded rows into SQLite, one durable commit), the pump reads
//! and encodes the next batches, and they are staged together in the next
//! commit. Each commit still stages contiguous batches with gapless seqs
//! and moves the cursor once, past its last batch, so a crash leaves the
//! spool and the cursor agreeing exactly as with one batch per commit.

use std::sync::Arc;

use abrq_state::NewBatch;
use tokio::task::JoinHandle;

use abrq_sources::Source;

use super::{SourceTaskError, PROGRESS_EVERY};
use crate::stream::{StageError, StreamShared};

/// Batches held for the next commit while one is in flight: enough to
/// cover an fsync at full read speed, few enough to bound memory. A group
/// also ends where it would fill the spool's room, so the spool overshoots
/// `max_bytes` by at most one batch, as without grouping.
const GROUP_BATCHES: usize = 8;

type Staging = JoinHandle<Result<Option<String>, StageError>>;

pub(super) struct Group {
    stream: Arc<StreamShared>,
    ready: Vec<NewBatch>,
    ready_bytes: u64,
    ready_cursor: Option<String>,
    in_flight: Option<Staging>,
    in_flight_bytes: u64,
    /// The last cursor a commit stored.
    pub last_staged: Option<String>,
}

impl Group {
    pub fn new(stream: Arc<StreamShared>) -> Group {
        Group {
            stream,
            ready: Vec::new(),
            ready_bytes: 0,
            ready_cursor: None,
            in_flight: None,
            in_flight_bytes: 0,
            last_staged: None,
        }
    }

    /// A full batch for the next commit; the commit starts now unless one
    /// is in flight (then it waits only when the group is full).
    pub async fn push(
        &mut self,
        batch: NewBatch,
        cursor: Option<String>,
        source: &mut dyn Source,
    ) -> Result<(), SourceTaskError> {
        self.ready_bytes += batch.bytes;
        self.ready.push(batch);
        if cursor.is_some() {
            self.ready_cursor = cursor;
        }
        self.settle_if_done(source).await?;
        let fills_room = self.ready_bytes + self.in_flight_bytes >= self.stream.spool_room();
        if self.in_flight.is_some() && (self.ready.len() >= GROUP_BATCHES || fills_room) {
            self.wait(source).await?;
        }
        if self.in_flight.is_none() {
            self.start();
        }
        Ok(())
    }

    /// A cursor move without records, staged once nothing else is pending.
    pub async fn move_cursor(
        &mut self,
        cursor: Option<String>,
        source: &mut dyn Source,
    ) -> Result<(), SourceTaskError> {
        self.flush(source).await?;
        self.ready_cursor = cursor;
        self.start();
        self.wait(source).await
    }

    /// Stages everything read so far and waits for it.
    pub async fn flush(&mut self, source: &mut dyn Source) -> Result<(), SourceTaskError> {
        self.wait(source).await?;
        if !self.ready.is_empty() {
            self.start();
            self.wait(source).await?;
        }
        Ok(())
    }

    fn start(&mut self) {
        let batches = std::mem::take(&mut self.ready);
        self.in_flight_bytes = std::mem::take(&mut self.ready_bytes);
        let cursor = self.ready_cursor.take();
        let stream = self.stream.clone();
        self.in_flight = Some(tokio::spawn(async move {
            stream.stage_waiting(batches, cursor.clone()).await?;
            Ok(cursor)
        }));
    }

    /// Takes up a commit that ended meanwhile.
    async fn settle_if_done(&mut self, source: &mut dyn Source) -> Result<(), SourceTaskError> {
        if self.in_flight.as_ref().is_some_and(|t| t.is_finished()) {
            self.wait(source).await?;
        }
        Ok(())
    }

    /// Waits for the commit in flight; status keeps learning the source's
    /// progress meanwhile (backpressure may hold it for long).
    async fn wait(&mut self, source: &mut dyn Source) -> Result<(), SourceTaskError> {
        let Some(task) = self.in_flight.as_mut() else {
            return Ok(());
        };
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.tick().await;
        let staged = loop {
            tokio::select! {
                done = &mut *task => break done,
                _ = tick.tick() => {
                    if let Some(p) = source.progress() {
                        self.stream.set_source_progress(p);
                    }
                }
            }
        };
        self.in_flight = None;
        self.in_flight_bytes = 0;
        let staged = staged??;
        self.stream.source_health().progressed();
        if let Some(c) = staged {
            source.staged(&c);
            self.last_staged = Some(c);
        }
        Ok(())
    }
}
