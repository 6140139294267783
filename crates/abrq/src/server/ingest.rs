//! `POST /v1/streams/{s}/records`: 200 only once the records are staged
//! durably; a malformed body is refused whole (400); over the body limit,
//! 413; a full spool or too many requests at once, 503 with Retry-After; an
//! Idempotency-Key reused with another body, 409.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;

use super::error::ApiError;
use super::AppState;
use abrq_engine::ingest::{check_key, IngestFailure};
use abrq_engine::stream::StageError;

pub async fn ingest(State(st): State<AppState>, Path(s): Path<String>, req: Request) -> Response {
    match handle(&st, &s, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The token that guards ingest into stream `s`: its own ingest token,
/// else the admin token. An unknown stream takes the admin token, so a
/// client without it does not learn which streams exist.
pub fn token<'a>(st: &'a AppState, s: &str) -> Option<&'a str> {
    match st.ingest.get(s) {
        Some((token, _)) => token.as_deref().or(st.admin_token.as_deref()),
        None => st.admin_token.as_deref(),
    }
}

async fn handle(st: &AppState, s: &str, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    // the token was checked before this runs (server::admin_auth)
    let Some((_, max_body)) = st.ingest.get(s) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown stream {s:?}"),
        ));
    };
    let key = match parts.headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            check_key(v.as_bytes())
                .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?,
        ),
    };
    // Held until the records are staged: bounds the bodies in memory.
    let Some(_permit) = st.engine.ingest_permit() else {
        // Read and drop the body (never held) so the client gets the
        // answer instead of a connection reset mid-upload.
        let mut body = Body::new(body).into_data_stream();
        let mut seen = 0u64;
        while let Some(Ok(chunk)) = body.next().await {
            seen += chunk.len() as u64;
            if seen > *max_body {
                break;
            }
        }
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many ingest requests at once (server.max_ingest_requests = {}); retry later",
                st.engine.max_ingest_requests()
            ),
        );
        e.retry_after = Some(1);
        return Err(e);
    };
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
    match st.engine.ingest(s, bytes, key.map(str::as_bytes)).await {
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
        IngestFailure::Malformed(_) | IngestFailure::Empty | IngestFailure::BadKey(_) => {
            StatusCode::BAD_REQUEST
        }
        IngestFailure::KeyConflict(_) => StatusCode::CONFLICT,
        IngestFailure::Worker(_) => StatusCode::INTERNAL_SERVER_ERROR,
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
