//! Client libraries repeat themselves: librdkafka says "1/1 brokers are
//! down" twice every 50 ms while a broker is away, object_store logs each
//! retry. This layer shows each such message once per window and counts
//! the repeats it held back, said when the message shows again. abrq's
//! own events always pass: they are already one per fact.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Messages remembered at most; older ones are forgotten first.
const MAX_KEYS: usize = 1024;

thread_local! {
    /// Set while this layer reports what it held back, so the report
    /// itself is never held back.
    static REPORTING: Cell<bool> = const { Cell::new(false) };
}

pub struct Dedupe {
    window: Duration,
    seen: Mutex<HashMap<Key, Seen>>,
}

#[derive(Hash, PartialEq, Eq)]
struct Key {
    target: String,
    level: Level,
    /// The message with every run of digits as `#`: "0/1 brokers are
    /// down" and "1/1 brokers are down" are one message.
    shape: String,
}

struct Seen {
    shown: Instant,
    held: u64,
}

impl Dedupe {
    pub fn new(window: Duration) -> Dedupe {
        Dedupe {
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether to show this message now; the count held back since it
    /// last showed, if it shows again after a window with repeats.
    fn admit(&self, key: Key, now: Instant) -> (bool, u64) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_KEYS && !seen.contains_key(&key) {
            let window = self.window;
            seen.retain(|_, s| now.duration_since(s.shown) < window);
            if seen.len() >= MAX_KEYS {
                seen.clear();
            }
        }
        match seen.get_mut(&key) {
            None => {
                seen.insert(
                    key,
                    Seen {
                        shown: now,
                        held: 0,
                    },
                );
                (true, 0)
            }
            Some(s) if now.duration_since(s.shown) < self.window => {
                s.held += 1;
                (false, 0)
            }
            Some(s) => {
                s.shown = now;
                (true, std::mem::take(&mut s.held))
            }
        }
    }
}

/// A client library's target: anything not abrq's own, and librdkafka's
/// errors, which abrq forwards under `abrq::kafka`.
fn from_a_client(target: &str) -> bool {
    !target.starts_with("abrq") || target == "abrq::kafka"
}

fn shape(message: &str) -> String {
    // librdkafka's own count of what it held back changes nothing either
    let mut out = String::with_capacity(message.len());
    let mut digits = false;
    for c in message.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push('#');
            }
            digits = true;
        } else {
            out.push(c);
            digits = false;
        }
    }
    // librdkafka's own count of what it held back changes nothing either
    out.replace(", # identical error(s) suppressed", "")
}

#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for Dedupe {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if !from_a_client(meta.target()) || REPORTING.with(Cell::get) {
            return true;
        }
        let mut message = Message::default();
        event.record(&mut message);
        let key = Key {
            target: meta.target().to_string(),
            level: *meta.level(),
            shape: shape(&message.0),
        };
        let (show, held) = self.admit(key, Instant::now());
        if held > 0 {
            REPORTING.with(|r| r.set(true));
            tracing::info!(
                target: "abrq::logs",
                held,
                "the next {} message repeated {held} more times in the last {}s (repeats are shown once per window)",
                meta.target(),
                self.window.as_secs()
            );
            REPORTING.with(|r| r.set(false));
        }
        show
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(message: &str) -> Key {
        Key {
            target: "librdkafka".into(),
            level: Level::WARN,
            shape: shape(message),
        }
    }

    #[test]
    fn repeats_show_once_per_window_and_are_counted() {
        let d = Dedupe::new(Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(d.admit(key("0/1 brokers are down"), t0), (true, 0));
        for i in 1..=5 {
            let at = t0 + Duration::from_millis(50 * i);
            assert_eq!(d.admit(key("1/1 brokers are down"), at), (false, 0));
        }
        assert_eq!(
            d.admit(key("connect refused"), t0 + Duration::from_secs(1)),
            (true, 0),
            "another message shows"
        );
        let later = t0 + Duration::from_secs(31);
        assert_eq!(d.admit(key("1/1 brokers are down"), later), (true, 5));
        assert_eq!(d.admit(key("1/1 brokers are down"), later), (false, 0));
    }

    #[test]
    fn only_client_libraries_are_deduplicated() {
        assert!(from_a_client("librdkafka"));
        assert!(from_a_client("object_store::client::retry"));
        assert!(from_a_client("abrq::kafka"));
        assert!(!from_a_client("abrq_engine::events"));
        assert!(!from_a_client("abrq"));
    }

    #[test]
    fn digits_do_not_make_a_new_message() {
        assert_eq!(
            shape("after 0ms, 12 errors"),
            shape("after 250ms, 3 errors")
        );
        assert_ne!(shape("refused"), shape("timed out"));
        assert_eq!(
            shape("refused (after 0ms in state CONNECT)"),
            shape("refused (after 0ms in state CONNECT, 1 identical error(s) suppressed)")
        );
    }
}
