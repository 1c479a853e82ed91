//! The sender thread: takes batches from the [`Outbox`] and posts each to every Alertmanager at
//! once, as Prometheus' `sendAll` does:
//!
//! - every Alertmanager counts the batch's alerts as sent, and as errors when its post failed;
//! - a batch no Alertmanager took (or, with none configured, every batch) counts as dropped;
//! - each post has the configured timeout, cut to the drain deadline once stopping;
//! - a batch holding alerts of several tenants is posted as one request per tenant, each with
//!   its tenant in `X-Scope-OrgID` (as Mimir's ruler sends them), in the batch's order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::AlertmanagerClient;
use super::metrics::NotifierMetrics;
use super::outbox::Outbox;
use super::payload::PostableAlert;

/// What the sender thread owns.
#[derive(Debug)]
pub struct Sender {
    /// Where batches come from.
    pub outbox: Arc<Outbox>,
    /// Every Alertmanager.
    pub clients: Vec<AlertmanagerClient>,
    /// Counters.
    pub metrics: NotifierMetrics,
    /// How long one post (with its retries) may take.
    pub timeout: Duration,
}

/// Tells the outbox the sender has ended, however it ends (a panic included).
struct Finished<'a>(&'a Outbox);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

impl Sender {
    /// Sends batches until the outbox says stop.
    pub fn run(self) {
        let _finished = Finished(&self.outbox);
        while let Some(batch) = self.outbox.next_batch() {
            for (tenant, alerts) in by_tenant(&batch.alerts) {
                self.send_all(&alerts, tenant, batch.drain_until);
            }
        }
    }

    /// Posts `alerts` of `tenant` to every Alertmanager; true when at least one took them.
    fn send_all(&self, alerts: &[&PostableAlert], tenant: Option<&str>, drain_until: Option<Instant>) -> bool {
        let count = alerts.len();
        let body = match serde_json::to_vec(alerts) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "encoding alerts for Alertmanager API v2 failed");
                self.metrics.dropped(count);
                return false;
            }
        };
        let mut deadline = Instant::now() + self.timeout;
        if let Some(d) = drain_until {
            deadline = deadline.min(d);
        }
        let taken = match self.clients.as_slice() {
            [one] => usize::from(self.send_one(one, &body, tenant, count, deadline)),
            many => std::thread::scope(|s| {
                let body = body.as_slice();
                let posts: Vec<_> =
                    many.iter().map(|c| s.spawn(move || self.send_one(c, body, tenant, count, deadline))).collect();
                posts.into_iter().map(|p| p.join()).filter(|r| matches!(r, Ok(true))).count()
            }),
        };
        if taken == 0 {
            self.metrics.dropped(count);
        }
        taken > 0
    }

    fn send_one(
        &self,
        client: &AlertmanagerClient,
        body: &[u8],
        tenant: Option<&str>,
        count: usize,
        deadline: Instant,
    ) -> bool {
        let result = client.post(body, tenant, deadline);
        self.metrics.sent(client.url(), count);
        match result {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(alertmanager = client.url(), count, error = %e, "error sending alerts");
                self.metrics.errors(client.url(), count);
                false
            }
        }
    }
}

/// The alerts of a batch by tenant, each tenant's in the batch's order, tenants in the order of
/// their first alert.
fn by_tenant(alerts: &[PostableAlert]) -> Vec<(Option<&str>, Vec<&PostableAlert>)> {
    let mut out: Vec<(Option<&str>, Vec<&PostableAlert>)> = Vec::new();
    for a in alerts {
        let tenant = a.tenant.as_ref().map(crate::tenant::TenantId::as_str);
        match out.iter_mut().find(|(t, _)| *t == tenant) {
            Some((_, list)) => list.push(a),
            None => out.push((tenant, vec![a])),
        }
    }
    out
}
