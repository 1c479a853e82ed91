//! Open connections: the accept loop, the bound on how many are open at once, and the timeouts
//! that close connections holding a slot without using it.
//!
//! A slow-client flood (connections that send part of a request head, or nothing, and wait)
//! must neither exhaust file descriptors nor lock out normal clients:
//!
//! - at most `max_connections` are open; beyond that, accepting a new connection first closes
//!   the oldest *stalled* one: pending (no complete request head yet) and waiting on an empty
//!   socket (everything it sent has been read, and it was not a complete head). Only when none
//!   is stalled does accepting wait for a connection to end. A connection not yet read from is
//!   never evicted: its head may be sitting in the socket, and closing it would reset a normal
//!   client that a busy server had simply not polled yet;
//! - a new connection must complete its first request head (TLS handshake included) within
//!   `header_read_timeout`;
//! - a kept-alive connection must complete its next request head within `idle_timeout` of the
//!   previous response (hyper's header-read timer, which starts when hyper waits for a head);
//! - a request's body must arrive within `body_read_timeout` of its head (`body_deadline.rs`).
//!
//! Stopping closes the listener, lets in-flight requests finish (hyper's graceful shutdown
//! closes idle connections at once) and returns when every connection has ended.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

use super::body_deadline::TimedBody;
use super::client_addr::ClientAddr;
use crate::metrics::{ConnectionMetrics, EarlyClose};

/// Bounds on open connections (`--max-connections`, `--header-read-timeout`, `--idle-timeout`,
/// `--body-read-timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest a new connection may take to complete its first request head.
    pub header_read_timeout: Duration,
    /// Longest a kept-alive connection may wait for its next complete request head.
    pub idle_timeout: Duration,
    /// Longest a request's body may take to arrive, from its head (see `body_deadline.rs`).
    pub body_read_timeout: Duration,
}

/// Default `--max-connections`: Prometheus' `--web.max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            // Prometheus' --web.read-timeout.
            body_read_timeout: Duration::from_secs(300),
        }
    }
}

/// One connection's standing: pending until its first request head is complete.
#[derive(Default)]
struct Standing {
    /// A complete request head arrived (the connection is no longer pending).
    served: AtomicBool,
    /// The last read of the socket found it empty (true from the first such read until bytes
    /// arrive again); false before the socket was ever read.
    waiting: AtomicBool,
    /// Asks a pending connection to close so that a new one can have its slot.
    evict: Notify,
}

impl Standing {
    fn is_pending(&self) -> bool {
        !self.served.load(Ordering::Acquire)
    }

    /// Pending and waiting on an empty socket: whatever it sent was read and was not a
    /// complete request head. Only stalled connections are evicted.
    fn is_stalled(&self) -> bool {
        self.is_pending() && self.waiting.load(Ordering::Acquire)
    }
}

/// A connection's socket that records in its [`Standing`] whether the last read found it
/// empty (see [`Standing::is_stalled`]).
struct Watched<S> {
    io: S,
    standing: Arc<Standing>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        self.standing.waiting.store(polled.is_pending(), Ordering::Release);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The slots: one permit per open connection, and the pending connections, oldest first.
struct Slots {
    permits: Arc<Semaphore>,
    total: u32,
    /// Must hold every pending connection in accept order; may also hold ended or served ones
    /// (skipped when evicting, pruned as it grows).
    pending: Mutex<VecDeque<Weak<Standing>>>,
}

impl Slots {
    fn new(max: usize) -> Self {
        let total = u32::try_from(max.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Self { permits: Arc::new(Semaphore::new(total as usize)), total, pending: Mutex::new(VecDeque::new()) }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Weak<Standing>>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a newly accepted connection as pending.
    fn register(&self) -> Arc<Standing> {
        let standing = Arc::new(Standing::default());
        let mut queue = self.queue();
        if queue.len() >= 2 * self.total as usize {
            queue.retain(|w| w.upgrade().is_some_and(|s| s.is_pending()));
        }
        queue.push_back(Arc::downgrade(&standing));
        standing
    }

    /// Asks the oldest stalled connection to close; false when none is stalled. Ended and
    /// served connections are dropped from the queue on the way.
    fn evict_oldest_stalled(&self) -> bool {
        let mut queue = self.queue();
        let mut i = 0;
        while i < queue.len() {
            match queue[i].upgrade().filter(|s| s.is_pending()) {
                None => {
                    queue.remove(i);
                }
                Some(standing) if standing.is_stalled() => {
                    queue.remove(i);
                    standing.evict.notify_one();
                    return true;
                }
                Some(_) => i += 1,
            }
        }
        false
    }

    /// A slot for a just-accepted connection, closing a pending one if all are taken; `None`
    /// once the server stops.
    async fn admit(&self, stop: &mut watch::Receiver<bool>) -> Option<OwnedSemaphorePermit> {
        loop {
            if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
                return Some(permit);
            }
            // An evicted connection ends within a poll; one that just got its head ignores the
            // request, so wait briefly and pick the next stalled one. A connection not read from
            // yet becomes stalled (or served) within a poll too, so retry soon either way.
            let wait = if self.evict_oldest_stalled() { Duration::from_millis(50) } else { Duration::from_millis(200) };
            tokio::select! {
                permit = tokio::time::timeout(wait, Arc::clone(&self.permits).acquire_owned()) => {
                    if let Ok(Ok(permit)) = permit {
                        return Some(permit);
                    }
                }
                _ = stop.wait_for(|&s| s) => return None,
            }
        }
    }

    /// Waits until every connection has ended.
    async fn drained(&self) {
        let _ = self.permits.acquire_many(self.total).await;
    }
}

/// What each connection task needs.
#[derive(Clone)]
struct Context {
    router: Router,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
}

/// Accepts on `listener` and serves `router` on each connection (over TLS with `tls`) until
/// `stop` turns true; returns once every connection has ended.
///
/// # Errors
/// None today (accept errors are logged and retried); the type leaves room for fatal ones.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: Router,
    limits: ConnectionLimits,
    metrics: ConnectionMetrics,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let slots = Slots::new(limits.max_connections);
    let mut stopping = stop.clone();
    let context = Context { router, limits, metrics, tls, stop };
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopping.wait_for(|&s| s) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(permit) = slots.admit(&mut stopping).await else { break };
        let _ = stream.set_nodelay(true);
        let standing = slots.register();
        let stream = Watched { io: stream, standing: Arc::clone(&standing) };
        tokio::spawn(run(stream, ClientAddr(peer), standing, context.clone(), permit));
    }
    // Release the port before waiting for the connections.
    drop(listener);
    slots.drained().await;
    Ok(())
}

/// One connection from accept to close; holds its slot (`_permit`) throughout and counts as
/// open in the metrics meanwhile.
async fn run(
    stream: Watched<TcpStream>,
    peer: ClientAddr,
    standing: Arc<Standing>,
    cx: Context,
    _permit: OwnedSemaphorePermit,
) {
    let metrics = cx.metrics.clone();
    metrics.accepted();
    serve_connection(stream, peer, standing, cx).await;
    metrics.closed();
}

/// The TLS handshake when configured, then HTTP.
async fn serve_connection(stream: Watched<TcpStream>, peer: ClientAddr, standing: Arc<Standing>, mut cx: Context) {
    let first_head_by = Instant::now() + cx.limits.header_read_timeout;
    let Some(acceptor) = cx.tls.clone() else {
        return serve_http(stream, peer, &standing, cx, first_head_by).await;
    };
    let handshake = tokio::select! {
        biased;
        tls = tokio::time::timeout_at(first_head_by, acceptor.accept(stream)) => tls,
        () = standing.evict.notified() => return cx.metrics.closed_early(EarlyClose::Evicted),
        _ = cx.stop.wait_for(|&s| s) => return,
    };
    match handshake {
        Ok(Ok(tls)) => serve_http(tls, peer, &standing, cx, first_head_by).await,
        Ok(Err(e)) => {
            cx.metrics.closed_early(EarlyClose::TlsHandshake);
            tracing::debug!(error = %e, "TLS handshake failed");
        }
        Err(_) => {
            cx.metrics.closed_early(EarlyClose::TlsHandshake);
            tracing::debug!("TLS handshake timed out");
        }
    }
}

/// HTTP/1.1 on one connection: closed when pending past `first_head_by` or evicted while
/// pending; shut down gracefully when the server stops.
async fn serve_http<S>(io: S, peer: ClientAddr, standing: &Arc<Standing>, mut cx: Context, first_head_by: Instant)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let router = cx.router.clone();
    let body_limit = cx.limits.body_read_timeout;
    let seen = Arc::clone(standing);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        seen.served.store(true, Ordering::Release);
        let mut router = router.clone();
        let mut req = req.map(|body| axum::body::Body::new(TimedBody::new(body, body_limit)));
        req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        async move { Ok::<_, Infallible>(router.call(req).await.unwrap_or_else(|e| match e {})) }
    });
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(cx.limits.idle_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let first_head = tokio::time::sleep_until(first_head_by);
    tokio::pin!(first_head);
    let mut watching_first_head = true;
    loop {
        // Biased, connection first: a head that has arrived is parsed (and the connection
        // marked served) before an eviction request is looked at.
        tokio::select! {
            biased;
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut first_head, if watching_first_head => {
                if standing.is_pending() {
                    cx.metrics.closed_early(EarlyClose::HeaderTimeout);
                    tracing::debug!("no complete request head within the header read timeout; closing");
                    return;
                }
                watching_first_head = false;
            }
            () = standing.evict.notified() => {
                if standing.is_stalled() {
                    cx.metrics.closed_early(EarlyClose::Evicted);
                    tracing::debug!("closing a pending connection to make room for a new one");
                    return;
                }
            }
            _ = cx.stop.wait_for(|&s| s) => break,
        }
    }
    // A connection still without a complete head has nothing to finish: close it now rather
    // than let a slow client hold up the shutdown until the idle timeout.
    if standing.is_pending() {
        return;
    }
    conn.as_mut().graceful_shutdown();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "connection ended with an error during shutdown");
    }
}
