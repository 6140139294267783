//! What the loop delivers next: a requested replay first, else the next
//! spooled batch. A payload that cannot be decoded never stops the loop:
//! a spooled batch becomes an `encoding` dead letter for this destination,
//! a dead letter's copy ends its replay with that reason.

use abrq_core::{Batch, ReasonClass};
use abrq_state::StoreError;

use super::settle::finish_replay;
use crate::destination::DestShared;
use crate::stream::StreamShared;

/// Records a grouped attempt carries at most (it holds them all decoded).
const GROUP_RECORDS: u64 = 20_000;

/// A spooled batch, contiguous spooled batches for one attempt (a
/// destination that groups them), or an operator's replay.
pub(super) enum Work {
    Spool(Batch),
    Group(Vec<Batch>),
    Replay { id: i64, batch: Batch },
}

impl Work {
    /// The batches, in order.
    pub(super) fn batches(&self) -> &[Batch] {
        match self {
            Work::Spool(b) | Work::Replay { batch: b, .. } => std::slice::from_ref(b),
            Work::Group(bs) => bs,
        }
    }

    pub(super) fn first(&self) -> &Batch {
        &self.batches()[0]
    }
}

/// The next work: a replay, else the next spooled batch, with up to
/// `group - 1` spooled batches after it when they are there already.
pub(super) async fn next(
    stream: &StreamShared,
    dest: &DestShared,
    group: usize,
    mut prefetched: Option<Work>,
) -> Result<Option<Work>, StoreError> {
    // reads through the stream's read half, writes through the tenure
    let (store, writes) = (stream.store(), dest.tenure().store());
    let (s, d) = (stream.name(), dest.labels().destination.as_str());
    loop {
        match store.next_replay(s, d).await {
            Ok(Some((row, batch))) => return Ok(Some(Work::Replay { id: row.id, batch })),
            Ok(None) => {
                // read while the last attempt ran, if it is still the next
                let next = dest.mark().accepted() + 1;
                if let Some(w) = prefetched.take().filter(|w| w.first().meta.seq == next) {
                    return Ok(Some(w));
                }
            }
            Err(e @ StoreError::ReplayPayload { id, seq, .. }) => {
                let error = e.to_string();
                let outcome = Err((ReasonClass::Encoding, error.clone()));
                if finish_replay(stream, dest, id, outcome).await? {
                    tracing::error!(
                        stream = s,
                        destination = d,
                        id,
                        seq,
                        error,
                        "replay cannot decode the dead letter; it stays pending"
                    );
                }
                continue;
            }
            Err(e) => return Err(e),
        }
        match read(stream, dest, dest.mark().accepted()).await {
            Ok(Some(first)) if group > 1 => {
                return Ok(Some(grow(stream, dest, first, group).await))
            }
            Ok(batch) => return Ok(batch.map(Work::Spool)),
            Err(e @ StoreError::Payload { seq, .. }) => {
                let error = e.to_string();
                writes.dead_letter_undecodable(s, d, seq, &error).await?;
                dest.mark().dead_lettered(seq);
                let events = stream.events();
                events.dead_lettered(dest.labels(), seq, ReasonClass::Encoding, &error);
                events.marks(dest.labels(), dest.mark().durable(), stream.last_seq());
            }
            Err(e) => return Err(e),
        }
    }
}

/// `first` and the spooled batches right after it, while they are there
/// and the group has room; a batch that cannot be read ends the group (it
/// is met again as the next work's first).
async fn grow(stream: &StreamShared, dest: &DestShared, first: Batch, group: usize) -> Work {
    let mut records = first.meta.records;
    let mut batches = vec![first];
    while batches.len() < group && records < GROUP_RECORDS {
        let after = batches.last().expect("one at least").meta.seq;
        match read(stream, dest, after).await {
            Ok(Some(b)) => {
                records += b.meta.records;
                batches.push(b);
            }
            Ok(None) | Err(_) => break,
        }
    }
    match batches.len() {
        1 => Work::Spool(batches.pop().expect("one")),
        _ => Work::Group(batches),
    }
}

/// The spooled work after seq `after` (none on any error: it is read
/// again the usual way), read while an attempt runs.
pub(super) async fn prefetch(
    stream: &StreamShared,
    dest: &DestShared,
    after: u64,
    group: usize,
) -> Option<Work> {
    let first = read(stream, dest, after).await.ok()??;
    Some(match group > 1 {
        true => grow(stream, dest, first, group).await,
        false => Work::Spool(first),
    })
}

/// The spooled batch after `after`, as the destination takes it: decoded,
/// or as its lines.
async fn read(
    stream: &StreamShared,
    dest: &DestShared,
    after: u64,
) -> Result<Option<Batch>, StoreError> {
    let store = stream.store();
    match dest.destination().reads_lines() {
        true => store.next_lines(stream.name(), after).await,
        false => store.next_batch(stream.name(), after).await,
    }
}
