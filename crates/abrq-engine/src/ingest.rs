//! HTTP ingest into a stream: parse the whole body first (one bad line
//! rejects it all), encoding each record into its batch's payload as it is
//! parsed, then stage every batch in one transaction.
//!
//! Peak memory per request is the body plus its payloads (about the size of
//! the body again): the parsed values of one record at a time, never of the
//! whole body.

use abrq_state::{RequestKey, StageOutcome};
use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::batcher::Batcher;
use crate::engine::Engine;
use crate::stream::StageError;

/// Default body limit when `max_body` is unset.
pub const DEFAULT_MAX_BODY: u64 = 16 << 20;

/// The longest Idempotency-Key taken, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

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
    #[error("Idempotency-Key: {0}")]
    BadKey(String),
    #[error(
        "Idempotency-Key {0:?} was used before with a different body; \
         nothing was staged (use a new key for a new request)"
    )]
    KeyConflict(String),
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error("ingest worker failed: {0}")]
    Worker(String),
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

/// Checks an Idempotency-Key: 1 to [`MAX_KEY_LEN`] visible ASCII bytes.
pub fn check_key(key: &[u8]) -> Result<&str, IngestFailure> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(IngestFailure::BadKey(format!(
            "must be 1 to {MAX_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    if let Some(at) = key.iter().position(|b| !b.is_ascii_graphic()) {
        return Err(IngestFailure::BadKey(format!(
            "byte {at} is not visible ASCII (0x{:02x})",
            key[at]
        )));
    }
    std::str::from_utf8(key).map_err(|e| IngestFailure::BadKey(e.to_string()))
}

impl Engine {
    pub async fn ingest(
        &self,
        stream: &str,
        body: Bytes,
        idempotency_key: Option<&[u8]>,
    ) -> Result<IngestAck, IngestFailure> {
        let s = self
            .stream(stream)
            .ok_or_else(|| IngestFailure::UnknownStream(stream.to_string()))?;
        if s.source_engine().pulled() {
            return Err(IngestFailure::NotHttp(stream.to_string()));
        }
        let key = idempotency_key.map(check_key).transpose()?;
        let limits = s.batch_config().clone();
        // Parsing a large body takes CPU for a while: off the async workers.
        let parsed = tokio::task::spawn_blocking(move || {
            let digest = hex::encode(Sha256::digest(&body));
            let mut batcher = Batcher::new(&limits);
            abrq_sources::for_each_record(&body, |r, size| {
                batcher
                    .push(&r, size)
                    .map_err(|e| format!("cannot encode the record: {e}"))
            })?;
            Ok::<_, IngestFailure>((digest, batcher.records(), batcher.finish()))
        })
        .await
        .map_err(|e| IngestFailure::Worker(e.to_string()))?;
        let (digest, records, batches) = parsed?;
        if batches.is_empty() {
            return Err(IngestFailure::Empty);
        }
        let n = batches.len() as u64;
        let request_key = key.map(|key| RequestKey {
            key,
            digest: &digest,
        });
        // No lease guards ingest: any process stages what it is sent.
        match s
            .stage_request(&self.unfenced, batches, request_key)
            .await?
        {
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
            StageOutcome::Conflict => Err(IngestFailure::KeyConflict(
                key.unwrap_or_default().to_string(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_visible_ascii_and_bounded() {
        assert_eq!(check_key(b"abc-123_~").unwrap(), "abc-123_~");
        assert!(check_key(&[b'k'; MAX_KEY_LEN]).is_ok());
        for bad in [
            &b""[..],
            &[b'k'; MAX_KEY_LEN + 1][..],
            b"a b",
            b"caf\xc3\xa9",
            b"\xff",
            b"tab\there",
        ] {
            assert!(
                matches!(check_key(bad), Err(IngestFailure::BadKey(_))),
                "{bad:?}"
            );
        }
    }
}
