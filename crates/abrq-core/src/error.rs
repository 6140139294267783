//! What a destination tells the drain loop when a delivery fails. Errors are
//! grouped by what the caller must do, not by where they came from: each
//! engine maps its own errors onto a [`Disposition`] in one exhaustive place.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a batch became a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonClass {
    /// Transient failures outlasted the retry budget.
    RetriesExhausted,
    /// The destination can never accept this batch as it is.
    Rejected,
    /// The schema drift policy blocked the batch.
    SchemaDrift,
    /// The batch could not be encoded for the destination.
    Encoding,
}

impl ReasonClass {
    pub const ALL: [ReasonClass; 4] = [
        ReasonClass::RetriesExhausted,
        ReasonClass::Rejected,
        ReasonClass::SchemaDrift,
        ReasonClass::Encoding,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReasonClass::RetriesExhausted => "retries_exhausted",
            ReasonClass::Rejected => "rejected",
            ReasonClass::SchemaDrift => "schema_drift",
            ReasonClass::Encoding => "encoding",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ReasonClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the drain loop does with a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Not the batch's fault: back off and try the same batch again.
    Retry,
    /// Retrying cannot help: dead-letter the batch now with this reason.
    DeadLetter(ReasonClass),
}

/// A failed delivery attempt, with its cause kept as a source chain.
#[derive(Debug)]
pub struct DeliveryError {
    pub disposition: Disposition,
    /// Index of the offending record in the batch, when one is to blame.
    pub record_index: Option<usize>,
    /// A server's own hint; it overrides the computed backoff.
    pub retry_after: Option<Duration>,
    /// What else the destination knows about the failure, shown after the
    /// cause (e.g. the client's last connection error behind a timeout).
    pub note: Option<String>,
    source: Box<dyn StdError + Send + Sync>,
}

impl DeliveryError {
    pub fn new(
        disposition: Disposition,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        DeliveryError {
            disposition,
            record_index: None,
            retry_after: None,
            note: None,
            source: source.into(),
        }
    }

    pub fn transient(source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self::new(Disposition::Retry, source)
    }

    pub fn dead_letter(
        class: ReasonClass,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self::new(Disposition::DeadLetter(class), source)
    }

    pub fn at_record(mut self, index: usize) -> Self {
        self.record_index = Some(index);
        self
    }

    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    pub fn is_transient(&self) -> bool {
        self.disposition == Disposition::Retry
    }

    /// The whole cause chain on one line, for logs, status and dead letters.
    /// A cause whose text is already in the line is said once: many
    /// clients repeat their source's message in their own.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        if let Some(i) = self.record_index {
            out.push_str(&format!("record {i}: "));
        }
        let mut cur: Option<&(dyn StdError + 'static)> = Some(self.source.as_ref());
        let mut first = true;
        while let Some(e) = cur {
            let text = e.to_string();
            if first {
                out.push_str(&text);
            } else if !out.contains(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            first = false;
            cur = e.source();
        }
        if let Some(note) = &self.note {
            out.push_str(&format!(" ({note})"));
        }
        out
    }
}

impl fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(i) = self.record_index {
            write!(f, "record {i}: ")?;
        }
        write!(f, "{}", self.source)?;
        if let Some(note) = &self.note {
            write!(f, " ({note})")?;
        }
        Ok(())
    }
}

impl StdError for DeliveryError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.source.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_classes_round_trip() {
        for c in ReasonClass::ALL {
            assert_eq!(ReasonClass::parse(c.as_str()), Some(c));
        }
    }

    #[test]
    fn describe_names_record_and_chain() {
        let io = std::io::Error::other("disk full");
        let e = DeliveryError::dead_letter(ReasonClass::Rejected, io).at_record(37);
        assert_eq!(e.describe(), "record 37: disk full");
        assert!(!e.is_transient());
        let e = DeliveryError::transient(std::io::Error::other("timed out")).with_note("why");
        assert_eq!(e.describe(), "timed out (why)");
        assert_eq!(e.to_string(), "timed out (why)");
    }

    #[test]
    fn describe_says_a_repeated_cause_once() {
        #[derive(Debug)]
        struct Wraps(std::io::Error);
        impl fmt::Display for Wraps {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "error returned from database: {}", self.0)
            }
        }
        impl StdError for Wraps {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let db = Wraps(std::io::Error::other("database \"x\" does not exist"));
        let e = DeliveryError::transient(db);
        assert_eq!(
            e.describe(),
            "error returned from database: database \"x\" does not exist"
        );
    }
}
