//! One encoding of a batch for every object destination of this process
//! that writes it alike.
//!
//! Encoding is a pure function of the batch and the format (the gzip
//! header carries no time), and a staged batch's idempotency key names
//! its content for good: a state restored to an earlier point stages
//! under new keys, so a key never names two contents. Destinations of
//! one stream that write one format (a local copy and an S3 archive, or
//! several buckets) therefore take one shared encoding: its line check,
//! rendering and gzip run once, not once per destination. While a
//! (stream, format) has a single writer nothing is kept.
//!
//! A destination that comes late, after the encoding was dropped (every
//! writer took it, or the cache was full), encodes again: the same bytes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use abrq_core::{Batch, DeliveryError};
use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::encode::encode;
use super::ObjectFormat;

/// The most encoded bytes kept for writers still to come.
const KEPT_BYTES: u64 = 32 * 1024 * 1024;

/// A batch encoded: the object's bytes and what was left out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoding {
    pub data: Bytes,
    pub rows: u64,
    pub ignored_truncates: u64,
    pub ignored_schemas: u64,
}

/// A kept encoding and how many writers have taken it.
#[derive(Clone)]
struct Kept {
    encoding: Encoding,
    taken: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Weight;

impl Weighter<(String, ObjectFormat), Kept> for Weight {
    fn weight(&self, key: &(String, ObjectFormat), kept: &Kept) -> u64 {
        (kept.encoding.data.len() + key.0.len()).max(1) as u64
    }
}

type Writers = HashMap<(String, ObjectFormat), usize>;

struct Shared {
    /// By (idempotency key, format).
    kept: Cache<(String, ObjectFormat), Kept, Weight>,
    /// The destinations of each (stream, format) in this process.
    writers: Mutex<Writers>,
}

static SHARED: LazyLock<Shared> = LazyLock::new(|| Shared {
    kept: Cache::with_weighter(256, KEPT_BYTES, Weight),
    writers: Mutex::new(HashMap::new()),
});

fn writers() -> std::sync::MutexGuard<'static, Writers> {
    SHARED.writers.lock().unwrap_or_else(|p| p.into_inner())
}

/// One destination's place among the writers of its (stream, format);
/// dropping the last clone leaves it.
#[derive(Debug, Clone)]
pub struct Writer(Arc<Place>);

#[derive(Debug)]
struct Place {
    stream: String,
    format: ObjectFormat,
}

impl Writer {
    pub fn join(stream: &str, format: ObjectFormat) -> Writer {
        *writers().entry((stream.to_owned(), format)).or_default() += 1;
        Writer(Arc::new(Place {
            stream: stream.to_owned(),
            format,
        }))
    }

    fn alike(&self) -> usize {
        let p = &self.0;
        let key = (p.stream.clone(), p.format);
        writers().get(&key).copied().unwrap_or(0)
    }

    /// `batch` in this writer's format: encoded here, or taken from a
    /// writer alike that encoded it already. A failure is not kept: each
    /// writer meets it (an `encoding` dead letter of its own).
    pub fn encode(&self, batch: &Batch) -> Result<Encoding, DeliveryError> {
        let format = self.0.format;
        let alike = self.alike();
        if alike < 2 {
            return encode(format, batch).map(Encoding::from);
        }
        let key = (batch.meta.idempotency_key.clone(), format);
        let kept = SHARED.kept.get_or_insert_with(&key, || {
            encode(format, batch).map(|e| Kept {
                encoding: Encoding::from(e),
                taken: Arc::new(AtomicUsize::new(0)),
            })
        })?;
        // the last writer alike to take it frees it at once
        if kept.taken.fetch_add(1, Ordering::Relaxed) + 1 >= alike {
            SHARED.kept.remove(&key);
        }
        Ok(kept.encoding)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut w = writers();
        let key = (std::mem::take(&mut self.stream), self.format);
        if let Some(n) = w.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                w.remove(&key);
            }
        }
    }
}

impl From<super::Encoded> for Encoding {
    fn from(e: super::Encoded) -> Encoding {
        Encoding {
            data: Bytes::from(e.data),
            rows: e.rows,
            ignored_truncates: e.ignored_truncates,
            ignored_schemas: e.ignored_schemas,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::BatchMeta;

    fn batch(stream: &str, key: &str, lines: &str) -> Batch {
        let meta = BatchMeta {
            stream: stream.into(),
            seq: 1,
            idempotency_key: key.into(),
            staged_at: chrono::Utc::now(),
            records: 1,
            bytes: lines.len() as u64,
        };
        Batch::lines(meta, lines.as_bytes().to_vec())
    }

    fn unique(what: &str) -> String {
        format!("{what}-{:016x}", rand::random::<u64>())
    }

    #[test]
    fn writers_alike_take_one_encoding_and_the_last_frees_it() {
        let stream = unique("alike");
        let b = batch(&stream, &unique("key"), "I{\"id\":1}\n");
        let (one, two) = (
            Writer::join(&stream, ObjectFormat::JsonlGz),
            Writer::join(&stream, ObjectFormat::JsonlGz),
        );
        let first = one.encode(&b).unwrap();
        let second = two.encode(&b).unwrap();
        assert_eq!(first, second);
        assert_eq!(first.data.as_ptr(), second.data.as_ptr(), "one encoding");
        let key = (b.meta.idempotency_key.clone(), ObjectFormat::JsonlGz);
        assert!(SHARED.kept.get(&key).is_none(), "freed by the last writer");
        // a late writer encodes again, to the same bytes
        let again = one.encode(&b).unwrap();
        assert_eq!(again, first);
        assert_ne!(again.data.as_ptr(), first.data.as_ptr());
    }

    #[test]
    fn a_lone_writer_and_other_formats_keep_nothing() {
        let stream = unique("lone");
        let b = batch(&stream, &unique("key"), "I{\"id\":1}\n");
        let lone = Writer::join(&stream, ObjectFormat::JsonlGz);
        let csv = Writer::join(&stream, ObjectFormat::Csv);
        let (a, c) = (lone.encode(&b).unwrap(), csv.encode(&b).unwrap());
        assert_ne!(a.data, c.data);
        let key = (b.meta.idempotency_key.clone(), ObjectFormat::JsonlGz);
        assert!(SHARED.kept.get(&key).is_none());
        assert_eq!(lone.alike(), 1);
        let second = lone.clone();
        drop(lone);
        assert_eq!(second.alike(), 1, "a clone is the same place");
        drop(second);
        assert_eq!(Writer::join(&stream, ObjectFormat::JsonlGz).alike(), 1);
    }

    #[test]
    fn an_undecodable_batch_fails_every_writer_alike() {
        let stream = unique("bad");
        let b = batch(&stream, &unique("key"), "I{\"id\":\n");
        let (one, two) = (
            Writer::join(&stream, ObjectFormat::Jsonl),
            Writer::join(&stream, ObjectFormat::Jsonl),
        );
        for w in [&one, &two] {
            let e = w.encode(&b).unwrap_err();
            assert!(e.to_string().contains("cannot be decoded"), "{e}");
        }
    }
}
