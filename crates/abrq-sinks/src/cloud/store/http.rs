//! object_store's own HTTP client with one change. object_store reports an
//! error status as text inside a private error type, so the status, the
//! store's error code and any `Retry-After` would be lost to
//! classification. Answers whose meaning matters here come back instead as
//! a typed [`ServerAnswer`] (as a non-retryable transport error, so
//! object_store does not retry them on its own schedule either):
//!
//! - 400 and 413: the code says whether the object is too large;
//! - 429 and 5xx carrying `Retry-After`: the drain loop waits as told.
//!
//! Everything else passes through untouched: 404/409/412 and 401/403 map to
//! object_store's own typed variants, and 5xx without a hint keep
//! object_store's quick in-attempt retry, which saves re-sending the other
//! parts of a multipart upload.

use async_trait::async_trait;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::ClientOptions;

use crate::cloud::answer::ServerAnswer;

/// An [`HttpConnector`] for the S3 and Azure builders.
#[derive(Debug, Default)]
pub struct AnswerConnector;

impl HttpConnector for AnswerConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Answers(inner)))
    }
}

#[derive(Debug)]
struct Answers(HttpClient);

/// Whether an answer is kept typed rather than passed to object_store.
fn keep(status: u16, has_retry_after: bool) -> bool {
    match status {
        400 | 413 => true,
        429 | 500..=599 => has_retry_after,
        _ => false,
    }
}

#[async_trait]
impl HttpService for Answers {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let res = self.0.execute(req).await?;
        let status = res.status().as_u16();
        if !keep(
            status,
            res.headers().contains_key(http::header::RETRY_AFTER),
        ) {
            return Ok(res);
        }
        let (parts, body) = res.into_parts();
        // An error body is small; if it cannot be read the status and
        // headers still classify the answer.
        let body = body.bytes().await.unwrap_or_default();
        let answer = ServerAnswer::new(status, &parts.headers, &body);
        Err(HttpError::new(HttpErrorKind::Unknown, answer))
    }
}

#[cfg(test)]
mod tests {
    use super::keep;

    #[test]
    fn keeps_only_what_classification_needs() {
        assert!(keep(400, false) && keep(413, false));
        assert!(keep(503, true) && keep(429, true) && keep(500, true));
        for s in [200, 204, 304, 401, 403, 404, 409, 412, 429, 500, 503] {
            assert!(!keep(s, false), "{s}");
        }
    }
}
