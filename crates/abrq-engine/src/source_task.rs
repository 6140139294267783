//! The task that reads a pull source (file, generate) and stages what it reads, batch by
//! batch, with the cursor just past each batch in the same transaction.

use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::config::{SourceConfig, SourceEngine};
use abrq_sources::{Chunk, FileSource, GenerateSource, Limits, ReadChunk, SourceError};
use abrq_state::NewBatch;

use crate::stream::{StageError, StreamShared};

/// How often a followed file is checked for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

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
    #[error("source reader task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Runs the stream's pull source (file or generate) until it is exhausted
/// (or forever when following a file).
pub async fn run(stream: Arc<StreamShared>, cfg: SourceConfig) -> Result<(), SourceTaskError> {
    let cursor = stream.store.cursor(&stream.name).await?;
    match cfg.engine {
        SourceEngine::Generate => {
            let src = GenerateSource::from_config(&cfg, cursor.as_deref())?;
            pump(stream, src, false, "generate".into()).await
        }
        SourceEngine::File => {
            let src = FileSource::from_config(&cfg, cursor.as_deref())?;
            let (follow, path) = (src.follows(), src.path().display().to_string());
            pump(stream, src, follow, path).await
        }
        SourceEngine::Http | SourceEngine::Postgres | SourceEngine::Mysql => Ok(()),
    }
}

async fn pump<S: ReadChunk>(
    stream: Arc<StreamShared>,
    source: S,
    follow: bool,
    what: String,
) -> Result<(), SourceTaskError> {
    let mut source = Some(source);
    let limits = Limits {
        max_records: stream.batch.max_records,
        max_bytes: stream.batch.max_bytes.0,
    };
    let max_wait = stream.batch.max_wait.0;
    let mut pending = Chunk::default();
    let mut first_at: Option<Instant> = None;
    loop {
        if stream.cancel.is_cancelled() {
            return Ok(()); // unstaged records are read again after a restart
        }
        let want = Limits {
            max_records: limits.max_records - pending.records,
            max_bytes: limits.max_bytes.saturating_sub(pending.bytes).max(1),
        };
        let mut src = source.take().expect("source is put back after each read");
        let (src, read) = tokio::task::spawn_blocking(move || {
            let r = src.read_chunk(want);
            (src, r)
        })
        .await?;
        source = Some(src);
        let chunk = read?;
        stream.source_health.progressed();
        let at_end = chunk.at_end;
        if !chunk.is_empty() && first_at.is_none() {
            first_at = Some(Instant::now());
        }
        pending.items.extend(chunk.items);
        pending.records += chunk.records;
        pending.bytes += chunk.bytes;
        if chunk.cursor.is_some() {
            pending.cursor = chunk.cursor;
        }
        let waited_out = first_at.is_some_and(|t| t.elapsed() >= max_wait);
        let flush =
            !pending.is_empty() && (pending.is_full(limits) || waited_out || (at_end && !follow));
        if flush {
            let batch = std::mem::take(&mut pending);
            first_at = None;
            stream
                .stage_waiting(
                    vec![NewBatch::from_items(&batch.items, batch.bytes)?],
                    batch.cursor,
                )
                .await?;
        }
        if at_end {
            if !follow && pending.is_empty() {
                tracing::info!(stream = %stream.name, source = %what, "source fully staged");
                stream.source_done.send_replace(true);
                return Ok(());
            }
            let nap = match first_at {
                Some(t) => max_wait.saturating_sub(t.elapsed()).min(FOLLOW_POLL),
                None => FOLLOW_POLL,
            };
            tokio::select! {
                _ = stream.cancel.cancelled() => return Ok(()),
                _ = tokio::time::sleep(nap) => {}
            }
        }
    }
}
