//! The one contract every pulled source keeps with the engine, and the
//! factory that makes one from its config (`registry.rs`).
//!
//! The engine's pump reads a chunk, stages it with its cursor in one
//! transaction, then tells the source it is `staged` (a replication
//! source confirms its slot there, never earlier) and shows its
//! `progress`. A source is made from the cursor the store holds, so a
//! restart resumes exactly after the last staged record.

use std::time::Duration;

use abrq_core::config::SourceConfig;
use async_trait::async_trait;

use crate::chunk::{Chunk, Limits};
use crate::error::SourceError;
use crate::progress::Progress;

/// How the pump paces a source: whether it reads on after its end, and
/// how long it naps at the end before it looks again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Keep reading after the end (a followed file, a table, a change
    /// stream); otherwise the source is done at its end.
    pub follow: bool,
    pub idle: Duration,
}

impl Pace {
    pub fn until_end(idle: Duration) -> Pace {
        Pace {
            follow: false,
            idle,
        }
    }

    pub fn forever(idle: Duration) -> Pace {
        Pace { follow: true, idle }
    }
}

/// A backfill an operator asked for: the audit entry that records it
/// (its id orders the requests; a cursor keeps the last one taken up) and
/// the table (None: every table the stream captures).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillAsk {
    pub id: i64,
    pub table: Option<String>,
    /// Only the rows this filter (`filter::Expr`) keeps.
    pub filter: Option<String>,
}

/// A source the engine pulls records from.
#[async_trait]
pub trait Source: Send {
    /// What it reads, for logs ("postgres 127.0.0.1:5432/shop table t").
    fn describe(&self) -> String;

    fn pace(&self) -> Pace;

    /// Reads up to `limits` of records after the cursor; `at_end` says
    /// there is nothing more for now.
    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError>;

    /// Everything up to `cursor` is staged durably.
    fn staged(&mut self, _cursor: &str) {}

    /// Where a database source reads, for status and metrics.
    fn progress(&self) -> Option<Progress> {
        None
    }

    /// An operator asked to read a table (or every table) again while
    /// streaming goes on. Only a source that [`crate::backfills`] is asked.
    fn backfill(&mut self, _ask: BackfillAsk) {}

    /// At each start, before the first read: the backfills the stream's
    /// audit log holds (oldest first) and its newest entry. The source
    /// takes up those after the last one its cursor says it took up, so
    /// a request runs once whichever process it was asked through, and
    /// one not begun before a restart or a takeover is not lost.
    fn asked_before(&mut self, _asked: Vec<BackfillAsk>, _newest: Option<i64>) {}

    /// For `abrq check`: connects and says how it will read, or every
    /// prerequisite that is missing.
    async fn check(&mut self) -> Result<String, SourceError>;
}

/// The cursor the store holds (None: nothing staged yet), as the source at
/// `at` wrote it.
pub fn stored_cursor<T: serde::de::DeserializeOwned>(
    text: Option<&str>,
    at: impl FnOnce() -> String,
) -> Result<Option<T>, SourceError> {
    let parsed = text.map(parse_cursor).transpose();
    parsed.map_err(|e| e.at(at()))
}

/// A cursor the store holds, as the source that wrote it reads it back; a
/// cursor of another source (the config changed engine) is a definite
/// failure.
pub fn parse_cursor<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, SourceError> {
    serde_json::from_str(text).map_err(|e| {
        SourceError::caused(
            crate::error::Failure::Invalid,
            format!("the stored cursor {text:?} is not this source's"),
            e,
        )
    })
}

/// What the engine needs to make a stream's source: its config, the
/// stream's name (a replication slot is named after it) and the cursor
/// the store holds.
pub struct SourceSpec<'a> {
    pub stream: &'a str,
    pub config: &'a SourceConfig,
    pub cursor: Option<&'a str>,
}

/// Makes the source a config describes; the binary passes
/// [`crate::open`], tests may pass their own.
pub type SourceFactory =
    dyn Fn(&SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> + Send + Sync;

/// A source whose reads block (files): each read runs on a blocking
/// thread.
pub trait ReadChunk: Send + 'static {
    /// Reads up to `limits` of records after the cursor; `at_end` says the
    /// source has nothing more for now.
    fn read_chunk(&mut self, limits: Limits) -> Result<Chunk, SourceError>;
}

/// A [`ReadChunk`] source as a [`Source`].
pub struct Blocking<S> {
    inner: Option<S>,
    what: String,
    pace: Pace,
}

impl<S: ReadChunk> Blocking<S> {
    pub fn new(source: S, what: String, pace: Pace) -> Blocking<S> {
        Blocking {
            inner: Some(source),
            what,
            pace,
        }
    }
}

#[async_trait]
impl<S: ReadChunk> Source for Blocking<S> {
    fn describe(&self) -> String {
        self.what.clone()
    }

    fn pace(&self) -> Pace {
        self.pace
    }

    async fn read(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let Some(mut src) = self.inner.take() else {
            // a read whose thread panicked took the source with it
            return Err(SourceError::new(
                crate::error::Failure::Io,
                "the previous read did not return",
            )
            .at(&self.what));
        };
        let joined = tokio::task::spawn_blocking(move || {
            let r = src.read_chunk(limits);
            (src, r)
        })
        .await;
        match joined {
            Ok((src, read)) => {
                self.inner = Some(src);
                read
            }
            Err(e) => {
                Err(
                    SourceError::caused(crate::error::Failure::Io, "the reading thread failed", e)
                        .at(&self.what),
                )
            }
        }
    }

    async fn check(&mut self) -> Result<String, SourceError> {
        Ok(format!("reads {}", self.what))
    }
}
