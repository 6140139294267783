//! A Kafka-protocol broker: tansu, from `scripts/services.sh`.

use crate::env::var;

/// Where the broker is.
#[derive(Clone, Debug)]
pub struct Kafka {
    /// `ABRQ_TEST_KAFKA_BROKERS`: bootstrap servers, `host:port[,host:port]`.
    pub brokers: String,
}

impl Kafka {
    pub fn from_env() -> Self {
        Self {
            brokers: var("ABRQ_TEST_KAFKA_BROKERS", "127.0.0.1:9092"),
        }
    }
}

/// The partition the Java client's default partitioner picks for `key`.
pub fn java_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) as u32 & 0x7fff_ffff) % partitions as u32) as i32
}

/// Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c), as i32
/// so it compares with the Java test vectors directly.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    (h ^ (h >> 15)) as i32
}
