//! Rows the state store hands out.

use abrq_core::{BreakerState, ReasonClass};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamRow {
    pub name: String,
    pub uuid: Uuid,
    /// Highest seq ever staged (0 before the first batch).
    pub last_seq: u64,
}

/// A batch about to be staged, already encoded for the spool (see
/// [`crate::payload`]); the store assigns seq, key and staged_at. Encoding
/// happens at the source, so a large request is held once, as its payloads,
/// and never as parsed values and payloads at once.
#[derive(Debug, Clone, PartialEq)]
pub struct NewBatch {
    pub payload: Vec<u8>,
    /// Records among the items (instructions are not records).
    pub records: u64,
    /// Source bytes the batch stands for: what `max_bytes` and spool
    /// backpressure count.
    pub bytes: u64,
}

impl NewBatch {
    /// Encodes `items`; `bytes` is their size as read at the source.
    pub fn from_items(
        items: &[abrq_core::Item],
        bytes: u64,
    ) -> Result<NewBatch, serde_json::Error> {
        Ok(NewBatch {
            payload: crate::payload::encode(items)?,
            records: items.iter().filter(|i| i.as_record().is_some()).count() as u64,
            bytes,
        })
    }
}

/// An ingest request's Idempotency-Key and a digest of its body: a retry
/// carries both unchanged; the same key with another body is a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestKey<'a> {
    pub key: &'a str,
    pub digest: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageOutcome {
    /// Staged with these seqs, in order.
    Staged(Vec<u64>),
    /// The request key was seen before: nothing was staged again. The seqs
    /// the first request got, so a client retrying can learn them.
    Duplicate {
        first_seq: Option<u64>,
        last_seq: Option<u64>,
    },
    /// The request key was seen before with a different body: nothing was
    /// staged, and the client must not take the first answer for this one.
    Conflict,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpoolStats {
    pub batches: u64,
    pub bytes: u64,
    pub records: u64,
    /// Lowest seq still spooled, if any.
    pub first_seq: Option<u64>,
    /// Highest seq ever staged for the stream (0 before the first batch).
    pub last_seq: u64,
}

/// The spooled batches after one destination's high-water mark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Backlog {
    pub batches: u64,
    pub records: u64,
    pub bytes: u64,
    /// When the oldest of them was staged: how far behind the destination
    /// is, in time.
    pub oldest_staged_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DestinationRow {
    pub stream: String,
    pub name: String,
    pub kind: String,
    pub enabled: bool,
    pub paused: bool,
    /// Highest seq this destination has passed (delivered or dead-lettered).
    pub high_water_mark: u64,
    pub breaker: BreakerState,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterState {
    Pending,
    Replayed,
    Discarded,
}

impl DeadLetterState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterState::Pending => "pending",
            DeadLetterState::Replayed => "replayed",
            DeadLetterState::Discarded => "discarded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Replayed, Self::Discarded]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetterRow {
    pub id: i64,
    pub stream: String,
    pub destination: String,
    pub seq: u64,
    pub idempotency_key: String,
    pub staged_at: DateTime<Utc>,
    pub records: u64,
    pub bytes: u64,
    pub reason_class: ReasonClass,
    pub error: String,
    pub attempts: u32,
    pub state: DeadLetterState,
    /// An operator asked for a replay that has not finished yet.
    pub replay_requested: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub stream: String,
    pub destination: Option<String>,
    /// Action-specific facts (records, bytes, reason, seq range ...).
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewAudit {
    pub actor: String,
    pub action: String,
    pub stream: String,
    pub destination: Option<String>,
    pub detail: serde_json::Value,
}

/// Batches a destination never received because the spool GC passed them
/// while it was disabled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedRange {
    pub from_seq: u64,
    pub to_seq: u64,
    pub at: DateTime<Utc>,
}

impl SkippedRange {
    pub fn batches(&self) -> u64 {
        self.to_seq - self.from_seq + 1
    }
}
