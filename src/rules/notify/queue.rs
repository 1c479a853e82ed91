//! The bounded queue between the rule evaluations and the sender, as Prometheus' notifier keeps
//! it: when alerts do not fit, the oldest ones go (newer alerts carry newer state), and batches
//! leave from the front, at most [`MAX_BATCH`] alerts each.

use std::collections::VecDeque;

/// Most alerts in one request to an Alertmanager (Prometheus' `maxBatchSize`).
pub const MAX_BATCH: usize = 64;

/// Alerts waiting to be sent, oldest first, never more than the capacity.
#[derive(Debug)]
pub struct AlertQueue<T> {
    items: VecDeque<T>,
    capacity: usize,
}

impl<T> AlertQueue<T> {
    /// An empty queue holding at most `capacity` alerts (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self { items: VecDeque::with_capacity(capacity.min(MAX_BATCH * 4)), capacity }
    }

    /// How many alerts it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many alerts wait.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no alert waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends `alerts` and drops the oldest alerts beyond the capacity (queued ones first, then
    /// the first of `alerts`); returns how many were dropped.
    pub fn push(&mut self, alerts: impl IntoIterator<Item = T>) -> usize {
        self.items.extend(alerts);
        let excess = self.items.len().saturating_sub(self.capacity);
        self.items.drain(..excess);
        excess
    }

    /// Takes the oldest alerts, at most [`MAX_BATCH`].
    pub fn next_batch(&mut self) -> Vec<T> {
        let n = self.items.len().min(MAX_BATCH);
        self.items.drain(..n).collect()
    }

    /// Takes every alert.
    pub fn take_all(&mut self) -> Vec<T> {
        self.items.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_the_oldest() {
        let mut q = AlertQueue::new(3);
        assert_eq!(q.push([1, 2]), 0);
        assert_eq!(q.push([3, 4, 5]), 2);
        assert_eq!(q.len(), 3);
        assert_eq!(q.next_batch(), [3, 4, 5]);
        assert!(q.is_empty());
    }

    #[test]
    fn more_alerts_than_the_capacity_at_once_keep_the_newest() {
        let mut q = AlertQueue::new(2);
        q.push([1]);
        assert_eq!(q.push([2, 3, 4, 5]), 3);
        assert_eq!(q.take_all(), [4, 5]);
    }

    #[test]
    fn batches_are_at_most_64_oldest_first() {
        let mut q = AlertQueue::new(10_000);
        q.push(0..150);
        let sizes: Vec<(usize, Option<i32>)> = std::iter::from_fn(|| {
            let b = q.next_batch();
            (!b.is_empty()).then(|| (b.len(), b.first().copied()))
        })
        .collect();
        assert_eq!(sizes, [(64, Some(0)), (64, Some(64)), (22, Some(128))]);
    }

    #[test]
    fn a_zero_capacity_holds_one() {
        let mut q = AlertQueue::new(0);
        assert_eq!((q.capacity(), q.push([1, 2])), (1, 1));
    }
}
