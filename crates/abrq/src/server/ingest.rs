//! `POST /v1/streams/{s}/records`: 200 only once the records are staged
//! durably; a malformed body is refused whole (400); over the body limit,
//! 413; a full spool, 503 with Retry-After.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::auth;
use super::error::ApiError;
use super::AppState;
use abrq_engine::ingest::IngestFailure;
use abrq_engine::stream::StageError;

pub async fn ingest(State(st): State<AppState>, Path(s): Path<String>, req: Request) -> Response {
    match handle(&st, &s, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle(st: &AppState, s: &str, req: Request) -> Result<Response, ApiError> {
    let Some((token, max_body)) = st.ingest.get(s) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown stream {s:?}"),
        ));
    };
    let (parts, body) = req.into_parts();
    // The stream's ingest token, else the admin token, guards ingest.
    auth::require(
        &parts.headers,
        token.as_deref().or(st.admin_token.as_deref()),
    )?;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body is larger than the {max_body} byte limit of stream {s:?}"),
        )
    };
    if declared_length(&parts.headers).is_some_and(|n| n > *max_body) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(Body::new(body), *max_body as usize)
        .await
        .map_err(|_| too_large())?;
    let key = parts
        .headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty());
    match st.engine.ingest(s, &bytes, key).await {
        Ok(ack) => Ok(Json(ack).into_response()),
        Err(e) => Err(failure(e)),
    }
}

fn declared_length(h: &HeaderMap) -> Option<u64> {
    h.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

fn failure(e: IngestFailure) -> ApiError {
    let status = match &e {
        IngestFailure::UnknownStream(_) => StatusCode::NOT_FOUND,
        IngestFailure::NotHttp(_) => StatusCode::CONFLICT,
        IngestFailure::Malformed(_) | IngestFailure::Empty => StatusCode::BAD_REQUEST,
        IngestFailure::Stage(StageError::SpoolFull { .. })
        | IngestFailure::Stage(StageError::ShuttingDown) => StatusCode::SERVICE_UNAVAILABLE,
        IngestFailure::Stage(StageError::Store(_)) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut err = ApiError::new(status, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        err.retry_after = Some(1);
    }
    err
}
