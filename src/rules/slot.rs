//! When a group is evaluated: every `interval`, at a phase fixed by a hash of the group's file
//! and name, as Prometheus places it (`Group.EvalTimestamp`), so that two evaluators of the
//! same group (saltdb and Prometheus, or two saltdb nodes) pick the same timestamps.
//!
//! Times here are nanoseconds since the Unix epoch, as Prometheus computes them; samples are
//! written at the millisecond the slot falls in.

use xxhash_rust::xxh64::xxh64;

/// Prometheus' hash of the label set `{file=<file>, name=<name>}` (xxhash64 of each name and
/// value followed by `0xff`, in label name order).
pub fn group_hash(file: &str, name: &str) -> u64 {
    let mut b = Vec::with_capacity(file.len() + name.len() + 12);
    for (k, v) in [("file", file), ("name", name)] {
        b.extend_from_slice(k.as_bytes());
        b.push(0xff);
        b.extend_from_slice(v.as_bytes());
        b.push(0xff);
    }
    xxh64(&b, 0)
}

/// The group's latest slot at or before `now_ns`.
///
/// # Panics
/// Never: a non-positive interval is treated as one nanosecond.
pub fn slot_at_or_before(hash: u64, interval_ns: i64, now_ns: i64) -> i64 {
    let interval = interval_ns.max(1);
    let offset = (hash % interval.unsigned_abs()) as i64;
    let adjusted = now_ns - offset;
    adjusted - adjusted.rem_euclid(interval) + offset
}

/// Slots missed when the evaluation of slot `last_ns` ends at `now_ns`: the next slot to
/// evaluate and how many were skipped (Prometheus counts them in
/// `prometheus_rule_group_iterations_missed_total`).
pub fn next_slot(last_ns: i64, interval_ns: i64, now_ns: i64) -> (i64, i64) {
    let interval = interval_ns.max(1);
    let missed = ((now_ns - last_ns) / interval - 1).max(0);
    (last_ns + (missed + 1) * interval, missed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn slots_are_interval_apart_at_the_hash_phase(hash in any::<u64>(), interval_s in 1i64..3600, now in 0i64..4_000_000_000_000_000_000) {
            let interval = interval_s * 1_000_000_000;
            let slot = slot_at_or_before(hash, interval, now);
            prop_assert!(slot <= now && now - slot < interval);
            prop_assert_eq!(slot.rem_euclid(interval), (hash % interval as u64) as i64);
        }

        #[test]
        fn the_next_slot_follows_the_latest_passed(last in 0i64..1_000_000_000_000, interval in 1i64..1_000_000, late in 0i64..10_000_000) {
            let now = last + interval + late;
            let (next, missed) = next_slot(last, interval, now);
            prop_assert_eq!(next, last + (missed + 1) * interval);
            prop_assert!(next <= now && now - next < interval);
        }
    }
}
