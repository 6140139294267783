//! HTTP ingest into a stream: parse the whole body first (one bad line
//! rejects it all), split into batches, stage them in one transaction.

use abrq_core::config::SourceEngine;
use abrq_state::StageOutcome;
use serde::Serialize;

use crate::engine::Engine;
use crate::stream::{split_batches, StageError};

/// Default body limit when `max_body` is unset.
pub const DEFAULT_MAX_BODY: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum IngestFailure {
    #[error("unknown stream {0:?}")]
    UnknownStream(String),
    #[error("stream {0:?} does not take HTTP ingest (its source is not \"http\")")]
    NotHttp(String),
    #[error("{0}")]
    Malformed(#[from] abrq_sources::IngestError),
    #[error("body is empty: no records")]
    Empty,
    #[error(transparent)]
    Stage(#[from] StageError),
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct IngestAck {
    pub records: u64,
    pub batches: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// The Idempotency-Key was seen before; nothing was staged again
    /// (`records` and `batches` are 0) and the seqs are the first request's.
    pub duplicate: bool,
}

impl Engine {
    pub async fn ingest(
        &self,
        stream: &str,
        body: &[u8],
        idempotency_key: Option<&str>,
    ) -> Result<IngestAck, IngestFailure> {
        let s = self
            .stream(stream)
            .ok_or_else(|| IngestFailure::UnknownStream(stream.to_string()))?;
        if s.source_engine != SourceEngine::Http {
            return Err(IngestFailure::NotHttp(stream.to_string()));
        }
        let items = abrq_sources::parse_body(body)?;
        if items.is_empty() {
            return Err(IngestFailure::Empty);
        }
        let records = items.len() as u64;
        let batches = split_batches(items, &s.batch);
        let n = batches.len() as u64;
        match s.stage_request(batches, idempotency_key).await? {
            StageOutcome::Staged(seqs) => Ok(IngestAck {
                records,
                batches: n,
                first_seq: seqs.first().copied(),
                last_seq: seqs.last().copied(),
                duplicate: false,
            }),
            StageOutcome::Duplicate {
                first_seq,
                last_seq,
            } => Ok(IngestAck {
                records: 0,
                batches: 0,
                first_seq,
                last_seq,
                duplicate: true,
            }),
        }
    }
}
