//! Remote-write requests sent over keep-alive connections to any target, every refusal counted
//! (shared by the benches that load saltdb and VictoriaMetrics alike).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fleet::Body;
use crate::http_client::{excerpt, Conn, REMOTE_WRITE_HEADERS};

/// Most attempts at one write request refused with 429 or 5xx (or a broken connection).
const MAX_WRITE_ATTEMPTS: u32 = 20;

/// One batch of requests sent to a target.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sent {
    pub(crate) seconds: f64,
    pub(crate) accepted: u64,
    pub(crate) rejected: u64,
    /// Attempts repeated after a 429, a 5xx or a broken connection.
    pub(crate) retried: u64,
    pub(crate) errors: Vec<String>,
}

impl Sent {
    pub(crate) fn add(&mut self, other: &Self) {
        self.seconds += other.seconds;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.retried += other.retried;
        self.errors.extend(other.errors.iter().take(10usize.saturating_sub(self.errors.len())).cloned());
    }

    pub(crate) fn rate(&self) -> f64 {
        self.accepted as f64 / self.seconds.max(1e-9)
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "seconds": self.seconds, "accepted_samples": self.accepted, "rejected_samples": self.rejected,
            "retried_requests": self.retried, "samples_per_second": self.rate(), "errors": self.errors,
        })
    }
}

/// Why a write request failed for good.
enum WriteError {
    /// Counted, and the next request goes on.
    Refused(String),
    /// The target is gone or stuck: the remaining requests are not sent.
    Broken(String),
}

/// Sends one write request, retrying a 429, a 5xx or a broken connection (with backoff).
fn post_write(
    conn: &mut Option<Conn>,
    to: (SocketAddr, Duration),
    body: &Body,
    retried: &AtomicU64,
) -> Result<(), WriteError> {
    let mut last = String::new();
    for attempt in 0..MAX_WRITE_ATTEMPTS {
        if attempt > 0 {
            retried.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100 * u64::from(attempt.min(10))));
        }
        if conn.is_none() {
            match Conn::try_connect(to.0, Some(to.1)) {
                Ok(c) => *conn = Some(c),
                Err(e) => {
                    last = format!("connect: {e}");
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        match c.try_request("POST", "/api/v1/write", &REMOTE_WRITE_HEADERS, &body.bytes) {
            Ok((status, _)) if (200..300).contains(&status) => return Ok(()),
            Ok((status, text)) if status == 429 || status >= 500 => last = format!("HTTP {status}: {}", excerpt(&text)),
            Ok((status, text)) => return Err(WriteError::Refused(format!("HTTP {status}: {}", excerpt(&text)))),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {
                return Err(WriteError::Broken(format!("no answer within {:?}", to.1)));
            }
            Err(e) => {
                *conn = None;
                last = e.to_string();
            }
        }
    }
    Err(WriteError::Broken(format!("gave up after {MAX_WRITE_ATTEMPTS} attempts: {last}")))
}

/// Sends `bodies` as remote-write requests to `addr` over `concurrency` keep-alive connections,
/// in order (each connection takes the next body); times the whole batch. A 429, a 5xx or a
/// broken connection is retried with backoff; every request is bounded by `timeout`.
pub(crate) fn send(addr: SocketAddr, timeout: Duration, bodies: &[Body], concurrency: usize) -> Sent {
    let (accepted, rejected, retried) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let broken = AtomicBool::new(false);
    let errors = Mutex::new(Vec::new());
    let note = |e: String| {
        if let Ok(mut errors) = errors.lock() {
            if errors.len() < 10 {
                errors.push(e);
            }
        }
    };
    let start = Instant::now();
    crate::parallel(bodies.len(), concurrency.max(1), |i| {
        thread_local! { static CONN: std::cell::RefCell<Option<Conn>> = const { std::cell::RefCell::new(None) }; }
        let Some(body) = bodies.get(i) else { return };
        if broken.load(Ordering::Relaxed) {
            rejected.fetch_add(body.samples, Ordering::Relaxed);
            return;
        }
        let outcome = CONN.with(|c| post_write(&mut c.borrow_mut(), (addr, timeout), body, &retried));
        match outcome {
            Ok(()) => {
                accepted.fetch_add(body.samples, Ordering::Relaxed);
            }
            Err(WriteError::Refused(e)) => {
                rejected.fetch_add(body.samples, Ordering::Relaxed);
                note(e);
            }
            Err(WriteError::Broken(e)) => {
                rejected.fetch_add(body.samples, Ordering::Relaxed);
                if !broken.swap(true, Ordering::Relaxed) {
                    note(format!("{e} (the remaining requests were not sent)"));
                }
            }
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    Sent {
        seconds,
        accepted: accepted.into_inner(),
        rejected: rejected.into_inner(),
        retried: retried.into_inner(),
        errors: errors.into_inner().unwrap_or_default(),
    }
}
