//! The queue shared by the evaluations that fill it and the sender thread that drains it, with
//! the signals between them: alerts arrived, stop requested (with a drain deadline), sender done.
//!
//! Every alert that leaves the queue other than in a batch is counted as dropped: overflow,
//! alerts still queued at the drain deadline, alerts pushed after a stop.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::metrics::NotifierMetrics;
use super::payload::PostableAlert;
use super::queue::AlertQueue;

/// The queue and its signals.
#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    /// Alerts arrived or a stop was requested.
    wake: Condvar,
    /// The sender finished.
    done: Condvar,
    metrics: NotifierMetrics,
}

#[derive(Debug)]
struct State {
    queue: AlertQueue<PostableAlert>,
    /// Set by [`Outbox::stop`]: the time after which queued alerts are dropped.
    drain_until: Option<Instant>,
    finished: bool,
}

/// A batch to send, and the time its posts must not outlast (the drain deadline once stopping).
#[derive(Debug)]
pub struct Batch {
    /// At most [`super::queue::MAX_BATCH`] alerts, oldest first.
    pub alerts: Vec<PostableAlert>,
    /// `None` while running.
    pub drain_until: Option<Instant>,
}

impl Outbox {
    /// An empty outbox for at most `capacity` alerts, counting into `metrics`.
    pub fn new(capacity: usize, metrics: NotifierMetrics) -> Self {
        let state = State { queue: AlertQueue::new(capacity), drain_until: None, finished: false };
        Self { state: Mutex::new(state), wake: Condvar::new(), done: Condvar::new(), metrics }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `alerts`, dropping the oldest beyond the capacity; after a stop, drops them all.
    pub fn push(&self, alerts: Vec<PostableAlert>) {
        if alerts.is_empty() {
            return;
        }
        let mut state = self.lock();
        if state.drain_until.is_some() {
            drop(state);
            tracing::warn!(num_dropped = alerts.len(), "alert notifier stopped, dropping alerts");
            self.metrics.dropped(alerts.len());
            return;
        }
        let dropped = state.queue.push(alerts);
        self.metrics.queue_length(state.queue.len());
        drop(state);
        if dropped > 0 {
            tracing::warn!(num_dropped = dropped, "alert notification queue full, dropping alerts");
            self.metrics.dropped(dropped);
        }
        self.wake.notify_one();
    }

    /// Waits for the next batch. `None` once stopping and the queue is empty, or the drain
    /// deadline has passed (what is left is then dropped).
    pub fn next_batch(&self) -> Option<Batch> {
        let mut state = self.lock();
        while state.queue.is_empty() && state.drain_until.is_none() {
            state = self.wake.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let drain_until = state.drain_until;
        if drain_until.is_some_and(|d| Instant::now() >= d) {
            let left = state.queue.take_all().len();
            self.metrics.queue_length(0);
            drop(state);
            if left > 0 {
                tracing::warn!(num_dropped = left, "alert notifier stopped before the queue was sent, dropping alerts");
                self.metrics.dropped(left);
            }
            return None;
        }
        let alerts = state.queue.next_batch();
        self.metrics.queue_length(state.queue.len());
        (!alerts.is_empty()).then_some(Batch { alerts, drain_until })
    }

    /// Asks the sender to send what is queued within `drain` and then end, and waits for that
    /// (at most `drain`). True when the sender has finished.
    pub fn stop(&self, drain: Duration) -> bool {
        let deadline = Instant::now() + drain;
        let mut state = self.lock();
        state.drain_until.get_or_insert(deadline);
        self.wake.notify_all();
        while !state.finished {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { break };
            state = self.done.wait_timeout(state, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
        state.finished
    }

    /// The sender has ended.
    pub fn finish(&self) {
        self.lock().finished = true;
        self.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn alert(n: usize) -> PostableAlert {
        PostableAlert {
            annotations: BTreeMap::new(),
            ends_at: String::new(),
            starts_at: None,
            generator_url: String::new(),
            labels: [("n".to_owned(), n.to_string())].into(),
            tenant: None,
        }
    }

    #[test]
    fn overflow_drops_the_oldest_and_counts_them() {
        let metrics = NotifierMetrics::detached();
        let outbox = Outbox::new(100, metrics.clone());
        outbox.push((0..70).map(alert).collect());
        outbox.push((70..150).map(alert).collect());
        assert_eq!((metrics.dropped_count(), metrics.queue_length_now()), (50, 100));
        let first = outbox.next_batch().unwrap();
        assert_eq!(first.alerts[0].labels["n"], "50", "the 50 oldest went");
        assert_eq!((first.alerts.len(), metrics.queue_length_now()), (64, 36));
    }

    #[test]
    fn a_stopped_outbox_drops_what_is_left_and_what_comes() {
        let metrics = NotifierMetrics::detached();
        let outbox = Outbox::new(100, metrics.clone());
        outbox.push((0..3).map(alert).collect());
        assert!(!outbox.stop(Duration::ZERO), "no sender finished");
        assert!(outbox.next_batch().is_none(), "the drain deadline has passed");
        outbox.push(vec![alert(9)]);
        assert_eq!((metrics.dropped_count(), metrics.queue_length_now()), (4, 0));
    }

    #[test]
    fn a_stopping_outbox_still_hands_out_batches_before_its_deadline() {
        let outbox = Outbox::new(100, NotifierMetrics::detached());
        outbox.push((0..3).map(alert).collect());
        std::thread::scope(|s| {
            s.spawn(|| outbox.stop(Duration::from_secs(10)));
            while outbox.lock().drain_until.is_none() {
                std::thread::yield_now();
            }
            let batch = outbox.next_batch().unwrap();
            assert_eq!(batch.alerts.len(), 3);
            assert!(batch.drain_until.is_some());
            assert!(outbox.next_batch().is_none(), "empty and stopping");
            outbox.finish();
        });
    }
}
