//! Writing to a target: remote-write requests over keep-alive connections, every refusal
//! counted.

use super::target::Target;
use super::CardinalityArgs;
use crate::fleet::Fleet;
pub(super) use crate::sender::Sent;

/// Builds (untimed) and sends (timed) one scrape of `series` scheduled at `base_ms`.
pub(super) fn scrape(
    target: &Target,
    args: &CardinalityArgs,
    series: std::ops::Range<usize>,
    k: usize,
    base_ms: i64,
) -> Sent {
    let fleet = Fleet { metrics: args.metrics };
    let bodies = fleet.bodies(series, k, base_ms, args.series_per_request);
    let sent = crate::sender::send(target.addr, target.timeout, &bodies, args.concurrency);
    for e in &sent.errors {
        println!("  !! {}: write error: {e}", target.name());
    }
    sent
}
