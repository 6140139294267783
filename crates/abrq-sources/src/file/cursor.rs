//! The file cursor: a byte offset plus a fingerprint of the file's first
//! bytes, so a restart resumes where staging stopped and a replaced or
//! truncated file is noticed instead of being read from a stale offset.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How many leading bytes identify a file.
const FINGERPRINT_BYTES: u64 = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCursor {
    /// Bytes consumed: everything before this offset is staged.
    pub offset: u64,
    /// Lines (CSV: records) consumed before `offset`, for error messages.
    pub lines: u64,
    /// Hex SHA-256 of the first `fp_len` bytes.
    pub fp: String,
    pub fp_len: u64,
}

impl FileCursor {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("cursor serializes")
    }

    pub fn decode(s: &str) -> Result<FileCursor, serde_json::Error> {
        serde_json::from_str(s)
    }
}

/// How many leading bytes fingerprint a file of `len` bytes.
pub fn fingerprint_len(len: u64) -> u64 {
    len.min(FINGERPRINT_BYTES)
}

/// Fingerprint of the file's first bytes as it is now.
pub fn fingerprint(file: &mut File, len: u64) -> std::io::Result<(String, u64)> {
    fingerprint_prefix(file, fingerprint_len(len))
}

/// Fingerprint of exactly the first `n` bytes.
pub fn fingerprint_prefix(file: &mut File, n: u64) -> std::io::Result<(String, u64)> {
    let mut buf = vec![0u8; n as usize];
    file.seek(SeekFrom::Start(0))?;
    file.read_exact(&mut buf)?;
    Ok((hex::encode(Sha256::digest(&buf)), n))
}
