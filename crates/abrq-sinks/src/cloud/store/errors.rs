//! The one classification of object_store errors (S3 and Azure Blob share
//! the client, so they share this function): `object_store::Error` → a
//! shared [`Failure`]; answers kept typed (see `http.rs`) go through
//! `cloud/answer.rs`.

use std::error::Error as StdError;

use abrq_core::DeliveryError;
use object_store::client::{HttpError, HttpErrorKind};
use object_store::Error;

use crate::cloud::answer::ServerAnswer;
use crate::failure::Failure;

/// `err`, classified, as the cause of a delivery error.
pub fn store_error(err: Error) -> DeliveryError {
    classify(&err).error(err)
}

/// What `err` means.
pub fn classify(err: &Error) -> Failure {
    match err {
        Error::Generic { source, .. } => from_chain(source.as_ref()),
        Error::PermissionDenied { .. } | Error::Unauthenticated { .. } => Failure::Unauthorized,
        // A put into a missing bucket or container; a get of a probe that
        // vanished. Either way the destination, not the batch.
        Error::NotFound { .. } => Failure::Missing,
        // Conditional requests are never sent, so these mean a store that
        // behaves unexpectedly.
        Error::AlreadyExists { .. } | Error::Precondition { .. } | Error::NotModified { .. } => {
            Failure::Protocol
        }
        Error::InvalidPath { .. }
        | Error::NotSupported { .. }
        | Error::NotImplemented { .. }
        | Error::UnknownConfigurationKey { .. } => Failure::Misconfigured,
        Error::JoinError { .. } => Failure::Unknown,
        // object_store::Error is #[non_exhaustive]: the compiler wants this
        // arm. A variant added later is not known to be the batch's fault.
        _ => Failure::Unknown,
    }
}

/// What object_store's private retry error wraps: our typed answer (see
/// `http.rs`) or a transport error of some kind.
fn from_chain(e: &(dyn StdError + 'static)) -> Failure {
    let mut cur = Some(e);
    let mut kind = None;
    while let Some(e) = cur {
        if let Some(answer) = e.downcast_ref::<ServerAnswer>() {
            return answer.failure();
        }
        if let Some(h) = e.downcast_ref::<HttpError>() {
            // keep looking: an answer of ours sits below its HttpError
            kind = Some(h.kind());
        }
        cur = e.source();
    }
    match kind {
        Some(HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Interrupted) => {
            Failure::Network
        }
        Some(HttpErrorKind::Timeout) => Failure::Timeout,
        Some(HttpErrorKind::Decode) => Failure::Protocol,
        // hyper's "connection closed before message completed" and the like
        Some(HttpErrorKind::Unknown) => Failure::Network,
        // HttpErrorKind is #[non_exhaustive] too.
        Some(_) => Failure::Unknown,
        // e.g. a 5xx or 429 object_store already retried, whose status it
        // keeps private: nothing suggests the batch is at fault
        None => Failure::Unknown,
    }
}
