//! The `.manifest.json` sidecar: enough for a consumer to verify an object
//! without trusting the store (FTP has no server-side integrity check) and
//! to deduplicate on the idempotency key.

use crate::object::ObjectFormat;
use abrq_core::BatchMeta;
use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The object's key, relative to the destination's root.
    pub path: String,
    pub rows: u64,
    /// Size of the object as stored (compressed, for `.gz`).
    pub bytes: u64,
    /// Lower-case hex SHA-256 of the object as stored.
    pub sha256: String,
    pub idempotency_key: String,
    pub stream: String,
    pub seq: u64,
    /// RFC 3339, UTC.
    pub staged_at: String,
    pub format: String,
}

impl Manifest {
    pub fn new(
        path: &str,
        object: &[u8],
        rows: u64,
        meta: &BatchMeta,
        format: ObjectFormat,
    ) -> Self {
        Manifest {
            path: path.to_string(),
            rows,
            bytes: object.len() as u64,
            sha256: hex::encode(Sha256::digest(object)),
            idempotency_key: meta.idempotency_key.clone(),
            stream: meta.stream.clone(),
            seq: meta.seq,
            staged_at: meta.staged_at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            format: format.ext().to_string(),
        }
    }

    /// Pretty JSON with a trailing newline: read by people as often as by
    /// programs, and tiny either way.
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("a manifest always serializes");
        v.push(b'\n');
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn fields_describe_the_object() {
        let meta = BatchMeta {
            stream: "orders".into(),
            seq: 42,
            idempotency_key: "00112233445566778899aabbccddeeff".into(),
            staged_at: Utc.with_ymd_and_hms(2026, 7, 30, 8, 5, 0).unwrap(),
            records: 2,
            bytes: 3,
        };
        let m = Manifest::new(
            "a/part-0011223344556677.csv",
            b"abc",
            2,
            &meta,
            ObjectFormat::Csv,
        );
        let back: Manifest = serde_json::from_slice(&m.to_json()).unwrap();
        assert_eq!(back, m);
        assert_eq!(m.bytes, 3);
        assert_eq!(
            m.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(m.staged_at, "2026-07-30T08:05:00Z");
        assert_eq!(m.format, "csv");
        assert_eq!((m.seq, m.rows, m.stream.as_str()), (42, 2, "orders"));
    }
}
