//! The accept loop: at most `max_connections` connections at once (more
//! are closed as soon as accepted, so they hold no descriptor), each with
//! the clocks of `timeouts.rs`, optionally behind TLS, served as HTTP/1.1
//! by hyper. HTTP/1.1 only: every client abrq has (the CLI, producers,
//! probes, Prometheus) speaks it, and the clocks here are HTTP/1's.
//!
//! Sizing `max_connections`: the peak number of clients connected at once
//! (producers, scrapes, probes, operators) with room to spare. While it is
//! full, a new connection takes the place of the one idle longest
//! (`connections.rs`); only when every connection is being served is a
//! new one closed at once. Clients that stall are reaped by
//! `header_timeout` and `idle_timeout` in any case.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use abrq_core::config::ServerConfig;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use super::connections::{Admission, Connections, Place};
use super::error::ApiError;
use super::timeouts::{Activity, DeadlineBody, ResponseBody, Timeouts, Tracked};
use super::tls::Tls;

/// Descriptors kept back from connections for everything else the
/// process opens: the state store, destination connections, files.
const FD_RESERVE: u64 = 128;

/// How long shutdown waits for requests in flight.
const DRAIN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub timeouts: Timeouts,
    pub max_connections: usize,
}

impl Limits {
    pub fn from_config(server: &ServerConfig) -> Limits {
        Limits {
            timeouts: Timeouts {
                header: server.header_timeout.0,
                idle: server.idle_timeout.0,
                body: server.body_timeout.0,
            },
            max_connections: server.max_connections.max(1),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets
/// requests in flight finish (up to `DRAIN`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<Tls>>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let connections = Connections::new(fd_budget(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut crowded = Crowding::default();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let activity = Activity::new(limits.timeouts);
        let place = match connections.admit(&activity).await {
            Admission::Free(place) => {
                crowded.ended();
                place
            }
            Admission::Evicted(place) => {
                crowded.evicted(limits.max_connections);
                place
            }
            Admission::Refused => {
                // Dropping `tcp` closes it: a flood costs no descriptor.
                crowded.refused(limits.max_connections);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(connection(
            tcp,
            peer,
            app.clone(),
            tls.clone(),
            activity,
            graceful.watcher(),
            place,
        ));
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {DRAIN:?}; closing them");
    }
    Ok(())
}

/// One warning when the limit is reached, one line when it is left, with
/// what it cost meanwhile.
#[derive(Default)]
struct Crowding {
    evicted: u64,
    refused: u64,
}

impl Crowding {
    fn warn_once(&self, max_connections: usize) {
        if self.evicted + self.refused == 0 {
            tracing::warn!(
                max_connections,
                "connection limit reached; idle connections are closed, longest idle first, \
                 to admit new ones"
            );
        }
    }

    fn evicted(&mut self, max_connections: usize) {
        self.warn_once(max_connections);
        self.evicted += 1;
    }

    fn refused(&mut self, max_connections: usize) {
        self.warn_once(max_connections);
        if self.refused == 0 {
            tracing::warn!(
                max_connections,
                "every connection is being served; new connections are closed until one ends"
            );
        }
        self.refused += 1;
    }

    fn ended(&mut self) {
        if self.evicted + self.refused > 0 {
            tracing::info!(
                evicted = self.evicted,
                refused = self.refused,
                "below the connection limit again"
            );
            *self = Crowding::default();
        }
    }
}

async fn accept_failed(e: io::Error) {
    match e.kind() {
        // The peer gave up before we took the connection: nothing to do.
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionRefused
        | io::ErrorKind::Interrupted => {}
        // Out of descriptors or memory: back off rather than spin.
        _ => {
            tracing::warn!(error = %e, "accepting a connection failed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// One connection, from accept to close; `_place` frees its place in the
/// limit when this ends.
async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    tls: Option<Arc<Tls>>,
    activity: Arc<Activity>,
    watcher: Watcher,
    _place: Place,
) {
    let served = async {
        match tls {
            None => serve_http(Tracked::new(tcp, activity.clone()), app, &activity, watcher).await,
            Some(tls) => {
                let stream = tls.acceptor().accept(tcp).await?;
                serve_http(
                    Tracked::new(stream, activity.clone()),
                    app,
                    &activity,
                    watcher,
                )
                .await
            }
        }
    };
    tokio::select! {
        r = served => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        }
        timeout = activity.expired() => {
            tracing::debug!(%peer, timeout, "connection closed: it ran out of time");
        }
        () = activity.evicted() => {
            tracing::debug!(%peer, "idle connection closed to admit a new one");
        }
    }
}

async fn serve_http<S>(
    io: Tracked<S>,
    app: Router,
    activity: &Arc<Activity>,
    watcher: Watcher,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = activity.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (app, activity) = (app.clone(), activity.clone());
        async move { Ok::<_, Infallible>(handle(app, activity, req).await) }
    });
    let conn = http1::Builder::new()
        // The clocks of timeouts.rs stand in for hyper's header timeout.
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(io), service);
    watcher.watch(conn).await?;
    Ok(())
}

async fn handle(
    app: Router,
    activity: Arc<Activity>,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    activity.busy();
    let limit = activity.timeouts().body;
    let expired = Arc::new(AtomicBool::new(false));
    let req = req.map(|b| axum::body::Body::new(DeadlineBody::new(b, limit, expired.clone())));
    let resp = match app.oneshot(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    // However the handler answered a body that failed, the client was
    // too slow: say so, and drop the connection with the rest of it.
    let resp = if expired.load(Ordering::SeqCst) {
        let mut r = ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within {limit:?} (server.body_timeout)"),
        )
        .into_response();
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    } else {
        resp
    };
    resp.map(|b| ResponseBody::new(b, activity))
}

/// `wanted` connections, or as many as the open-file limit allows after
/// `FD_RESERVE`. The soft limit is raised (within the hard one) when it is
/// short: its usual default, 1024, is meant for shells, not servers.
fn fd_budget(wanted: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let need = wanted as u64 + FD_RESERVE;
    let mut limit = getrlimit(Resource::Nofile);
    let soft = limit.current.unwrap_or(u64::MAX);
    if soft >= need {
        return wanted;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    limit.current = Some(need.min(hard));
    let soft = match setrlimit(Resource::Nofile, limit) {
        Ok(()) => need.min(hard),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            soft
        }
    };
    if soft >= need {
        return wanted;
    }
    let fits = soft.saturating_sub(FD_RESERVE).max(1) as usize;
    tracing::warn!(
        max_connections = wanted,
        open_file_limit = soft,
        connections = fits,
        "server.max_connections does not fit the open-file limit; serving fewer"
    );
    fits
}
