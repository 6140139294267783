//! API errors as JSON bodies with the right status code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds for a Retry-After header (503 under backpressure).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(json!({ "error": self.message }))).into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        r
    }
}

impl From<abrq_engine::ControlError> for ApiError {
    fn from(e: abrq_engine::ControlError) -> Self {
        use abrq_engine::ControlError as C;
        let status = match &e {
            C::UnknownStream(_) | C::UnknownDestination { .. } => StatusCode::NOT_FOUND,
            C::NotSupported(_) => StatusCode::CONFLICT,
            C::Invalid(_) => StatusCode::BAD_REQUEST,
            C::Store(se) => store_status(se),
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<abrq_state::StoreError> for ApiError {
    fn from(e: abrq_state::StoreError) -> Self {
        ApiError::new(store_status(&e), e.to_string())
    }
}

fn store_status(e: &abrq_state::StoreError) -> StatusCode {
    use abrq_state::StoreError as S;
    match e {
        S::UnknownStream(_) | S::UnknownDestination { .. } | S::UnknownDeadLetter(_) => {
            StatusCode::NOT_FOUND
        }
        S::NotPending { .. } => StatusCode::CONFLICT,
        S::Payload { .. } | S::ReplayPayload { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        S::Backend(_) | S::Fenced { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
