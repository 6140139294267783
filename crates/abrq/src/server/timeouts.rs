//! The three clocks of a connection, so a client that stalls cannot hold
//! one (and its file descriptor) for ever:
//!
//! - head: a new connection must finish its TLS handshake and send a whole
//!   request head within `header_timeout`; so must a later request, from
//!   its first byte;
//! - idle: between requests a kept-alive connection may wait
//!   `idle_timeout` for the next request's first byte;
//! - body: a request body must arrive whole within `body_timeout` of its
//!   head (408).
//!
//! hyper's own `header_read_timeout` is not used: it starts when hyper
//! begins waiting for a head, including the idle wait of a kept-alive
//! connection, so it cannot give idle connections a longer leash than a
//! request that has started to arrive.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, Instant, Sleep};

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub idle: Duration,
    pub body: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for (the rest of) a request head.
    Head,
    /// A response went out; no byte of the next request yet.
    Idle,
    /// A request is being served; its body has its own clock.
    Busy,
}

/// Where one connection is, and since when.
pub struct Activity {
    state: watch::Sender<(Phase, Instant)>,
    timeouts: Timeouts,
    /// Told to close to make room for a new connection.
    evict: Notify,
}

impl Activity {
    /// A connection accepted now: the head clock runs.
    pub fn new(timeouts: Timeouts) -> Arc<Activity> {
        Arc::new(Activity {
            state: watch::Sender::new((Phase::Head, Instant::now())),
            timeouts,
            evict: Notify::new(),
        })
    }

    /// Since when it has waited without being served (for a request head,
    /// or kept alive between requests); None while a request is served.
    pub fn waiting_since(&self) -> Option<Instant> {
        let (phase, since) = *self.state.borrow();
        (phase != Phase::Busy).then_some(since)
    }

    pub fn evict(&self) {
        self.evict.notify_one();
    }

    /// Resolves when the connection is told to make room and is not
    /// serving a request (one that began meanwhile is let finish).
    pub async fn evicted(&self) {
        loop {
            self.evict.notified().await;
            if self.waiting_since().is_some() {
                return;
            }
        }
    }

    fn read_some(&self) {
        self.state.send_if_modified(|s| {
            let first_byte = s.0 == Phase::Idle;
            if first_byte {
                *s = (Phase::Head, Instant::now());
            }
            first_byte
        });
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    pub fn busy(&self) {
        self.state.send_replace((Phase::Busy, Instant::now()));
    }

    fn idle(&self) {
        self.state.send_replace((Phase::Idle, Instant::now()));
    }

    /// Resolves when the running clock runs out, naming it.
    pub async fn expired(&self) -> &'static str {
        let mut rx = self.state.subscribe();
        loop {
            let (phase, since) = *rx.borrow_and_update();
            let (limit, name) = match phase {
                Phase::Head => (self.timeouts.header, "header_timeout"),
                Phase::Idle => (self.timeouts.idle, "idle_timeout"),
                Phase::Busy => {
                    // The sender lives as long as `self`.
                    let _ = rx.changed().await;
                    continue;
                }
            };
            tokio::select! {
                () = sleep_until(since + limit) => return name,
                _ = rx.changed() => {}
            }
        }
    }
}

/// The connection's byte stream, telling `Activity` when bytes arrive.
pub struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Tracked { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read_some();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request body with a deadline for the whole of it. tower-http's
/// `TimeoutBody` restarts its clock at every frame, so a client that
/// trickles a byte at a time would never meet it.
pub struct DeadlineBody<B> {
    inner: B,
    deadline: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
}

impl<B> DeadlineBody<B> {
    /// `expired` is set if the deadline cut the body off.
    pub fn new(inner: B, limit: Duration, expired: Arc<AtomicBool>) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(sleep_until(Instant::now() + limit)),
            expired,
        }
    }
}

#[derive(Debug)]
pub struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive within server.body_timeout")
    }
}

impl std::error::Error for BodyTimedOut {}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        // Data already here is taken; the deadline bites only on a wait.
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::SeqCst);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that starts the idle clock once hyper is done with it
/// (it drops a body after its last frame).
pub struct ResponseBody {
    inner: axum::body::Body,
    activity: Arc<Activity>,
}

impl ResponseBody {
    pub fn new(inner: axum::body::Body, activity: Arc<Activity>) -> Self {
        ResponseBody { inner, activity }
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        self.activity.idle();
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
