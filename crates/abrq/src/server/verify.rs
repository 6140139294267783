//! `POST .../destinations/{d}/verify` starts comparing a relational
//! replica with its source (`?table=`, `?repair=true`); `GET` answers the
//! last result, or the one running, as it stands. One verification per
//! destination runs at a time; results live as long as the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abrq_core::config::Config;
use abrq_engine::Engine;
use abrq_verify::{Plan, Report, State as RunState};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::api::actor;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiPath, ApiQuery};
use super::AppState;

/// How long a settle waits for the destination to deliver what is staged.
const SETTLE_WAIT: Duration = Duration::from_secs(60);
/// Time the source has to read what was committed before a settle began.
const SOURCE_READ: Duration = Duration::from_secs(1);

/// A verification's report, filled in as it runs.
type Shared = Arc<Mutex<Report>>;

/// Per stream and destination: the last (or running) verification.
#[derive(Default)]
pub struct Verifications {
    runs: Mutex<HashMap<(String, String), Shared>>,
}

impl Verifications {
    fn get(&self, key: &(String, String)) -> Option<Report> {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.get(key)
            .map(|r| r.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

#[derive(Deserialize)]
pub struct VerifyQuery {
    table: Option<String>,
    #[serde(default)]
    repair: bool,
}

/// The running stream, as verification waits on it and asks it to read.
struct Running {
    engine: Arc<Engine>,
    stream: String,
    destination: String,
    actor: String,
}

#[async_trait::async_trait]
impl abrq_verify::Pipeline for Running {
    async fn settle(&self) -> Result<(), String> {
        tokio::time::sleep(SOURCE_READ).await;
        let s = self
            .engine
            .stream(&self.stream)
            .ok_or_else(|| format!("unknown stream {:?}", self.stream))?;
        let until = Instant::now() + SETTLE_WAIT;
        let mut target = None;
        loop {
            let status = self
                .engine
                .stream_status(&s)
                .await
                .map_err(|e| e.to_string())?;
            let want = *target.get_or_insert(status.spool.last_seq);
            let d = status
                .destinations
                .iter()
                .find(|d| d.name == self.destination)
                .ok_or_else(|| format!("unknown destination {:?}", self.destination))?;
            if d.high_water_mark >= want {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "destination {:?} has not delivered batch {want} within {}s (its mark: {}); \
                     keys changed since are reported as different",
                    self.destination,
                    SETTLE_WAIT.as_secs(),
                    d.high_water_mark
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn backfill(&self, table: &str, filter: &str) -> Result<(), String> {
        self.engine
            .backfill(
                &self.stream,
                Some(table.to_string()),
                Some(filter.to_string()),
                &self.actor,
            )
            .await
            .map_err(|e| e.to_string())
    }
}

/// Checks the pair without I/O: a plan, or why not.
fn plan(config: &Config, stream: &str, destination: &str) -> Result<Plan, ApiError> {
    let not_found = |what: String| ApiError::new(StatusCode::NOT_FOUND, what);
    let s = config
        .stream(stream)
        .ok_or_else(|| not_found(format!("unknown stream {stream:?}")))?;
    let d = s
        .destinations
        .iter()
        .map(|d| d.get_ref())
        .find(|d| d.name.as_str() == destination)
        .ok_or_else(|| not_found(format!("unknown destination {destination:?} of {stream:?}")))?;
    Plan::new(stream, s.source.get_ref(), d).map_err(|e| ApiError::new(StatusCode::CONFLICT, e))
}

pub async fn start(
    State(st): State<AppState>,
    ApiPath((s, d)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<VerifyQuery>,
    headers: HeaderMap,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let plan = plan(&st.config, &s, &d)?;
    let key = (s.clone(), d.clone());
    let report = Arc::new(Mutex::new(Report::started(&s, &d, q.repair)));
    {
        let mut runs = st
            .verifications
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(r) = runs.get(&key) {
            if r.lock().unwrap_or_else(|p| p.into_inner()).state == RunState::Running {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!("a verification of {s}/{d} is running"),
                ));
            }
        }
        runs.insert(key, report.clone());
    }
    let running = Running {
        engine: st.engine.clone(),
        stream: s.clone(),
        destination: d.clone(),
        actor: actor(&headers),
    };
    let table = q.table.filter(|t| !t.is_empty());
    tracing::info!(stream = %s, destination = %d, ?table, repair = q.repair, "verification started");
    tokio::spawn(async move {
        let outcome = abrq_verify::run(&plan, table.as_deref(), q.repair, &running, &report).await;
        let mut r = report.lock().unwrap_or_else(|p| p.into_inner());
        r.finish(outcome.err());
        let differences: usize = r.tables.iter().map(|t| t.differences.len()).sum();
        tracing::info!(
            stream = %r.stream, destination = %r.destination, equal = r.equal(), differences,
            error = ?r.error, "verification finished"
        );
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "ok": true, "state": "running" })),
    ))
}

pub async fn last(
    State(st): State<AppState>,
    ApiPath((s, d)): ApiPath<(String, String)>,
) -> ApiResult<Json<Value>> {
    plan(&st.config, &s, &d)?;
    let report = st
        .verifications
        .get(&(s.clone(), d.clone()))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("{s}/{d} has not been verified yet"),
            )
        })?;
    let equal = report.equal();
    let mut v = serde_json::to_value(report).unwrap_or_default();
    v["equal"] = json!(equal);
    Ok(Json(v))
}
