//! Open connections: the accept loop, the bound on how many are open at once, and the timeouts
//! that close connections holding a slot without using it.
//!
//! A slow-client flood (connections that send part of a request head, or nothing, and wait)
//! must neither exhaust file descriptors nor lock out normal clients:
//!
//! - at most `max_connections` are open; beyond that, accepting a new connection first closes
//!   the oldest *stalled* one: pending (no complete request head yet), waiting on an empty
//!   socket (everything it sent has been read, and it was not a complete head), and either
//!   the last to speak (it sent part of a head and went quiet) or quiet for [`STALL_GRACE`]
//!   (it has sent nothing yet, or nothing since the server last wrote to it, as in a TLS
//!   handshake). Only when none is stalled does accepting wait, for a connection to end or to
//!   become stalled. A connection not yet read from is never evicted: its head may be sitting in
//!   the socket, and closing it would reset a normal client that a busy server had simply not
//!   polled yet. Nor is one that is silent only for a moment after connecting: a normal client
//!   sends its request right away, but a busy client machine or a lost packet can delay it, and
//!   under a flood the oldest stalled connection is reached within milliseconds;
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// How long a pending connection that is not the last to have spoken (it has sent nothing, or
/// nothing since the server wrote to it) must wait on an empty socket before it may be closed
/// to make room for a new one: the pause a normal client may take between connecting and
/// sending its request, or in a TLS handshake, without being taken for a slow client: longer
/// than Linux's shortest retransmission timeout (200 ms), so one lost packet is forgiven. A
/// flood of connections that send nothing is turned over at most `max_connections` per grace
/// (about 210 a second at 64 connections, 1,700 at the default 512).
pub const STALL_GRACE: Duration = Duration::from_millis(300);

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
struct Standing {
    /// When the connection was accepted; `waiting_since` counts from here.
    accepted: Instant,
    /// A complete request head arrived (the connection is no longer pending).
    served: AtomicBool,
    /// Microseconds after `accepted` at which a read of the socket first found it empty, since
    /// bytes last arrived; [`NOT_WAITING`] before the socket was ever read and while reads
    /// return bytes.
    waiting_since: AtomicU64,
    /// The client spoke last: a read returned bytes and nothing was written to it since.
    spoke_last: AtomicBool,
    /// Asks a pending connection to close so that a new one can have its slot.
    evict: Notify,
}

/// `Standing::waiting_since` when the last read returned bytes (or none was made yet).
const NOT_WAITING: u64 = u64::MAX;

impl Standing {
    fn new() -> Self {
        Self {
            accepted: Instant::now(),
            served: AtomicBool::new(false),
            waiting_since: AtomicU64::new(NOT_WAITING),
            spoke_last: AtomicBool::new(false),
            evict: Notify::new(),
        }
    }

    fn is_pending(&self) -> bool {
        !self.served.load(Ordering::Acquire)
    }

    /// Records the outcome of a read: empty (`pending`), bytes (`got` of them) or not.
    fn read_polled(&self, pending: bool, got: usize) {
        if got > 0 {
            self.spoke_last.store(true, Ordering::Release);
        }
        if pending {
            let now = u64::try_from(self.accepted.elapsed().as_micros()).unwrap_or(NOT_WAITING - 1);
            // Keeps the first empty read of a run of them.
            let _ = self.waiting_since.compare_exchange(NOT_WAITING, now, Ordering::AcqRel, Ordering::Acquire);
        } else {
            self.waiting_since.store(NOT_WAITING, Ordering::Release);
        }
    }

    /// Records a write to the client: whatever it says next answers the server.
    fn written(&self) {
        self.spoke_last.store(false, Ordering::Release);
    }

    /// How much longer this pending connection must wait on an empty socket before it is
    /// stalled: zero when it is, `None` when it is not waiting (or no longer pending).
    fn stalled_in(&self, now: Instant) -> Option<Duration> {
        let since = self.waiting_since.load(Ordering::Acquire);
        if since == NOT_WAITING || !self.is_pending() {
            return None;
        }
        if self.spoke_last.load(Ordering::Acquire) {
            return Some(Duration::ZERO);
        }
        let stalled_at = self.accepted + Duration::from_micros(since) + STALL_GRACE;
        Some(stalled_at.saturating_duration_since(now))
    }

    /// Pending, waiting on an empty socket, and either the last to speak or quiet for
    /// [`STALL_GRACE`]: whatever it sent was read and was not a complete request head. Only
    /// stalled connections are evicted.
    fn is_stalled(&self) -> bool {
        self.stalled_in(Instant::now()).is_some_and(|d| d.is_zero())
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
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        self.standing.read_polled(polled.is_pending(), buf.filled().len().saturating_sub(before));
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.standing.written();
        }
        polled
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
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.standing.written();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// What [`Slots::evict_oldest_stalled`] did.
enum Eviction {
    /// A stalled connection was asked to close.
    Asked,
    /// None is stalled; `soonest` is when the first waiting one will be, if any waits.
    NoneStalled { soonest: Option<Duration> },
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
        let standing = Arc::new(Standing::new());
        let mut queue = self.queue();
        if queue.len() >= 2 * self.total as usize {
            queue.retain(|w| w.upgrade().is_some_and(|s| s.is_pending()));
        }
        queue.push_back(Arc::downgrade(&standing));
        standing
    }

    /// Asks the oldest stalled connection to close. Ended and served connections are dropped
    /// from the queue on the way.
    fn evict_oldest_stalled(&self) -> Eviction {
        let now = Instant::now();
        let mut queue = self.queue();
        let mut soonest: Option<Duration> = None;
        let mut i = 0;
        while i < queue.len() {
            let Some(standing) = queue[i].upgrade().filter(|s| s.is_pending()) else {
                queue.remove(i);
                continue;
            };
            match standing.stalled_in(now) {
                Some(d) if d.is_zero() => {
                    queue.remove(i);
                    standing.evict.notify_one();
                    return Eviction::Asked;
                }
                Some(d) => soonest = Some(soonest.map_or(d, |s| s.min(d))),
                None => {}
            }
            i += 1;
        }
        Eviction::NoneStalled { soonest }
    }

    /// A slot for a just-accepted connection, closing a pending one if all are taken; `None`
    /// once the server stops.
    async fn admit(&self, stop: &mut watch::Receiver<bool>) -> Option<OwnedSemaphorePermit> {
        loop {
            if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
                return Some(permit);
            }
            // An evicted connection ends within a poll; one that just got its head ignores the
            // request, so wait briefly and pick the next stalled one. Otherwise retry when the
            // first waiting connection becomes stalled, or soon (a connection not read from yet
            // starts waiting within a poll).
            let wait = match self.evict_oldest_stalled() {
                Eviction::Asked => Duration::from_millis(50),
                Eviction::NoneStalled { soonest } => {
                    soonest.map_or(Duration::from_millis(20), |d| d.clamp(Duration::from_millis(1), STALL_GRACE))
                }
            };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_stalled_at_once_after_part_of_a_head_and_after_the_grace_when_silent() {
        let s = Standing::new();
        let now = Instant::now();
        assert_eq!(s.stalled_in(now), None, "never read: not waiting");
        // Connected and silent: stalled only after the grace.
        s.read_polled(true, 0);
        let left = s.stalled_in(now).expect("waiting");
        assert!(left > STALL_GRACE / 2 && left < STALL_GRACE * 2, "{left:?}");
        assert_eq!(s.stalled_in(now + STALL_GRACE * 2), Some(Duration::ZERO));
        // Part of a head, then quiet: stalled at once.
        s.read_polled(false, 10);
        assert_eq!(s.stalled_in(now), None, "bytes arrived: not waiting");
        s.read_polled(true, 0);
        assert_eq!(s.stalled_in(now), Some(Duration::ZERO));
        // The server wrote (a TLS handshake): the client's silence is forgiven for the grace.
        s.written();
        assert!(s.stalled_in(now).is_some_and(|d| !d.is_zero()));
        // A complete head: never stalled.
        s.served.store(true, Ordering::Release);
        assert_eq!(s.stalled_in(now + STALL_GRACE * 2), None);
    }
}
