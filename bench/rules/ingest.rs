//! Loading a target: `--history` minutes of the fleet's scrapes before the start, sent in time
//! order as fast as the target takes them, then `--live` minutes more, each scrape sent once its
//! interval has passed, so that the data ends about when writing stops and the rules' 5-minute
//! windows are full then (the live part also gives a slow target time to work off the history).
//!
//! Both targets get the same scrapes, values included; each one's timeline starts on a multiple
//! of the evaluation interval (and of 15 s), so the two targets' data differ by a whole number of
//! intervals and an evaluation of one meets the same samples, at the same distances from its
//! timestamp, as the evaluation of the other at the same distance from the end of its data.

use std::time::Instant;

use super::target::Target;
use super::RulesArgs;
use crate::fleet::{Fleet, INTERVAL_MS};
use crate::sender::Sent;

/// When the scrapes are scheduled: scrape `k` at `first_ms + k * 15 s`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeline {
    pub(super) first_ms: i64,
}

/// Least common multiple.
fn lcm(a: i64, b: i64) -> i64 {
    let (mut x, mut y) = (a.max(1), b.max(1));
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a.max(1) / x * b.max(1)
}

impl Timeline {
    /// `history_ms` before now, on a multiple of the interval and of 15 s.
    pub(super) fn starting(history_ms: i64, interval_ms: i64) -> Self {
        let align = lcm(INTERVAL_MS, interval_ms);
        let start = chrono::Utc::now().timestamp_millis() - history_ms;
        Self { first_ms: start - start.rem_euclid(align) }
    }

    pub(super) fn base(self, k: usize) -> i64 {
        self.first_ms + k as i64 * INTERVAL_MS
    }
}

/// What loading a target took.
#[derive(Clone, Debug, Default)]
pub(super) struct Ingested {
    pub(super) sent: Sent,
    pub(super) scrapes: usize,
    /// Seconds from the first request to the last answer, building the requests and waiting for
    /// the live scrapes included.
    pub(super) wall_seconds: f64,
    /// Seconds until the history was written (its requests built and sent).
    pub(super) history_seconds: f64,
    /// After every sample (the end of the last scrape's interval).
    pub(super) end_ms: i64,
    /// How late the last scrape was sent, past its interval (a target too slow for the live part).
    pub(super) late_ms: i64,
}

/// Sends the timeline's scrapes, each once its whole interval is in the past, every timestamp
/// passed through `at`.
pub(super) fn load(target: &Target, args: &RulesArgs, tl: Timeline, at: &(dyn Fn(i64) -> i64 + Sync)) -> Ingested {
    let fleet = Fleet { metrics: args.metrics };
    let series = args.series / args.metrics * args.metrics;
    let scrapes = ((args.history_minutes + args.live_minutes) * 60_000 / INTERVAL_MS).max(1) as usize;
    let started = Instant::now();
    let mut out = Ingested { scrapes, end_ms: tl.base(scrapes), ..Ingested::default() };
    for k in 0..scrapes {
        let due = tl.base(k) + INTERVAL_MS;
        let now = chrono::Utc::now().timestamp_millis();
        if due > now {
            if out.history_seconds == 0.0 {
                out.history_seconds = started.elapsed().as_secs_f64();
            }
            std::thread::sleep(std::time::Duration::from_millis((due - now).unsigned_abs()));
        }
        out.late_ms = chrono::Utc::now().timestamp_millis() - due;
        let t = Instant::now();
        let bodies = fleet.bodies_with(0..series, k, tl.base(k), args.series_per_request, at);
        let sent = crate::sender::send(target.addr, target.timeout, &bodies, args.concurrency);
        for e in &sent.errors {
            println!("  !! {}: write error: {e}", target.name());
        }
        if k == 0 || (k + 1) % 10 == 0 {
            println!(
                "  scrape {:>3}/{scrapes}: {:>10.0} samples/s ({} rejected; {:.1}s with building; {:.1}s after its interval)",
                k + 1,
                sent.rate(),
                sent.rejected,
                t.elapsed().as_secs_f64(),
                out.late_ms as f64 / 1000.0
            );
        }
        out.sent.add(&sent);
    }
    if out.history_seconds == 0.0 {
        out.history_seconds = started.elapsed().as_secs_f64();
    }
    out.wall_seconds = started.elapsed().as_secs_f64();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timelines_start_on_the_interval() {
        assert_eq!(lcm(15_000, 60_000), 60_000);
        assert_eq!(lcm(15_000, 20_000), 60_000);
        let tl = Timeline::starting(600_000, 20_000);
        assert_eq!(tl.first_ms % 60_000, 0);
        assert!(tl.base(0) <= chrono::Utc::now().timestamp_millis() - 600_000);
    }
}
