//! The producer's client context. librdkafka reports trouble below the
//! request level (authentication refused, a TLS handshake failed, every
//! broker down) only through this callback, while the request itself just
//! times out; the last such error is kept so a failed attempt or `check`
//! can say why.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::ClientContext;

/// Cheap to clone: clones share the last error.
#[derive(Clone, Default)]
pub struct ClientErrors(Arc<Mutex<Option<Recorded>>>);

struct Recorded {
    code: Option<RDKafkaErrorCode>,
    message: String,
    at: Instant,
}

impl ClientErrors {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Recorded>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last connection-level error since the last [`ClientErrors::clear`].
    pub fn last(&self) -> Option<String> {
        self.slot().as_ref().map(|r| r.message.clone())
    }

    /// The last error, if it came after `since` and says the brokers
    /// refuse this client (its credentials, or the TLS handshake): waiting
    /// longer will not help.
    pub fn refusal_since(&self, since: Instant) -> Option<String> {
        let slot = self.slot();
        let r = slot.as_ref().filter(|r| r.at >= since)?;
        let refused = matches!(
            r.code,
            Some(
                RDKafkaErrorCode::Authentication
                    | RDKafkaErrorCode::SaslAuthenticationFailed
                    | RDKafkaErrorCode::SSL
            )
        );
        refused.then(|| r.message.clone())
    }

    /// Called after a success: old trouble no longer explains anything.
    pub fn clear(&self) {
        *self.slot() = None;
    }
}

impl ClientErrors {
    /// Keeps `message` unless what is kept says more: a refusal beats a
    /// connection failure, which beats "n/n brokers are down" (the summary
    /// that follows either). A kept record older than a minute no longer
    /// describes the present and is replaced regardless.
    fn record(&self, code: Option<RDKafkaErrorCode>, message: String) {
        let rank = |code: Option<RDKafkaErrorCode>| match code {
            Some(
                RDKafkaErrorCode::Authentication
                | RDKafkaErrorCode::SaslAuthenticationFailed
                | RDKafkaErrorCode::SSL,
            ) => 2,
            Some(RDKafkaErrorCode::AllBrokersDown) => 0,
            _ => 1,
        };
        let mut slot = self.slot();
        let keep = slot
            .as_ref()
            .is_some_and(|r| rank(r.code) > rank(code) && r.at.elapsed() < STALE_AFTER);
        if !keep {
            *slot = Some(Recorded {
                code,
                message,
                at: Instant::now(),
            });
        }
    }
}

/// See [`ClientErrors::record`].
const STALE_AFTER: Duration = Duration::from_secs(60);

impl ClientContext for ClientErrors {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "abrq::kafka", "librdkafka: {error}: {reason}");
        self.record(
            error.rdkafka_error_code(),
            format!("client error: {reason}"),
        );
    }

    /// librdkafka's log, into tracing. A broker connection's failure (its
    /// `FAIL` line: a handshake that timed out, a refused connection) comes
    /// only this way, and is kept as the reason behind later timeouts.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, line: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", "{fac} {line}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", "{fac} {line}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "{fac} {line}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{fac} {line}"),
        }
        if fac == "FAIL" {
            // A certificate the client does not trust is a refusal like a
            // bad password; librdkafka reports it only here, as text.
            let untrusted = line.contains("certificate verify failed");
            let code = untrusted.then_some(RDKafkaErrorCode::SSL);
            self.record(code, format!("client error: {line}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_outlives_the_summary_that_follows_it() {
        let errors = ClientErrors::default();
        let before = Instant::now();
        errors.record(Some(RDKafkaErrorCode::AllBrokersDown), "down".into());
        errors.record(None, "handshake timed out".into());
        assert_eq!(errors.last().as_deref(), Some("handshake timed out"));
        assert_eq!(errors.refusal_since(before), None, "not a refusal");
        errors.record(
            Some(RDKafkaErrorCode::Authentication),
            "bad password".into(),
        );
        errors.record(None, "disconnected".into());
        errors.record(Some(RDKafkaErrorCode::AllBrokersDown), "down".into());
        assert_eq!(errors.last().as_deref(), Some("bad password"));
        assert_eq!(
            errors.refusal_since(before).as_deref(),
            Some("bad password")
        );
        assert_eq!(
            errors.refusal_since(Instant::now()),
            None,
            "an older refusal"
        );
        errors.clear();
        assert_eq!(errors.last(), None);
    }
}
