//! The ftp/ftps engine's one error classification. Every failure is first
//! reduced to a [`Kind`] (what happened: it also decides whether the
//! session may be reused), then [`classify`] maps each kind onto the shared
//! [`Failure`] table in one exhaustive match, reply codes by range, so no
//! code falls through unnoticed.
//!
//! Almost everything is the server's or the network's problem, not the
//! batch's: the drain loop retries, the breaker opens, `check()` says why.
//! Only a reply that is about this one file (its size or its name) makes
//! the batch a `rejected` dead letter.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use abrq_core::DeliveryError;
use suppaftp::FtpError;

use crate::failure::Failure;

/// What went wrong, as far as the caller must act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Refused, reset, closed, unreachable or timed out.
    Network(io::ErrorKind),
    /// The TLS handshake or the certificate check failed.
    Tls,
    /// The server answered with this reply code.
    Reply(u32),
    /// A reply the client could not parse, or the session out of step.
    Protocol,
    /// Our side: the CA file, or a key that is not a safe path.
    Local,
}

/// What a failure of this kind means.
pub fn classify(kind: Kind) -> Failure {
    match kind {
        // The link or the server is down or slow; the same batch will go
        // through once it is back.
        Kind::Network(io::ErrorKind::TimedOut) => Failure::Timeout,
        Kind::Network(_) => Failure::Network,
        // A certificate the operator must fix (or trust via tls_ca_file).
        Kind::Tls => Failure::Misconfigured,
        // A confused session is dropped, and the next one starts clean.
        Kind::Protocol => Failure::Protocol,
        // An unreadable CA file or a bad key is fixed in config or code.
        Kind::Local => Failure::Misconfigured,
        Kind::Reply(code) => match code {
            // A positive reply where another was expected: a server dialect
            // we do not speak, which no batch can work around.
            0..=399 => Failure::Protocol,
            // 4xx is transient by definition (RFC 959).
            // 421 service not available, closing the connection.
            421 => Failure::Unavailable { retry_after: None },
            // 425/426 the data connection could not be opened or broke.
            425 | 426 => Failure::Network,
            // 430 bad login.
            430 => Failure::Unauthorized,
            // 452 insufficient space.
            452 => Failure::Storage,
            // 450 file busy, 451 local error, and the rest.
            400..=420 | 422..=424 | 427..=429 | 431..=451 | 453..=499 => {
                Failure::Unavailable { retry_after: None }
            }
            // Not logged in / need an account: credentials, not the batch.
            // Retrying opens the breaker and `check()` reports the login.
            530 | 532 => Failure::Unauthorized,
            // 550 no such directory or permission denied: the server's
            // setup, the same for every batch.
            550 => Failure::Missing,
            // About this file alone: 552 it exceeds the storage allocation
            // (a per-file size limit: a smaller batch would fit), 553 its
            // name is not allowed. Retrying the same bytes under the same
            // name cannot succeed, so dead-letter it at once. A server that
            // reports a full disk as 552 (RFC 959 says 452) dead-letters
            // instead of retrying; those dead letters can be replayed.
            552 => Failure::TooLarge { record: None },
            553 => Failure::Rejected { record: None },
            // 500-504 syntax/unsupported command, 551 and the rest: the
            // server or its setup, the same for every batch.
            500..=529 | 531 | 533..=549 | 551 | 554..=599 => Failure::Misconfigured,
            // Not a valid FTP reply code at all.
            600..=u32::MAX => Failure::Protocol,
        },
    }
}

/// Whether the session is still in step after a failure of this kind and
/// may serve the next operation. Only an ordinary refusal keeps it: 421
/// means the server is closing the connection.
pub fn session_survives(kind: Kind) -> bool {
    matches!(kind, Kind::Reply(code) if code != 421)
}

/// The cause of a failure, with its source chain.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    Ftp(#[from] FtpError),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("cannot read tls_ca_file {}", path.display())]
    CaFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("tls_ca_file {} holds no usable certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("unsafe key {0:?}: keys are plain names separated by '/'")]
    Key(String),
}

impl Cause {
    pub fn kind(&self) -> Kind {
        match self {
            Cause::Ftp(e) => match e {
                FtpError::ConnectionError(io) => Kind::Network(io.kind()),
                FtpError::SecureError(_) => Kind::Tls,
                // The code as the server sent it: suppaftp's Status maps codes
                // it does not list to 0, so read the reply's own digits.
                FtpError::UnexpectedResponse(r) => Kind::Reply(
                    r.body
                        .get(..3)
                        .and_then(|d| std::str::from_utf8(d).ok())
                        .and_then(|d| d.parse().ok())
                        .unwrap_or_else(|| r.status.code()),
                ),
                FtpError::BadResponse
                | FtpError::InvalidAddress(_)
                | FtpError::DataConnectionAlreadyOpen => Kind::Protocol,
            },
            Cause::Timeout(_) => Kind::Network(io::ErrorKind::TimedOut),
            Cause::CaFile { .. } | Cause::NoCertificate(_) | Cause::Key(_) => Kind::Local,
        }
    }

    /// The reply code, when the server refused.
    pub fn reply_code(&self) -> Option<u32> {
        match self.kind() {
            Kind::Reply(code) => Some(code),
            _ => None,
        }
    }
}

/// What was being done to which path on which server.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {path} on {server}")]
pub struct FtpOpError {
    pub op: &'static str,
    pub path: String,
    pub server: String,
    #[source]
    pub source: Cause,
}

/// Wraps a failure, classified, keeping the source chain.
pub fn ftp_error(op: &'static str, path: &str, server: &str, cause: Cause) -> DeliveryError {
    classify(cause.kind()).error(FtpOpError {
        op,
        path: path.to_string(),
        server: server.to_string(),
        source: cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use abrq_core::{Disposition, ReasonClass};
    use suppaftp::types::Response;
    use suppaftp::Status;

    fn reply(line: &str) -> Cause {
        let code: u32 = line[..3].parse().unwrap();
        Cause::Ftp(FtpError::UnexpectedResponse(Response::new(
            Status::from(code),
            format!("{line}\r\n").into_bytes(),
        )))
    }

    #[test]
    fn transient_and_rejected_replies() {
        for line in [
            "421 Service not available",
            "425 Can't open data connection",
            "426 Transfer aborted",
            "450 File busy",
            "451 Local error",
            "452 Insufficient storage",
            "530 Not logged in",
            "550 No such file or directory",
            "501 Syntax error",
            "454 Unlisted code",
        ] {
            let e = ftp_error("upload", "/d/x", "ftp://h:21", reply(line));
            assert!(e.is_transient(), "{line}");
        }
        for line in [
            "552 Exceeded storage allocation",
            "553 File name not allowed",
        ] {
            let e = ftp_error("upload", "/d/x", "ftp://h:21", reply(line));
            assert_eq!(
                e.disposition,
                Disposition::DeadLetter(ReasonClass::Rejected),
                "{line}"
            );
        }
        // a code suppaftp's Status does not know still classifies by its digits
        assert_eq!(reply("554 Unknown").kind(), Kind::Reply(554));
    }

    #[test]
    fn network_tls_and_timeouts_are_transient_and_drop_the_session() {
        for cause in [
            Cause::Ftp(FtpError::ConnectionError(
                io::ErrorKind::ConnectionRefused.into(),
            )),
            Cause::Ftp(FtpError::ConnectionError(
                io::ErrorKind::ConnectionReset.into(),
            )),
            Cause::Ftp(FtpError::SecureError("bad certificate".into())),
            Cause::Ftp(FtpError::BadResponse),
            Cause::Timeout(Duration::from_secs(1)),
            reply("421 Closing"),
        ] {
            let kind = cause.kind();
            assert_eq!(classify(kind).disposition(), Disposition::Retry, "{kind:?}");
            assert!(!session_survives(kind), "{kind:?}");
        }
        assert!(session_survives(reply("550 Nope").kind()));
    }

    #[test]
    fn describe_names_op_path_server_and_cause() {
        let e = ftp_error(
            "rename into place",
            "/d/x",
            "ftp://h:21",
            reply("553 Bad name"),
        );
        let d = e.describe();
        assert!(
            d.starts_with("cannot rename into place /d/x on ftp://h:21: "),
            "{d}"
        );
        assert!(d.contains("553 Bad name"), "{d}");
        let src = std::error::Error::source(&e).unwrap();
        let op = src.downcast_ref::<FtpOpError>().unwrap();
        assert_eq!(op.source.reply_code(), Some(553));
    }
}
