//! Batches as staged in the spool, and their idempotency keys.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::record::Item;

/// The first 32 hex digits of SHA-256(stream_uuid ‖ seq as 8 big-endian
/// bytes ‖ nonce), computed once when the batch is staged and stored with
/// it, so every delivery of the batch carries the same key. The uuid is
/// made when a stream is first registered, so a fresh state store never
/// reuses an old stream's keys. The nonce, drawn at staging
/// ([`staging_nonce`]), makes a key that cannot repeat even when the
/// state does: restored to an earlier point (a lagging standby after a
/// failover, a backup), it hands out the same seqs again, and without the
/// nonce their batches would take the keys of batches already delivered,
/// which a ledger skips as applied and an object store overwrites.
pub fn idempotency_key(stream_uuid: Uuid, seq: u64, nonce: Uuid) -> String {
    let mut h = Sha256::new();
    h.update(stream_uuid.as_bytes());
    h.update(seq.to_be_bytes());
    h.update(nonce.as_bytes());
    let digest = h.finalize();
    hex::encode(&digest[..16])
}

/// A batch's nonce: 16 random bytes.
pub fn staging_nonce() -> Uuid {
    Uuid::new_v4()
}

/// Everything about a batch except its items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchMeta {
    pub stream: String,
    pub seq: u64,
    pub idempotency_key: String,
    pub staged_at: DateTime<Utc>,
    pub records: u64,
    pub bytes: u64,
}

/// An ordered list of records and instructions, as one unit of delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub meta: BatchMeta,
    pub items: Vec<Item>,
    /// The items as the spool holds them, not decoded (`items` is then
    /// empty): read so only for a destination that writes the spool's
    /// lines itself ([`crate::Destination::reads_lines`]).
    pub lines: Option<Arc<Vec<u8>>>,
}

impl Batch {
    pub fn new(meta: BatchMeta, items: Vec<Item>) -> Batch {
        Batch {
            meta,
            items,
            lines: None,
        }
    }

    /// A spooled batch as its lines, not decoded.
    pub fn lines(meta: BatchMeta, lines: Vec<u8>) -> Batch {
        Batch {
            meta,
            items: Vec::new(),
            lines: Some(Arc::new(lines)),
        }
    }

    pub fn records(&self) -> impl Iterator<Item = &crate::Record> {
        self.items.iter().filter_map(Item::as_record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_32_hex_and_depends_on_uuid_seq_and_nonce() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let n = Uuid::nil();
        let k = idempotency_key(a, 1, n);
        assert_eq!(k.len(), 32);
        assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(k, idempotency_key(a, 2, n));
        assert_ne!(k, idempotency_key(b, 1, n));
        assert_ne!(k, idempotency_key(a, 1, Uuid::from_u128(3)));
        assert_eq!(k, idempotency_key(a, 1, n));
        assert_ne!(staging_nonce(), staging_nonce());
    }

    #[test]
    fn key_matches_the_documented_formula() {
        // sha256 of 16 zero bytes, 0x0000000000000001, then the nonce
        let nonce = Uuid::from_u128(0x0102);
        let mut input = vec![0u8; 16];
        input.extend_from_slice(&1u64.to_be_bytes());
        input.extend_from_slice(nonce.as_bytes());
        let expected = hex::encode(&Sha256::digest(&input)[..16]);
        assert_eq!(idempotency_key(Uuid::nil(), 1, nonce), expected);
    }
}
