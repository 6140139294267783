//! What the loop delivers next: a requested replay first, else the next
//! spooled batch. A payload that cannot be decoded never stops the loop:
//! a spooled batch becomes an `encoding` dead letter for this destination,
//! a dead letter's copy ends its replay with that reason.

use abrq_core::{Batch, ReasonClass};
use abrq_state::StoreError;

use super::settle::finish_replay;
use crate::destination::DestShared;
use crate::stream::StreamShared;

/// A spooled batch or an operator's replay.
pub(super) enum Work {
    Spool(Batch),
    Replay { id: i64, batch: Batch },
}

impl Work {
    pub(super) fn batch(&self) -> &Batch {
        match self {
            Work::Spool(b) | Work::Replay { batch: b, .. } => b,
        }
    }
}

pub(super) async fn next(
    stream: &StreamShared,
    dest: &DestShared,
) -> Result<Option<Work>, StoreError> {
    let store = &stream.store;
    let (s, d) = (stream.name.as_str(), dest.labels.destination.as_str());
    loop {
        match store.next_replay(s, d).await {
            Ok(Some((row, batch))) => return Ok(Some(Work::Replay { id: row.id, batch })),
            Ok(None) => {}
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
        match store.next_batch(s, dest.mark.accepted()).await {
            Ok(batch) => return Ok(batch.map(Work::Spool)),
            Err(e @ StoreError::Payload { seq, .. }) => {
                let error = e.to_string();
                store.dead_letter_undecodable(s, d, seq, &error).await?;
                dest.mark.dead_lettered(seq);
                let events = &stream.events;
                events.dead_lettered(&dest.labels, seq, ReasonClass::Encoding, &error);
                events.marks(&dest.labels, dest.mark.durable(), stream.last_seq());
            }
            Err(e) => return Err(e),
        }
    }
}
