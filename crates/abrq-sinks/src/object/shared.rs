//! One encoding of a batch for every object destination of this process
//! that writes it alike.
//!
//! Encoding is a pure function of the batch and the format (the gzip
//! header carries no time), and a staged batch's idempotency key names
//! its content for good: a state restored to an earlier point stages
//! under new keys, so a key never names two contents. Destinations of
//! one stream that write one format (a local copy and an S3 archive, or
//! several buckets) therefore take one shared encoding: its line check,
//! rendering and gzip run once, not once per destination. Only writers
//! that encoded within the last [`ACTIVE`] count: a paused destination,
//! or one whose drain another process holds, keeps nothing waiting for
//! it, and while a (stream, format) has one active writer nothing is
//! kept at all.
//!
//! A destination that comes late, after the encoding was dropped (every
//! active writer took it, or the cache was full), encodes again: the
//! same bytes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

use abrq_core::{Batch, DeliveryError};
use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::encode::encode;
use super::{Encoded, ObjectFormat};

/// The most encoded bytes kept for writers still to come.
const KEPT_BYTES: u64 = 32 * 1024 * 1024;

/// A writer that encoded within this long is waited for.
const ACTIVE: Duration = Duration::from_secs(10);

/// A kept encoding and how many writers have taken it.
#[derive(Clone)]
struct Kept {
    encoding: Encoded,
    taken: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Weight;

impl Weighter<(String, ObjectFormat), Kept> for Weight {
    fn weight(&self, key: &(String, ObjectFormat), kept: &Kept) -> u64 {
        (kept.encoding.data.len() + key.0.len()).max(1) as u64
    }
}

type Writers = HashMap<(String, ObjectFormat), Vec<Weak<Place>>>;

struct Shared {
    /// By (idempotency key, format).
    kept: Cache<(String, ObjectFormat), Kept, Weight>,
    /// The destinations of each (stream, format) in this process.
    writers: Mutex<Writers>,
    /// What a writer's last encoding time counts from.
    epoch: Instant,
}

static SHARED: LazyLock<Shared> = LazyLock::new(|| Shared {
    kept: Cache::with_weighter(256, KEPT_BYTES, Weight),
    writers: Mutex::new(HashMap::new()),
    epoch: Instant::now(),
});

/// Milliseconds since [`Shared::epoch`], never 0 (0: never encoded).
fn now_ms() -> u64 {
    SHARED.epoch.elapsed().as_millis() as u64 + 1
}

fn writers() -> std::sync::MutexGuard<'static, Writers> {
    SHARED.writers.lock().unwrap_or_else(|p| p.into_inner())
}

/// One destination's place among the writers of its (stream, format);
/// dropping the last clone leaves it.
#[derive(Debug, Clone)]
pub struct Writer(Arc<Place>);

#[derive(Debug)]
struct Place {
    /// Its (stream, format): the key of its writers alike.
    alike: (String, ObjectFormat),
    /// When it last encoded ([`now_ms`]; 0: never).
    last: AtomicU64,
}

impl Writer {
    pub fn join(stream: &str, format: ObjectFormat) -> Writer {
        let alike = (stream.to_owned(), format);
        let place = Arc::new(Place {
            alike: alike.clone(),
            last: AtomicU64::new(0),
        });
        writers()
            .entry(alike)
            .or_default()
            .push(Arc::downgrade(&place));
        Writer(place)
    }

    /// Marks this writer active and counts the active writers alike, it
    /// among them.
    fn alike(&self) -> usize {
        self.alike_at(now_ms())
    }

    fn alike_at(&self, now: u64) -> usize {
        self.0.last.store(now, Ordering::Relaxed);
        let since = now.saturating_sub(ACTIVE.as_millis() as u64);
        let all = writers();
        let places = all.get(&self.0.alike).map_or(&[][..], Vec::as_slice);
        places
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|p| p.last.load(Ordering::Relaxed) > since)
            .count()
    }

    /// `batch` in this writer's format: encoded here, or taken from a
    /// writer alike that encoded it already. A failure is not kept: each
    /// writer meets it (an `encoding` dead letter of its own).
    pub fn encode(&self, batch: &Batch) -> Result<Encoded, DeliveryError> {
        let format = self.0.alike.1;
        let alike = self.alike();
        if alike < 2 {
            return encode(format, batch);
        }
        let key = (batch.meta.idempotency_key.clone(), format);
        let kept = SHARED.kept.get_or_insert_with(&key, || {
            encode(format, batch).map(|encoding| Kept {
                encoding,
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
        if let Some(places) = w.get_mut(&self.alike) {
            // this one no longer upgrades
            places.retain(|p| p.strong_count() > 0);
            if places.is_empty() {
                w.remove(&self.alike);
            }
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

    /// Two writers alike, each having encoded lately (a batch before).
    fn two_active(stream: &str, format: ObjectFormat) -> (Writer, Writer) {
        let (one, two) = (Writer::join(stream, format), Writer::join(stream, format));
        let warm = batch(stream, &unique("key"), "I{\"id\":0}\n");
        one.encode(&warm).unwrap();
        two.encode(&warm).unwrap();
        (one, two)
    }

    #[test]
    fn writers_alike_take_one_encoding_and_the_last_frees_it() {
        let stream = unique("alike");
        let b = batch(&stream, &unique("key"), "I{\"id\":1}\n");
        let (one, two) = two_active(&stream, ObjectFormat::JsonlGz);
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
        assert!(!writers().contains_key(&(stream.clone(), ObjectFormat::JsonlGz)));
        assert_eq!(Writer::join(&stream, ObjectFormat::JsonlGz).alike(), 1);
    }

    #[test]
    fn a_writer_that_has_not_encoded_lately_is_not_waited_for() {
        let stream = unique("idle");
        let (busy, idle) = (
            Writer::join(&stream, ObjectFormat::JsonlGz),
            Writer::join(&stream, ObjectFormat::JsonlGz),
        );
        let b = batch(&stream, &unique("key"), "I{\"id\":1}\n");
        busy.encode(&b).unwrap();
        let key = (b.meta.idempotency_key.clone(), ObjectFormat::JsonlGz);
        assert!(SHARED.kept.get(&key).is_none(), "nothing kept for idle");
        // idle encodes once, and from then on counts
        idle.encode(&b).unwrap();
        assert_eq!(busy.alike(), 2);
        // a window later, idle no longer counts
        let later = now_ms() + ACTIVE.as_millis() as u64 + 1;
        assert_eq!(busy.alike_at(later), 1);
    }

    #[test]
    fn an_undecodable_batch_fails_every_writer_alike() {
        let stream = unique("bad");
        let b = batch(&stream, &unique("key"), "I{\"id\":\n");
        let (one, two) = two_active(&stream, ObjectFormat::Jsonl);
        for w in [&one, &two] {
            let e = w.encode(&b).unwrap_err();
            assert!(e.to_string().contains("cannot be decoded"), "{e}");
        }
    }
}
