//! The one classification of gcloud-storage errors → a shared
//! [`Failure`] (statuses through `cloud/answer.rs`); plus the middleware
//! that keeps a `Retry-After` the client would otherwise drop.

use abrq_core::DeliveryError;
use async_trait::async_trait;
use gcloud_storage::http::Error;
use http::Extensions;
use reqwest_middleware::reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::cloud::answer::{status_failure, ServerAnswer};
use crate::failure::Failure;

/// `err`, classified, as the cause of a delivery error.
pub fn gcs_error(err: Error) -> DeliveryError {
    classify(&err).error(err)
}

/// What `err` means.
pub fn classify(err: &Error) -> Failure {
    match err {
        Error::Response(r) => {
            status_failure(r.code, r.errors.first().map(|e| e.reason.as_str()), None)
        }
        Error::HttpClient(e) | Error::RawResponse(e, _) => from_reqwest(e),
        Error::HttpMiddleware(e) => match (
            e.downcast_ref::<ServerAnswer>(),
            e.downcast_ref::<reqwest_middleware::reqwest::Error>(),
        ) {
            (Some(answer), _) => answer.failure(),
            (None, Some(e)) => from_reqwest(e),
            (None, None) => Failure::Unknown,
        },
        Error::TokenSource(_) => Failure::Unauthorized,
        Error::InvalidRangeHeader(_) => Failure::Protocol,
    }
}

/// A 404, whichever way the client reports it: media downloads surface the
/// bare HTTP status, JSON calls the parsed error body.
pub fn is_not_found(err: &Error) -> bool {
    match err {
        Error::Response(r) => r.code == 404,
        Error::HttpClient(e) | Error::RawResponse(e, _) => {
            e.status().map(|s| s.as_u16()) == Some(404)
        }
        Error::HttpMiddleware(_) | Error::TokenSource(_) | Error::InvalidRangeHeader(_) => false,
    }
}

fn from_reqwest(e: &reqwest_middleware::reqwest::Error) -> Failure {
    if let Some(status) = e.status() {
        status_failure(status.as_u16(), None, None)
    } else if e.is_timeout() {
        Failure::Timeout
    } else if e.is_decode() {
        Failure::Protocol
    } else if e.is_builder() {
        Failure::Misconfigured
    } else {
        // connect, request, body, redirect: the connection, not the batch
        Failure::Network
    }
}

/// Turns a 429 or 5xx that carries `Retry-After` into a [`ServerAnswer`]
/// error, since gcloud-storage reports statuses without their headers.
pub struct RetryAfterAnswers;

#[async_trait]
impl Middleware for RetryAfterAnswers {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let res = next.run(req, extensions).await?;
        let status = res.status().as_u16();
        let hinted = res.headers().contains_key(http::header::RETRY_AFTER);
        if !(hinted && (status == 429 || res.status().is_server_error())) {
            return Ok(res);
        }
        let headers = res.headers().clone();
        let body = res.bytes().await.unwrap_or_default();
        let answer = ServerAnswer::new(status, &headers, &body);
        Err(reqwest_middleware::Error::Middleware(answer.into()))
    }
}
