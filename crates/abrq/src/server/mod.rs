//! The HTTP server: admin API under /v1, the web console at /, ingest,
//! /metrics, health checks.

mod api;
mod auth;
mod connections;
mod console;
mod dead_letters;
mod error;
mod extract;
mod guard;
mod ingest;
mod listener;
mod timeouts;
mod tls;
mod verify;

pub use listener::Limits;
pub use tls::Tls;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use abrq_core::config::{Config, SourceEngine};
use abrq_engine::Engine;
use abrq_sources::http::HttpOptions;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;

#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    admin_token: Option<String>,
    /// The listener speaks HTTPS.
    tls: bool,
    /// Per stream: the ingest token and the body limit.
    ingest: Arc<HashMap<String, (Option<String>, u64)>>,
    allowed_hosts: guard::AllowedHosts,
    /// What verification reads: each stream's source and destinations.
    config: Arc<Config>,
    verifications: Arc<verify::Verifications>,
}

impl AppState {
    pub fn new(engine: Arc<Engine>, config: &Config) -> AppState {
        let admin_token = config
            .server
            .admin_token
            .as_ref()
            .filter(|t| !t.is_empty())
            .map(|t| t.expose().to_string());
        let ingest = config
            .streams
            .iter()
            .filter_map(|s| {
                let s = s.get_ref();
                let src = s.source.get_ref();
                // Checked when the config was loaded; were it not, a stream
                // whose token cannot be read takes no ingest at all rather
                // than ingest without its token. The engine refuses ingest
                // into a source of another engine.
                let http = match src.engine {
                    SourceEngine::Http => HttpOptions::from_config(src).ok()?,
                    _ => HttpOptions::default(),
                };
                let token = http.token().map(str::to_string);
                let max = http
                    .max_body
                    .map(|m| m.0)
                    .unwrap_or(abrq_engine::ingest::DEFAULT_MAX_BODY);
                Some((s.name.0.clone(), (token, max)))
            })
            .collect();
        AppState {
            engine,
            admin_token,
            tls: config.server.tls_cert.is_some(),
            ingest: Arc::new(ingest),
            allowed_hosts: guard::AllowedHosts::new(
                &config
                    .server
                    .allowed_hosts
                    .iter()
                    .map(|h| h.0.clone())
                    .collect::<Vec<_>>(),
            ),
            config: Arc::new(config.clone()),
            verifications: Arc::default(),
        }
    }
}

/// Checks the `[server]` table. A listen address off loopback needs an
/// admin token (the API can discard data, so it is never left open to a
/// network) and TLS, unless `allow_plaintext` says the network is trusted
/// with the token in clear text.
pub fn check_server(config: &Config) -> anyhow::Result<SocketAddr> {
    let server = &config.server;
    let addr: SocketAddr = server
        .listen
        .as_str()
        .parse()
        .map_err(|e| anyhow::anyhow!("server.listen {:?}: {e}", server.listen.0))?;
    let has_token = server.admin_token.as_ref().is_some_and(|t| !t.is_empty());
    if !addr.ip().is_loopback() && !has_token {
        anyhow::bail!(
            "server.listen {addr} is not a loopback address, so server.admin_token is required"
        );
    }
    if !addr.ip().is_loopback() && server.tls_cert.is_none() && !server.allow_plaintext {
        anyhow::bail!(
            "server.listen {addr} is not a loopback address: set server.tls_cert and \
             server.tls_key to serve HTTPS, or server.allow_plaintext = true to send the \
             admin token over plain HTTP"
        );
    }
    if server.tls_cert.is_some() != server.tls_key.is_some() {
        anyhow::bail!("server.tls_cert and server.tls_key go together: set both or neither");
    }
    if server.max_connections == 0 {
        anyhow::bail!("server.max_connections must be at least 1");
    }
    for (key, d) in [
        ("header_timeout", server.header_timeout),
        ("idle_timeout", server.idle_timeout),
        ("body_timeout", server.body_timeout),
    ] {
        if d.0.is_zero() {
            anyhow::bail!("server.{key} must be longer than 0s");
        }
    }
    Ok(addr)
}

pub fn router(state: AppState) -> Router {
    let admin = Router::new()
        .route("/v1/streams", get(api::list_streams))
        .route("/v1/streams/{s}", get(api::get_stream))
        .route("/v1/streams/{s}/backfill", post(api::backfill))
        .route("/v1/streams/{s}/source/restart", post(api::restart_source))
        .route(
            "/v1/streams/{s}/destinations/{d}/breaker/reset",
            post(api::reset_breaker),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/verify",
            get(verify::last).post(verify::start),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/{action}",
            post(api::switch),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/dead-letters",
            get(dead_letters::list),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/dead-letters/replay-all",
            post(dead_letters::replay_all),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/dead-letters/discard-all",
            post(dead_letters::discard_all),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/dead-letters/{id}",
            get(dead_letters::show),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/dead-letters/{id}/replay",
            post(dead_letters::replay),
        )
        .route(
            "/v1/streams/{s}/destinations/{d}/dead-letters/{id}/discard",
            post(dead_letters::discard),
        )
        .route("/v1/audit", get(api::audit))
        .route("/v1/cluster", get(api::cluster));
    let guard = guard::Guard {
        tls: state.tls,
        admin_token: state.admin_token.is_some(),
    };
    // Both checks wrap the whole router, the ingest route and the 404 and
    // 405 answers included: an unknown path tells nothing to a client
    // without the token. The token is checked first, so a request without
    // it learns nothing else (401 before 403 or 415).
    Router::new()
        .merge(admin)
        .route("/v1/streams/{s}/records", post(ingest::ingest))
        .route("/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .merge(console::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such path") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this path",
            )
        })
        .with_state(state.clone())
        .layer(middleware::from_fn_with_state(guard, guard::check))
        .layer(middleware::from_fn_with_state(state.clone(), admin_auth))
        .layer(middleware::from_fn_with_state(
            state.allowed_hosts.clone(),
            guard::check_host,
        ))
}

/// Tokens before anything else: the admin token guards every path but
/// the probes; ingest takes its stream's token (else the admin token).
/// A client without the token learns nothing, not even which content
/// types a path takes (401 before 403 or 415).
async fn admin_auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let token = match guard::classify(path) {
        guard::Class::Probe => return next.run(req).await,
        guard::Class::Admin => st.admin_token.as_deref(),
        guard::Class::Ingest => {
            // stream names are letters, digits, '_' and '-': never encoded
            let stream = path.split('/').nth(3).unwrap_or_default();
            ingest::token(&st, stream)
        }
    };
    if let Err(e) = auth::require(req.headers(), token) {
        return e.into_response();
    }
    next.run(req).await
}

async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}

async fn metrics(State(st): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.engine.render_metrics(),
    )
}

/// Ready when the state store answers and no supervised task is failing;
/// otherwise 503 naming every failing task, its error and since when.
async fn readyz(State(st): State<AppState>) -> Response {
    if let Err(e) = st.engine.store().streams().await {
        return (StatusCode::SERVICE_UNAVAILABLE, format!("state store: {e}")).into_response();
    }
    let failing = st.engine.failing_tasks();
    if failing.is_empty() {
        return "ready".into_response();
    }
    let lines: Vec<String> = failing
        .iter()
        .map(|(task, f)| {
            format!(
                "{task}: failing since {} ({} restarts): {}",
                f.since.to_rfc3339(),
                f.restarts,
                f.error
            )
        })
        .collect();
    (StatusCode::SERVICE_UNAVAILABLE, lines.join("\n")).into_response()
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    tls: Option<Arc<Tls>>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listener::serve(listener, router(state), tls, limits, shutdown).await
}
