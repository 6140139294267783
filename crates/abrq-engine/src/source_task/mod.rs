//! The task that reads a pull source (file, generate, a postgres table)
//! and stages what it reads, batch by batch, with the cursor just past
//! each batch in the same transaction.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_core::config::{SourceConfig, SourceEngine};
use abrq_sources::mysql::{Mode as MysqlMode, MysqlCdcSource, MysqlCursorSource, MysqlSettings};
use abrq_sources::postgres::{Mode, PgCdcSource, PgCursorSource, PostgresSettings};
use abrq_sources::{Chunk, FileSource, GenerateSource, Limits, Progress, ReadChunk, SourceError};
use abrq_state::NewBatch;

use crate::stream::{StageError, StreamShared};
use crate::supervise::{describe, supervise};
use tokio_util::sync::CancellationToken;

mod group;
use group::Group;

/// How often status learns the source's progress while staging waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

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

/// [`run`] under its supervisor until `cancel`: the source task of a
/// process of its own, or of a tenure of the source's lease.
pub async fn run_supervised(stream: Arc<StreamShared>, cancel: CancellationToken) {
    let s = &stream;
    supervise(s.source_health(), s.events(), &cancel, || async {
        run(s.clone(), s.source_config().clone())
            .await
            .map_err(|e| describe(&e))
    })
    .await
}

/// Runs the stream's pull source (file or generate) until it is exhausted
/// (or forever when following a file).
pub async fn run(stream: Arc<StreamShared>, cfg: SourceConfig) -> Result<(), SourceTaskError> {
    let cursor = stream.store().cursor(stream.name()).await?;
    match cfg.engine {
        SourceEngine::Generate => {
            let src = GenerateSource::from_config(&cfg, cursor.as_deref())?;
            let how = Pace::until_end(FOLLOW_POLL);
            pump(stream, Blocking(Some(src)), how, "generate".into()).await
        }
        SourceEngine::File => {
            let src = FileSource::from_config(&cfg, cursor.as_deref())?;
            let (follow, path) = (src.follows(), src.path().display().to_string());
            let how = match follow {
                true => Pace::forever(FOLLOW_POLL),
                false => Pace::until_end(FOLLOW_POLL),
            };
            pump(stream, Blocking(Some(src)), how, path).await
        }
        SourceEngine::Postgres => {
            let settings = PostgresSettings::from_config(&cfg).map_err(SourceError::Config)?;
            let what = settings.describe();
            match settings.mode {
                Mode::Cursor => {
                    let how = Pace::forever(settings.poll_interval);
                    let src = PgCursorSource::new(settings, cursor.as_deref())?;
                    pump(stream, src, how, what).await
                }
                Mode::Cdc => {
                    // a read waits for changes itself: no nap after it
                    let how = Pace::forever(Duration::from_millis(1));
                    let src = PgCdcSource::new(settings, stream.name(), cursor.as_deref())?;
                    pump(stream, src, how, what).await
                }
            }
        }
        SourceEngine::Mysql => {
            let settings = MysqlSettings::from_config(&cfg).map_err(SourceError::Config)?;
            let what = settings.describe();
            match settings.mode {
                MysqlMode::Cursor => {
                    let how = Pace::forever(settings.poll_interval);
                    let src = MysqlCursorSource::new(settings, cursor.as_deref())?;
                    pump(stream, src, how, what).await
                }
                MysqlMode::Cdc => {
                    let how = Pace::forever(Duration::from_millis(1));
                    let src = MysqlCdcSource::new(settings, stream.name(), cursor.as_deref())?;
                    pump(stream, src, how, what).await
                }
            }
        }
        SourceEngine::Http => Ok(()),
    }
}

/// A source the pump reads from.
trait Reader: Send {
    fn read(
        &mut self,
        limits: Limits,
    ) -> impl Future<Output = Result<Chunk, SourceTaskError>> + Send;

    /// Everything up to `cursor` is staged (a replication source confirms
    /// its slot now, never before).
    fn staged(&mut self, _cursor: &str) {}

    /// Where a database source reads, for status and metrics.
    fn progress(&self) -> Option<Progress> {
        None
    }

    /// An operator asked to read `table` (None: every table) again.
    fn backfill(&mut self, _table: Option<String>) {}
}

/// A source read on a blocking thread (files).
struct Blocking<S>(Option<S>);

impl<S: ReadChunk> Reader for Blocking<S> {
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceTaskError> {
        let mut src = self.0.take().expect("source is put back after each read");
        let (src, read) = tokio::task::spawn_blocking(move || {
            let r = src.read_chunk(limits);
            (src, r)
        })
        .await?;
        self.0 = Some(src);
        Ok(read?)
    }
}

impl Reader for PgCursorSource {
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceTaskError> {
        Ok(self.read_chunk(limits).await?)
    }

    fn progress(&self) -> Option<Progress> {
        Some(PgCursorSource::progress(self))
    }
}

impl Reader for PgCdcSource {
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceTaskError> {
        Ok(self.read_chunk(limits).await?)
    }

    fn staged(&mut self, cursor: &str) {
        PgCdcSource::staged(self, cursor);
    }

    fn progress(&self) -> Option<Progress> {
        Some(PgCdcSource::progress(self))
    }

    fn backfill(&mut self, table: Option<String>) {
        PgCdcSource::backfill(self, table);
    }
}

impl Reader for MysqlCursorSource {
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceTaskError> {
        Ok(self.read_chunk(limits).await?)
    }

    fn progress(&self) -> Option<Progress> {
        Some(MysqlCursorSource::progress(self))
    }
}

impl Reader for MysqlCdcSource {
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceTaskError> {
        Ok(self.read_chunk(limits).await?)
    }

    fn progress(&self) -> Option<Progress> {
        Some(MysqlCdcSource::progress(self))
    }

    fn backfill(&mut self, table: Option<String>) {
        MysqlCdcSource::backfill(self, table);
    }
}

/// What the pump does at the source's end: stop, or look again after
/// `idle`.
#[derive(Clone, Copy)]
struct Pace {
    follow: bool,
    idle: Duration,
}

impl Pace {
    fn until_end(idle: Duration) -> Pace {
        Pace {
            follow: false,
            idle,
        }
    }

    fn forever(idle: Duration) -> Pace {
        Pace { follow: true, idle }
    }
}

/// A batch for the spool: parsed items encoded, kept lines as they are
/// (they are the spool's record lines already; see `Chunk::kept`).
fn encode(batch: Chunk) -> Result<NewBatch, serde_json::Error> {
    let mut encoded = NewBatch::from_items(&batch.items, batch.bytes)?;
    encoded.records += batch.kept.iter().filter(|&&b| b == b'\n').count() as u64;
    if encoded.payload.is_empty() {
        encoded.payload = batch.kept;
    } else {
        encoded.payload.extend_from_slice(&batch.kept);
    }
    Ok(encoded)
}

async fn pump<R: Reader>(
    stream: Arc<StreamShared>,
    mut source: R,
    pace: Pace,
    what: String,
) -> Result<(), SourceTaskError> {
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
            return group.flush(&mut source).await;
        }
        while let Ok(table) = backfills.try_recv() {
            source.backfill(table);
        }
        let want = Limits {
            max_records: limits.max_records - pending.records,
            max_bytes: limits.max_bytes.saturating_sub(pending.bytes).max(1),
        };
        let chunk = source.read(want).await?;
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
            group.push(encode(batch)?, cursor, &mut source).await?;
        } else if at_end && pending.is_empty() && pending.cursor.is_some() {
            // the source moved without a record (a transaction's commit
            // read after its changes were staged): keep the move, so a
            // replication slot can be confirmed past it while quiet
            if pending.cursor != group.last_staged {
                let cursor = pending.cursor.take();
                group.move_cursor(cursor, &mut source).await?;
            }
        }
        if at_end {
            // the source is quiet: what it gave is staged before the nap
            group.flush(&mut source).await?;
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
