//! Delivery reports without a future per message. Each message carries its
//! attempt and item packed in one number (no allocation), and the
//! producer's polling thread counts its report into the attempt's
//! [`Tally`]; the attempt waits once for the count to reach zero.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use tokio::sync::Notify;

use super::context::ClientErrors;

/// Bits of a message's number that say its item in the batch; the
/// attempt's id takes the rest.
const ITEM_BITS: u32 = 32;

/// The producer's context: the client's errors (see `context.rs`) and the
/// attempts in flight.
#[derive(Clone, Default)]
pub(super) struct Context {
    pub(super) errors: ClientErrors,
    attempts: Attempts,
}

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.error(error, reason)
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        self.errors.log(level, fac, line)
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, number: usize) {
        let attempt = (number >> ITEM_BITS) as u32;
        let Some(tally) = self.attempts.get(attempt) else {
            return; // its attempt was cut off: nobody waits for it
        };
        let failure = result.as_ref().err().map(|(e, m)| Failed {
            index: number & ((1 << ITEM_BITS) - 1),
            topic: m.topic().to_string(),
            error: e.clone(),
        });
        tally.reported(failure);
    }
}

impl Context {
    /// A new attempt's tally, counted into by the polling thread until the
    /// returned guard is dropped.
    pub(super) fn begin(&self) -> Registered {
        self.attempts.begin()
    }
}

/// The first failed report of an attempt.
pub(super) struct Failed {
    pub index: usize,
    pub topic: String,
    pub error: KafkaError,
}

#[derive(Clone, Default)]
struct Attempts {
    open: Arc<Mutex<HashMap<u32, Arc<Tally>>>>,
    next: Arc<AtomicU32>,
}

impl Attempts {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<Tally>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: u32) -> Option<Arc<Tally>> {
        self.map().get(&id).cloned()
    }

    fn begin(&self) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let tally = Arc::new(Tally::default());
        self.map().insert(id, tally.clone());
        Registered {
            id,
            tally,
            attempts: self.clone(),
        }
    }
}

/// An attempt's tally while it is registered; unregistered when dropped,
/// on every way out of the attempt.
pub(super) struct Registered {
    id: u32,
    pub(super) tally: Arc<Tally>,
    attempts: Attempts,
}

impl Registered {
    /// The number the message of batch item `index` carries.
    pub(super) fn number(&self, index: usize) -> usize {
        debug_assert!(index < (1 << ITEM_BITS));
        ((self.id as usize) << ITEM_BITS) | index
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.attempts.map().remove(&self.id);
    }
}

/// How many of an attempt's messages await their report, and its first
/// failure. Counted without a lock: it is touched twice per message.
#[derive(Default)]
pub(super) struct Tally {
    outstanding: AtomicUsize,
    first: OnceLock<Failed>,
    settled: Notify,
}

impl Tally {
    /// A message is about to be handed to the producer (counted first: its
    /// report may come before `send` returns).
    pub(super) fn sending(&self) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
    }

    /// The producer did not take it after all.
    pub(super) fn not_sent(&self) {
        self.reported(None);
    }

    fn reported(&self, failure: Option<Failed>) {
        if let Some(f) = failure {
            // the first failure is kept; later ones say no more
            let _ = self.first.set(f);
        }
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.settled.notify_waiters();
        }
    }

    /// Whether a report has failed: the sender stops sending.
    pub(super) fn has_failed(&self) -> bool {
        self.first.get().is_some()
    }

    /// Waits until every message sent has its report; the first failure.
    pub(super) async fn settled(&self) -> Option<&Failed> {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.outstanding.load(Ordering::Acquire) == 0 {
                return self.first.get();
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_say_their_attempt_and_item() {
        let context = Context::default();
        let a = context.begin();
        let b = context.begin();
        let n = b.number(999_999);
        assert_eq!(n >> ITEM_BITS, b.id as usize);
        assert_eq!(n & ((1 << ITEM_BITS) - 1), 999_999);
        assert_ne!(a.id, b.id);
        drop(a);
        assert!(context.attempts.get(b.id).is_some());
        assert!(
            context.attempts.map().len() == 1,
            "a dropped attempt is forgotten"
        );
    }

    #[tokio::test]
    async fn an_attempt_settles_when_every_report_is_in() {
        let context = Context::default();
        let r = context.begin();
        r.tally.sending();
        r.tally.sending();
        r.tally.sending();
        r.tally.not_sent();
        let tally = r.tally.clone();
        let waiter = tokio::spawn(async move { tally.settled().await.map(|f| f.index) });
        r.tally.reported(None);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        r.tally.reported(Some(Failed {
            index: 4,
            topic: "t".into(),
            error: KafkaError::Canceled,
        }));
        assert!(r.tally.has_failed());
        assert_eq!(waiter.await.unwrap(), Some(4));
    }
}
