//! Sending alerts to Alertmanager, as Prometheus' notifier (`notifier/notifier.go`) sends them.
//!
//! [`Notifier::send`] takes the alerts a group's evaluation found due
//! ([`crate::rules::group::Outgoing`]), turns them into Alertmanager's v2 alerts ([`payload`]:
//! external labels added, generator URL, RFC 3339 times) and queues them without blocking. One
//! background thread (`sender`) drains the queue in batches of at most 64 and posts each batch
//! to every configured Alertmanager ([`client`]) at once.
//!
//! - [`queue`]: the bounded queue; when full, the oldest alerts are dropped.
//! - `outbox`: the queue shared between the caller and the thread, and the stop handshake.
//! - [`client`]: one Alertmanager's `POST /api/v2/alerts`, with bounded retries.
//! - [`metrics`]: `saltdb_notifications_*`, Prometheus' `prometheus_notifications_*`.
//!
//! Where it differs from Prometheus 2.42: a post that may succeed later is tried again within
//! the timeout (Prometheus tries once); [`Notifier::stop`] sends what is queued for a bounded
//! time (Prometheus 2.42 drops it; 3.x drains it); Alertmanagers are static URLs (no service
//! discovery, no relabelling, no TLS or authentication); `errors_total` counts the alerts of a
//! failed post, as Prometheus does since 3.1 (2.42 counted the post); there is no latency
//! summary.

pub mod client;
pub mod metrics;
mod outbox;
pub mod payload;
pub mod queue;
mod sender;

#[cfg(test)]
mod fake_alertmanager;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::rules::group::Outgoing;

pub use client::{SendError, UrlError};
pub use metrics::NotifierMetrics;

use client::AlertmanagerClient;
use outbox::Outbox;
use payload::PostableAlert;
use sender::Sender;

/// Prometheus' `--alertmanager.notification-queue-capacity` default.
pub const DEFAULT_QUEUE_CAPACITY: usize = 10_000;

/// Prometheus' default Alertmanager `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Notifier::stop`] keeps sending what is queued, by default.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and how alerts are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifierConfig {
    /// Alertmanager base URLs (`http://127.0.0.1:9093`, optionally with a path prefix); every
    /// alert goes to each.
    pub alertmanagers: Vec<String>,
    /// Labels added to every alert that does not have them.
    pub external_labels: BTreeMap<String, String>,
    /// The server's external URL, the start of each alert's generator URL.
    pub external_url: String,
    /// Most alerts waiting to be sent (Prometheus' default 10,000).
    pub queue_capacity: usize,
    /// How long one post to one Alertmanager may take, retries included (default 10 s).
    pub timeout: Duration,
    /// How long [`Notifier::stop`] keeps sending what is queued (default 5 s).
    pub drain_timeout: Duration,
}

impl Default for NotifierConfig {
    fn default() -> Self {
        Self {
            alertmanagers: Vec::new(),
            external_labels: BTreeMap::new(),
            external_url: String::new(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            timeout: DEFAULT_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// A notifier that could not start.
#[derive(Debug, thiserror::Error)]
pub enum NotifierError {
    /// An Alertmanager URL it cannot post to.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The sender thread could not be started.
    #[error("starting the alert sender thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Queues alerts and sends them to Alertmanager from a background thread.
#[derive(Debug)]
pub struct Notifier {
    outbox: Arc<Outbox>,
    external_labels: BTreeMap<String, String>,
    external_url: String,
    alertmanagers: Vec<String>,
    drain_timeout: Duration,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Notifier {
    /// Starts a notifier with `config`, counting into `metrics` (see [`NotifierMetrics`]).
    ///
    /// With no Alertmanager, alerts are queued and counted as dropped, as Prometheus does.
    ///
    /// # Errors
    /// [`NotifierError`]: an Alertmanager URL is not `http://host[:port][/prefix]`, or the
    /// thread could not start.
    pub fn new(config: NotifierConfig, metrics: NotifierMetrics) -> Result<Self, NotifierError> {
        let clients = config.alertmanagers.iter().map(|u| AlertmanagerClient::new(u)).collect::<Result<Vec<_>, _>>()?;
        let alertmanagers: Vec<String> = clients.iter().map(|c| c.url().to_owned()).collect();
        let capacity = config.queue_capacity.max(1);
        metrics.configured(capacity, &alertmanagers);
        let outbox = Arc::new(Outbox::new(capacity, metrics.clone()));
        let sender = Sender { outbox: Arc::clone(&outbox), clients, metrics, timeout: config.timeout };
        let thread = std::thread::Builder::new()
            .name("alert-notifier".to_owned())
            .spawn(move || sender.run())
            .map_err(NotifierError::Thread)?;
        Ok(Self {
            outbox,
            external_labels: config.external_labels,
            external_url: config.external_url,
            alertmanagers,
            drain_timeout: config.drain_timeout,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `alerts` for every Alertmanager; never waits for the network. When the queue is
    /// full the oldest alerts are dropped (and counted).
    pub fn send(&self, alerts: Vec<Outgoing>) {
        let postable =
            alerts.iter().map(|a| PostableAlert::new(a, &self.external_labels, &self.external_url)).collect();
        self.outbox.push(postable);
    }

    /// The URLs alerts are posted to (`http://host:9093/api/v2/alerts`), as Prometheus lists its
    /// active Alertmanagers.
    pub fn alertmanagers(&self) -> &[String] {
        &self.alertmanagers
    }

    /// Sends what is queued for at most the drain timeout, then ends the thread. Alerts sent
    /// afterwards, and those still queued at the deadline, are dropped. Returns at the deadline
    /// even if a post is still under way (the thread then ends when it does). Only the first call
    /// waits; later ones (and [`Drop`] after it) return at once.
    pub fn stop(&self) {
        let Some(thread) = self.thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() else {
            return;
        };
        if !self.outbox.stop(self.drain_timeout) {
            tracing::warn!(
                timeout = ?self.drain_timeout,
                "alert notifier: a post to Alertmanager outlasted the drain timeout; not waiting for it"
            );
        } else if thread.join().is_err() {
            tracing::error!("the alert sender thread panicked");
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests;
