//! Status and destination switches.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{ApiPath, ApiQuery};
use super::AppState;
use abrq_engine::Switch;

/// Who acted, for the audit log: the `X-Abrq-Actor` header or "api".
pub fn actor(headers: &HeaderMap) -> String {
    headers
        .get("x-abrq-actor")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .unwrap_or("api")
        .to_string()
}

pub async fn list_streams(State(st): State<AppState>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({ "streams": st.engine.status().await? })))
}

/// The processes sharing the state and the leases they hold, as of this
/// process's last heartbeat; `shared: false` with a state of its own.
pub async fn cluster(State(st): State<AppState>) -> Json<Value> {
    Json(match &st.engine.cluster {
        Some(c) => {
            let mut v = serde_json::to_value(c.view()).unwrap_or_default();
            v["shared"] = json!(true);
            v
        }
        None => json!({
            "shared": false,
            "node_id": null,
            "instance": null,
            "lease_timeout_ms": null,
            "heartbeat_ms": null,
            "nodes": [],
            "leases": [],
        }),
    })
}

pub async fn get_stream(
    State(st): State<AppState>,
    ApiPath(s): ApiPath<String>,
) -> ApiResult<Json<Value>> {
    let stream = st
        .engine
        .stream(&s)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown stream {s:?}")))?;
    Ok(Json(
        serde_json::to_value(st.engine.stream_status(&stream).await?).unwrap_or_default(),
    ))
}

pub async fn switch(
    State(st): State<AppState>,
    ApiPath((s, d, action)): ApiPath<(String, String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let sw = match action.as_str() {
        "enable" => Switch::Enable,
        "disable" => Switch::Disable,
        "pause" => Switch::Pause,
        "resume" => Switch::Resume,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown action {other:?}: enable, disable, pause or resume"),
            ))
        }
    };
    let skipped = st.engine.switch(&s, &d, sw, &actor(&headers)).await?;
    Ok(Json(
        json!({ "ok": true, "action": action, "skipped": skipped }),
    ))
}

pub async fn reset_breaker(
    State(st): State<AppState>,
    ApiPath((s, d)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    st.engine.reset_breaker(&s, &d, &actor(&headers)).await?;
    Ok(Json(json!({ "ok": true })))
}

#[derive(Deserialize)]
pub struct BackfillQuery {
    table: Option<String>,
    /// Only the rows this filter keeps (`created_at > '2026-01-01'`).
    #[serde(rename = "where")]
    filter: Option<String>,
}

/// Asks a database source to read its tables (or one) again.
pub async fn backfill(
    State(st): State<AppState>,
    ApiPath(s): ApiPath<String>,
    ApiQuery(q): ApiQuery<BackfillQuery>,
    headers: HeaderMap,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let table = q.table.filter(|t| !t.is_empty());
    let filter = q.filter.filter(|f| !f.trim().is_empty());
    st.engine
        .backfill(&s, table.clone(), filter.clone(), &actor(&headers))
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "stream": s, "table": table, "where": filter })),
    ))
}

/// Starts a source that stopped on a definite failure again.
pub async fn restart_source(
    State(st): State<AppState>,
    ApiPath(s): ApiPath<String>,
    headers: HeaderMap,
) -> ApiResult<(StatusCode, Json<Value>)> {
    // null: another process runs the source and takes the request up
    let stopped = st.engine.restart_source(&s, &actor(&headers)).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "stream": s, "stopped": stopped })),
    ))
}

/// Audit entries one request may ask for.
const MAX_AUDIT: u32 = 10_000;

#[derive(Deserialize)]
pub struct AuditQuery {
    stream: Option<String>,
    limit: Option<u32>,
}

pub async fn audit(
    State(st): State<AppState>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Json<Value>> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_AUDIT).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("limit {limit}: from 1 to {MAX_AUDIT}"),
        ));
    }
    let entries = st
        .engine
        .store()
        .audit_log(q.stream.as_deref(), limit)
        .await?;
    Ok(Json(json!({ "entries": entries })))
}
