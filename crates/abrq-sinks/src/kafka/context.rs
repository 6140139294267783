//! The producer's client context. librdkafka reports trouble below the
//! request level (authentication refused, a TLS handshake failed, every
//! broker down) only through this callback, while the request itself just
//! times out; the last such error is kept so a failed attempt or `check`
//! can say why.

use std::sync::{Arc, Mutex};
use std::time::Instant;

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

impl ClientContext for ClientErrors {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "abrq::kafka", "librdkafka: {error}: {reason}");
        let mut slot = self.slot();
        // "n/n brokers are down" follows the failure that took them down
        // (authentication, TLS); keep the one that says why.
        let code = error.rdkafka_error_code();
        let summary = code == Some(RDKafkaErrorCode::AllBrokersDown);
        if !(summary && slot.is_some()) {
            *slot = Some(Recorded {
                code,
                message: format!("client error: {reason}"),
                at: Instant::now(),
            });
        }
    }
}
