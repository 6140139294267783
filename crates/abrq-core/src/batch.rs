//! Batches as staged in the spool, and their idempotency keys.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::record::Item;

/// The first 32 hex digits of SHA-256(stream_uuid || seq as 8 big-endian
/// bytes). The uuid is made when a stream is first registered, so a fresh
/// state store never reuses an old stream's keys (and object names).
pub fn idempotency_key(stream_uuid: Uuid, seq: u64) -> String {
    let mut h = Sha256::new();
    h.update(stream_uuid.as_bytes());
    h.update(seq.to_be_bytes());
    let digest = h.finalize();
    hex::encode(&digest[..16])
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
}

impl Batch {
    pub fn records(&self) -> impl Iterator<Item = &crate::Record> {
        self.items.iter().filter_map(Item::as_record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_32_hex_and_depends_on_uuid_and_seq() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let k = idempotency_key(a, 1);
        assert_eq!(k.len(), 32);
        assert!(k.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(k, idempotency_key(a, 2));
        assert_ne!(k, idempotency_key(b, 1));
        assert_eq!(k, idempotency_key(a, 1));
    }

    #[test]
    fn key_matches_the_documented_formula() {
        // sha256 of 16 zero bytes followed by 0x0000000000000001
        let mut input = vec![0u8; 16];
        input.extend_from_slice(&1u64.to_be_bytes());
        let expected = hex::encode(&Sha256::digest(&input)[..16]);
        assert_eq!(idempotency_key(Uuid::nil(), 1), expected);
    }
}
