//! The request-body deadline: a request's body must arrive completely within
//! `--body-read-timeout` of its head, so a client that declares a body and then sends it a byte
//! at a time (or not at all) cannot hold a connection and a write slot indefinitely.
//!
//! The timer costs nothing while the body flows: it is armed the first time the body has no
//! data ready, and only checked while it has none. A handler that never reads the body is never
//! timed out by it (the connection's own timeouts apply).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error a body reports once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {}s (--body-read-timeout)", .0.as_secs_f64())]
pub struct BodyReadTimedOut(pub Duration);

/// Finds a [`BodyReadTimedOut`] in an error's source chain (the body error as a handler sees
/// it, wrapped by axum).
pub fn timed_out<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyReadTimedOut> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<BodyReadTimedOut>() {
            return Some(t);
        }
        next = e.source();
    }
    None
}

/// A request body that fails with [`BodyReadTimedOut`] once `deadline` has passed while it
/// waits for data.
pub struct TimedBody<B> {
    inner: B,
    deadline: Instant,
    limit: Duration,
    /// Armed on the first wait for data.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> TimedBody<B> {
    /// `inner` must be complete within `limit` from now.
    pub fn new(inner: B, limit: Duration) -> Self {
        Self { inner, deadline: Instant::now() + limit, limit, timer: None }
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => {
                let deadline = this.deadline;
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyReadTimedOut(this.limit))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    #[tokio::test]
    async fn a_stalled_body_fails_at_its_deadline_and_a_flowing_one_completes() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let stream = tokio_stream_from(rx);
        let mut body = TimedBody::new(StreamBody::new(stream), Duration::from_millis(100));
        tx.send(Ok(Frame::data(Bytes::from_static(b"abc")))).await.ok();
        let first = body.frame().await.and_then(Result::ok).and_then(|f| f.into_data().ok());
        assert_eq!(first.as_deref(), Some(&b"abc"[..]));
        // Nothing more arrives: the deadline passes.
        let err = body.frame().await.and_then(Result::err).map(|e| timed_out(&*e).map(|t| t.0));
        assert_eq!(err, Some(Some(Duration::from_millis(100))));
        drop(tx);

        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let body = TimedBody::new(StreamBody::new(tokio_stream_from(rx)), Duration::from_millis(100));
        tx.send(Ok(Frame::data(Bytes::from_static(b"xyz")))).await.ok();
        drop(tx);
        let all = body.collect().await.map(|c| c.to_bytes());
        assert_eq!(all.ok().as_deref(), Some(&b"xyz"[..]));
    }

    /// A receiver as a stream (without pulling in tokio-stream).
    fn tokio_stream_from<T>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> + Unpin {
        Box::pin(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}
