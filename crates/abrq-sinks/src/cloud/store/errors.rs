//! The one classification of object_store errors (S3 and Azure Blob share
//! the client, so they share this function): `object_store::Error` → a
//! [`Failure`], decided in `cloud/answer.rs`.

use std::error::Error as StdError;

use abrq_core::DeliveryError;
use object_store::client::{HttpError, HttpErrorKind};
use object_store::Error;

use crate::cloud::answer::{delivery_error, Failure, ServerAnswer};

/// Classifies `err`, keeping it as the cause.
pub fn classify(err: Error) -> DeliveryError {
    let failure = match &err {
        Error::Generic { source, .. } => from_chain(source.as_ref()),
        Error::PermissionDenied { .. } | Error::Unauthenticated { .. } => Failure::Credentials,
        // A put into a missing bucket or container; a get of a probe that
        // vanished. Either way the destination, not the batch.
        Error::NotFound { .. } => Failure::Status {
            status: 404,
            code: None,
            retry_after: None,
        },
        // Conditional requests are never sent, so these mean a store that
        // behaves unexpectedly: retry.
        Error::AlreadyExists { .. } | Error::Precondition { .. } | Error::NotModified { .. } => {
            Failure::Other
        }
        Error::InvalidPath { .. }
        | Error::NotSupported { .. }
        | Error::NotImplemented { .. }
        | Error::UnknownConfigurationKey { .. } => Failure::Setup,
        Error::JoinError { .. } => Failure::Other,
        // object_store::Error is #[non_exhaustive], so this arm cannot be
        // avoided; a variant added later is a store problem, not the batch's.
        _ => Failure::Other,
    };
    delivery_error(failure, err)
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
        Some(HttpErrorKind::Decode) => Failure::BadResponse,
        // hyper's "connection closed before message completed" and the like
        Some(HttpErrorKind::Unknown) => Failure::Network,
        // HttpErrorKind is #[non_exhaustive] too.
        Some(_) => Failure::Other,
        None => Failure::Other,
    }
}
