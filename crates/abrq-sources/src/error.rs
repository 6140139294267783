//! Why a source cannot read, typed: the failure table. Every source error
//! carries a [`Failure`] saying what the engine must do about it, where it
//! happened, what was being done, and the client's own error as its cause.
//!
//! | failure | meaning | the engine |
//! | --- | --- | --- |
//! | `Network`, `Timeout`, `Server`, `Io` | the way to the source, for now | restarts the source after a backoff |
//! | `Auth`, `NotConfigured`, `PositionLost`, `NoKey`, `Decode`, `Unsupported`, `Invalid`, `BadRecord` | reading again cannot help until an operator acts | stops the source (`stopped`), says the recovery |
//!
//! A definite failure stops restarting because each restart would fail the
//! same way, and a source restarting forever looks busy rather than
//! broken. It is shown as `stopped` in status, fails `/readyz`, and sets
//! `abrq_stream_loop_failing`; the recovery says what the operator does.

use std::error::Error;
use std::fmt;

/// What went wrong, by what the engine must do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection: refused, reset, closed, name lookup, TLS.
    Network,
    /// No answer within a deadline.
    Timeout,
    /// The server refused a request for now (an error it may not repeat:
    /// too many connections, a lock, a statement that failed).
    Server,
    /// A file could not be read (it may appear, or its permissions change).
    Io,
    /// Credentials or privileges were refused.
    Auth,
    /// A prerequisite is missing: a server setting, a table, a publication.
    NotConfigured,
    /// What the stream's cursor points at is gone (a slot, a binlog).
    PositionLost,
    /// A table has no key to copy it by.
    NoKey,
    /// A message, row or value could not be decoded.
    Decode,
    /// A protocol message or column type abrq does not handle.
    Unsupported,
    /// The source's config or stored cursor cannot be used.
    Invalid,
    /// A record of a file is malformed.
    BadRecord,
}

impl Failure {
    /// Reading again cannot help: the source stops until an operator acts.
    pub fn is_definite(self) -> bool {
        match self {
            Failure::Network | Failure::Timeout | Failure::Server | Failure::Io => false,
            Failure::Auth
            | Failure::NotConfigured
            | Failure::PositionLost
            | Failure::NoKey
            | Failure::Decode
            | Failure::Unsupported
            | Failure::Invalid
            | Failure::BadRecord => true,
        }
    }

    /// The name status and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Network => "network",
            Failure::Timeout => "timeout",
            Failure::Server => "server",
            Failure::Io => "io",
            Failure::Auth => "auth",
            Failure::NotConfigured => "not_configured",
            Failure::PositionLost => "position_lost",
            Failure::NoKey => "no_key",
            Failure::Decode => "decode",
            Failure::Unsupported => "unsupported",
            Failure::Invalid => "invalid",
            Failure::BadRecord => "bad_record",
        }
    }

    /// What an operator does about a definite failure; None for a
    /// transient one, which recovers by itself.
    pub fn recovery(self) -> Option<&'static str> {
        Some(match self {
            Failure::Network | Failure::Timeout | Failure::Server | Failure::Io => return None,
            Failure::Auth => {
                "fix the credentials or grant the privileges the error names, then restart the source (abrq source restart)"
            }
            Failure::NotConfigured => {
                "fix the setting or create what the error names, then restart the source (abrq source restart)"
            }
            Failure::PositionLost => {
                "changes after the stream's cursor cannot be read any more: re-snapshot the tables into a new stream (a new stream name starts afresh)"
            }
            Failure::NoKey => {
                "add a primary key to the table or set snapshot = \"never\", then restart the source (abrq source restart)"
            }
            Failure::Decode | Failure::Unsupported => {
                "the source sent what abrq cannot read (the error names it); nothing after it was skipped. Report it; restart the source (abrq source restart) to try again"
            }
            Failure::Invalid => "fix the config or the stored cursor the error names, then restart abrq",
            Failure::BadRecord => {
                "fix the record the error names in the file, then restart the source (abrq source restart)"
            }
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type Cause = Box<dyn Error + Send + Sync + 'static>;

/// A source's failure: its kind, where (a server and table, or a file),
/// what was being done, and the client's error as the cause.
#[derive(Debug)]
pub struct SourceError {
    failure: Failure,
    at: String,
    message: String,
    cause: Option<Cause>,
}

impl SourceError {
    /// A failure abrq itself found: `message` says what and why.
    pub fn new(failure: Failure, message: impl Into<String>) -> SourceError {
        SourceError {
            failure,
            at: String::new(),
            message: message.into(),
            cause: None,
        }
    }

    /// A client's error while doing `what`, classified by the client.
    pub fn from_client<E: Classify>(what: impl Into<String>, e: E) -> SourceError {
        SourceError {
            failure: e.failure(),
            at: String::new(),
            message: what.into(),
            cause: Some(Box::new(e)),
        }
    }

    /// A cause whose failure the caller knows better than the client.
    pub fn caused(
        failure: Failure,
        what: impl Into<String>,
        e: impl Error + Send + Sync + 'static,
    ) -> SourceError {
        SourceError {
            failure,
            at: String::new(),
            message: what.into(),
            cause: Some(Box::new(e)),
        }
    }

    /// Says where it happened (a server and table, a file), once.
    pub fn at(mut self, at: impl Into<String>) -> SourceError {
        if self.at.is_empty() {
            self.at = at.into();
        }
        self
    }

    /// Puts what was being done in front of the message.
    pub fn context(mut self, what: &str) -> SourceError {
        self.message = format!("{what}: {}", self.message);
        self
    }

    pub fn failure(&self) -> Failure {
        self.failure
    }

    pub fn is_definite(&self) -> bool {
        self.failure.is_definite()
    }
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cause = self.cause.as_ref().map(ToString::to_string);
        let parts = [
            Some(self.at.as_str()),
            Some(self.message.as_str()),
            cause.as_deref(),
        ];
        let mut first = true;
        for part in parts.into_iter().flatten().filter(|p| !p.is_empty()) {
            if !first {
                f.write_str(": ")?;
            }
            f.write_str(part)?;
            first = false;
        }
        Ok(())
    }
}

impl Error for SourceError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause.as_deref().map(|c| c as &(dyn Error + 'static))
    }
}

/// A client error that knows which [`Failure`] it is. Each client's
/// classification is one exhaustive match, beside the source that uses it
/// (`postgres/errors.rs`, `mysql/errors.rs`).
pub trait Classify: Error + Send + Sync + 'static {
    fn failure(&self) -> Failure;
}

impl Classify for std::io::Error {
    fn failure(&self) -> Failure {
        Failure::Io
    }
}

/// `result.context("cannot read a page")`: a client's error as a
/// [`SourceError`] that says what was being done.
pub trait Context<T> {
    fn context(self, what: &str) -> Result<T, SourceError>;
}

impl<T, E: Classify> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T, SourceError> {
        self.map_err(|e| SourceError::from_client(what, e))
    }
}

impl<T> Context<T> for Result<T, SourceError> {
    fn context(self, what: &str) -> Result<T, SourceError> {
        self.map_err(|e| e.context(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_place_action_and_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = SourceError::from_client("cannot open", io).at("orders.ndjson");
        assert_eq!(e.to_string(), "orders.ndjson: cannot open: no such file");
        assert_eq!(e.failure(), Failure::Io);
        assert!(!e.is_definite());
        assert_eq!(e.source().unwrap().to_string(), "no such file");
        let e = SourceError::new(Failure::NoKey, "t has no primary key")
            .at("pg")
            .at("other");
        assert_eq!(e.to_string(), "pg: t has no primary key");
        assert!(e.is_definite());
    }

    #[test]
    fn every_definite_failure_says_its_recovery() {
        for f in [
            Failure::Network,
            Failure::Timeout,
            Failure::Server,
            Failure::Io,
            Failure::Auth,
            Failure::NotConfigured,
            Failure::PositionLost,
            Failure::NoKey,
            Failure::Decode,
            Failure::Unsupported,
            Failure::Invalid,
            Failure::BadRecord,
        ] {
            assert_eq!(f.recovery().is_some(), f.is_definite(), "{f}");
        }
    }
}
