//! Dead letters: list, show (with records), replay and discard, one or all.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::api::actor;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiPath, ApiQuery};
use super::AppState;
use abrq_state::DeadLetterState;

#[derive(Deserialize)]
pub struct ListQuery {
    state: Option<String>,
}

pub async fn list(
    State(st): State<AppState>,
    ApiPath((s, d)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<Value>> {
    let state = match q.state.as_deref() {
        None | Some("all") => None,
        Some(x) => Some(DeadLetterState::parse(x).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("state {x:?}: pending, replayed, discarded or all"),
            )
        })?),
    };
    st.engine.locate_checked(&s, &d)?;
    let rows = st.engine.store().dead_letters(&s, &d, state).await?;
    Ok(Json(json!({ "dead_letters": rows })))
}

pub async fn show(
    State(st): State<AppState>,
    ApiPath((s, d, id)): ApiPath<(String, String, i64)>,
) -> ApiResult<Json<Value>> {
    let (row, batch) = st.engine.store().dead_letter_get(id).await?;
    if row.stream != s || row.destination != d {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("dead letter {id} does not belong to {s}/{d}"),
        ));
    }
    Ok(Json(json!({ "dead_letter": row, "items": batch.items })))
}

pub async fn replay(
    State(st): State<AppState>,
    ApiPath((s, d, id)): ApiPath<(String, String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let n = st.engine.replay(&s, &d, Some(id), &actor(&headers)).await?;
    Ok(Json(json!({ "ok": true, "requested": n })))
}

pub async fn replay_all(
    State(st): State<AppState>,
    ApiPath((s, d)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let n = st.engine.replay(&s, &d, None, &actor(&headers)).await?;
    Ok(Json(json!({ "ok": true, "requested": n })))
}

pub async fn discard(
    State(st): State<AppState>,
    ApiPath((s, d, id)): ApiPath<(String, String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let rows = st
        .engine
        .discard(&s, &d, Some(id), &actor(&headers))
        .await?;
    Ok(Json(json!({ "ok": true, "discarded": rows })))
}

pub async fn discard_all(
    State(st): State<AppState>,
    ApiPath((s, d)): ApiPath<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let rows = st.engine.discard(&s, &d, None, &actor(&headers)).await?;
    Ok(Json(json!({ "ok": true, "discarded": rows })))
}
