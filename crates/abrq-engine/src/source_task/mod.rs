//! The task that reads a pulled source (a file, the generator, a database
//! table or its changes) and stages what it reads, batch by batch, with
//! the cursor just past each batch in the same transaction. The source is
//! made by the stream's [`abrq_sources::SourceFactory`] from the cursor
//! the store holds; the engine names no source engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_sources::{Chunk, Limits, Source, SourceError};
use abrq_state::NewBatch;

use crate::stream::{StageError, StreamShared};
use crate::supervise::{describe, supervise, Fault};
use tokio_util::sync::CancellationToken;

mod group;
use group::Group;

/// How often status learns the source's progress while staging waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum SourceTaskError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error(transparent)]
    Store(#[from] abrq_state::StoreError),
    #[error("cannot encode a batch for the spool: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("staging task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl From<SourceTaskError> for Fault {
    /// A source's definite failure stops the task; anything else is
    /// restarted.
    fn from(e: SourceTaskError) -> Fault {
        let recovery = match &e {
            SourceTaskError::Source(s) => s.failure().recovery(),
            SourceTaskError::Stage(_)
            | SourceTaskError::Store(_)
            | SourceTaskError::Encode(_)
            | SourceTaskError::Join(_) => None,
        };
        match recovery {
            Some(recovery) => Fault::Definite {
                error: describe(&e),
                recovery: recovery.to_string(),
            },
            None => Fault::transient(&e),
        }
    }
}

/// [`run`] under its supervisor until `cancel`: the source task of a
/// process of its own, or of a tenure of the source's lease.
pub async fn run_supervised(stream: Arc<StreamShared>, cancel: CancellationToken) {
    let s = &stream;
    supervise(s.source_health(), s.events(), &cancel, || async {
        run(s.clone()).await.map_err(Fault::from)
    })
    .await
}

/// Reads the stream's source until it is exhausted (forever for one that
/// follows).
pub async fn run(stream: Arc<StreamShared>) -> Result<(), SourceTaskError> {
    let cursor = stream.store().cursor(stream.name()).await?;
    let mut source = stream.open_source(cursor.as_deref())?;
    if abrq_sources::backfills(stream.source_config()) {
        // the requests the source has not taken up yet, whichever process
        // they were asked through and whoever held the source then
        let recent = stream
            .store()
            .audit_log(Some(stream.name()), ASKED_AT_START)
            .await?;
        let newest = recent.first().map(|e| e.id);
        let asked = recent
            .iter()
            .rev()
            .filter(|e| e.action == "backfill")
            .map(backfill_ask)
            .collect();
        source.asked_before(asked, newest);
    }
    pump(stream, source).await
}

/// How many of the stream's newest audit entries a start reads for the
/// backfills asked for.
const ASKED_AT_START: u32 = 1000;

/// The backfill an audit entry of action `backfill` asks for.
pub(crate) fn backfill_ask(entry: &abrq_state::AuditEntry) -> abrq_sources::BackfillAsk {
    abrq_sources::BackfillAsk {
        id: entry.id,
        table: entry.detail["table"].as_str().map(str::to_string),
        filter: entry.detail["where"].as_str().map(str::to_string),
    }
}

/// A batch for the spool: parsed items encoded, kept lines as they are
/// (they are the spool's record lines already; see `Chunk::kept`).
fn encode(batch: Chunk) -> Result<NewBatch, serde_json::Error> {
    let mut encoded = NewBatch::from_items(&batch.items, batch.bytes)?;
    encoded.records += abrq_state::payload::record_lines(&batch.kept);
    // the items' few lines go before the kept ones in the kept buffer:
    // a page's megabytes are moved, not copied into a new one
    let mut payload = batch.kept;
    payload.splice(0..0, std::mem::take(&mut encoded.payload));
    encoded.payload = payload;
    Ok(encoded)
}

async fn pump(
    stream: Arc<StreamShared>,
    mut source: Box<dyn Source>,
) -> Result<(), SourceTaskError> {
    let pace = source.pace();
    let what = source.describe();
    let follow = pace.follow;
    let limits = Limits {
        max_records: stream.batch_config().max_records,
        max_bytes: stream.batch_config().max_bytes.0,
    };
    let max_wait = stream.batch_config().max_wait.0;
    let mut pending = Chunk::default();
    let mut first_at: Option<Instant> = None;
    let mut group = Group::new(stream.clone());
    let mut backfills = stream.backfill_requests().await;
    loop {
        if stream.source_tenure().cancel().is_cancelled() {
            // unstaged records are read again after a restart
            return group.flush(source.as_mut()).await;
        }
        while let Ok(ask) = backfills.try_recv() {
            source.backfill(ask);
        }
        let want = Limits {
            max_records: limits.max_records - pending.records,
            max_bytes: limits.max_bytes.saturating_sub(pending.bytes).max(1),
        };
        let chunk = match source.read(want).await {
            Ok(chunk) => chunk,
            Err(e) => {
                // what was read before the failure is staged first: a
                // source that stops does not hold back what came before
                if !pending.is_empty() {
                    let batch = std::mem::take(&mut pending);
                    let cursor = batch.cursor.clone();
                    group.push(encode(batch)?, cursor, source.as_mut()).await?;
                }
                group.flush(source.as_mut()).await?;
                return Err(e.into());
            }
        };
        if let Some(p) = source.progress() {
            stream.set_source_progress(p);
        }
        let at_end = chunk.at_end;
        if !chunk.is_empty() && first_at.is_none() {
            first_at = Some(Instant::now());
        }
        pending.append(chunk);
        let waited_out = first_at.is_some_and(|t| t.elapsed() >= max_wait);
        let flush =
            !pending.is_empty() && (pending.is_full(limits) || waited_out || (at_end && !follow));
        if flush {
            let batch = std::mem::take(&mut pending);
            first_at = None;
            let cursor = batch.cursor.clone();
            group.push(encode(batch)?, cursor, source.as_mut()).await?;
        } else if at_end && pending.is_empty() && pending.cursor.is_some() {
            // the source moved without a record (a transaction's commit
            // read after its changes were staged): keep the move, so a
            // replication slot can be confirmed past it while quiet
            if pending.cursor != group.last_staged {
                let cursor = pending.cursor.take();
                group.move_cursor(cursor, source.as_mut()).await?;
            }
        }
        if at_end {
            // the source is quiet: what it gave is staged before the nap
            group.flush(source.as_mut()).await?;
            // Reading is not progress on its own: a source that reads but
            // cannot stage (a locked state store) stays failing until a
            // commit lands (`Group::wait`) or it has nothing left to stage.
            stream.source_health().progressed();
        }
        if at_end {
            if !follow && pending.is_empty() {
                tracing::info!(stream = %stream.name(), source = %what, "source fully staged");
                stream.set_source_done();
                return Ok(());
            }
            let nap = match first_at {
                Some(t) => max_wait.saturating_sub(t.elapsed()).min(pace.idle),
                None => pace.idle,
            };
            tokio::select! {
                _ = stream.source_tenure().cancel().cancelled_owned() => return Ok(()),
                _ = tokio::time::sleep(nap) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Item, Op};

    /// A source's kept lines are the spool's record lines: staged as they
    /// are, they read back as the records they were.
    #[test]
    fn kept_lines_read_back_from_the_spool() {
        let chunk = Chunk {
            kept: b"I{\"a\": 1}\nD{\"id\":2}\n".to_vec(),
            records: 2,
            bytes: 18,
            ..Chunk::default()
        };
        let batch = encode(chunk).unwrap();
        assert_eq!((batch.records, batch.bytes), (2, 18));
        let items = abrq_state::payload::decode_lines(&batch.payload).unwrap();
        let ops: Vec<(Op, String)> = items
            .iter()
            .filter_map(Item::as_record)
            .map(|r| (r.op, serde_json::to_string(&r.fields).unwrap()))
            .collect();
        assert_eq!(
            ops,
            vec![
                (Op::Insert, "{\"a\":1}".to_string()),
                (Op::Delete, "{\"id\":2}".to_string())
            ]
        );
    }
}
