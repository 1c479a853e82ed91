//! Per-query caches keyed by label-set identity ([`Labels::addr`]) instead of by value.
//!
//! A range query evaluates every node once per step, and most nodes see the same label sets
//! (the same `Arc`s, cloned from the preloaded series) at every step. Hashing a pointer is
//! far cheaper than hashing and comparing label strings, and projecting labels for grouping
//! once per series instead of once per step avoids allocations.
//!
//! Invariant: every entry holds a clone of the labels it is keyed by, so the address cannot be
//! freed and reused by a different set while the entry exists.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::labels::Labels;

/// Hasher for addresses: one multiply, folded so the bucket bits see the high bits too.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^ (h >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).rotate_left(5);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 ^= n as u64;
    }
}

/// A map keyed by addresses.
pub(crate) type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

struct Entry<V> {
    /// Keeps the keyed allocation alive (see the module invariant).
    _labels: Labels,
    value: V,
    /// The round in which the entry was last used.
    round: u64,
}

/// Values computed once per label set, looked up by identity.
///
/// Label sets created anew at every step (e.g. by a binary operator) never hit; entries not
/// used during a round are dropped once they outnumber the used ones, so such churn costs
/// memory proportional to one round, not to the whole query.
pub(crate) struct IdentityCache<V> {
    map: AddrMap<Entry<V>>,
    round: u64,
    used: usize,
}

impl<V> Default for IdentityCache<V> {
    fn default() -> Self {
        Self { map: AddrMap::default(), round: 0, used: 0 }
    }
}

impl<V> IdentityCache<V> {
    /// The value for `labels`, computed by `f` on the first sight of this allocation.
    pub fn get_or_insert_with(&mut self, labels: &Labels, f: impl FnOnce(&Labels) -> V) -> &V {
        let round = self.round;
        self.used += 1;
        let e =
            self.map.entry(labels.addr()).or_insert_with(|| Entry { _labels: labels.clone(), value: f(labels), round });
        e.round = round;
        &e.value
    }

    /// Ends a round (one evaluation of the owning node), sweeping entries unused in it when
    /// they are the majority.
    pub fn end_round(&mut self) {
        if self.map.len() > 2 * self.used + 64 {
            let round = self.round;
            self.map.retain(|_, e| e.round == round);
        }
        self.round += 1;
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_by_identity_and_sweeps_churn() {
        let mut c: IdentityCache<usize> = IdentityCache::default();
        let a = Labels::from_pairs([("a", "1")]).unwrap_or_default();
        let mut calls = 0;
        for _ in 0..3 {
            let v = *c.get_or_insert_with(&a, |_| {
                calls += 1;
                7
            });
            assert_eq!(v, 7);
            c.end_round();
        }
        assert_eq!(calls, 1);
        for i in 0..1000 {
            let fresh = Labels::from_pairs([("b", i.to_string())]).unwrap_or_default();
            c.get_or_insert_with(&a, |_| 0);
            c.get_or_insert_with(&fresh, |_| 1);
            c.end_round();
        }
        assert!(c.map.len() < 100, "churned entries are swept");
    }
}
