//! The long-range dashboard queries: each over the whole dataset at its own step, first call and
//! repeats, with and without the result cache, and peak RSS during the first call.
//!
//! A *first call* is the first request of that exact query text and range since the server
//! started. Other queries (and the other variants of the same query, over a range one step
//! earlier) may have run before it and warmed block and page caches; only a result cache keyed
//! by the query and its range cannot answer it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http_client::{excerpt, Conn};

/// The dashboard's queries and their steps in seconds (also timed in-process by `scan.rs`).
pub(crate) const QUERIES: [(&str, i64); 7] = [
    ("sum(rate(c0[5m]))", 1_800),
    ("sum by (region) (rate(c1[1h]))", 3_600),
    ("max_over_time(g1[1h])", 3_600),
    ("avg by (region) (avg_over_time(g2[1d]))", 86_400),
    ("quantile(0.9, rate(c2[10m]))", 1_800),
    ("topk(5, increase(c3[1d]))", 86_400),
    ("{job=\"rwgen\"}", 10_800),
];

/// A year-long dashboard's panels (`--queries year`): steps of 6 hours and a day, as Grafana
/// picks them for a year on a panel about 1,000 pixels wide, ranges of at least twice the 1h
/// tier's interval, so that `auto` may read 1h points where they exist.
pub(crate) const YEAR_QUERIES: [(&str, i64); 6] = [
    ("sum(rate(c0[1d]))", 86_400),
    ("sum by (region) (rate(c1[6h]))", 21_600),
    ("max_over_time(g1[1d])", 86_400),
    ("avg by (region) (avg_over_time(g2[1d]))", 86_400),
    ("quantile(0.9, rate(c2[6h]))", 21_600),
    ("topk(5, increase(c3[1d]))", 86_400),
];

/// A server under query.
pub(super) struct QueryTarget {
    pub(super) name: &'static str,
    pub(super) addr: SocketAddr,
    pub(super) pid: String,
    pub(super) timeout: Duration,
    /// Parameters added to every request (`max_source_resolution=raw` for saltdb read raw).
    pub(super) extra: Vec<(&'static str, String)>,
}

/// One answer to a range query.
#[derive(Clone, Debug, Default)]
pub(super) struct Answer {
    pub(super) ms: f64,
    pub(super) status: u16,
    /// Why it failed (HTTP status and error text), or `None` for a success.
    pub(super) error: Option<String>,
    pub(super) series: usize,
    pub(super) points: usize,
    /// Bytes of the JSON response.
    pub(super) bytes: usize,
    /// Peak RSS of the server during the request (VmHWM reset just before), and its RSS before.
    pub(super) peak_rss: u64,
    pub(super) rss_before: u64,
}

/// The time range and options of one request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Range {
    pub(super) start_ms: i64,
    pub(super) end_ms: i64,
    pub(super) step_s: i64,
    pub(super) nocache: bool,
}

/// Resets the peak RSS (VmHWM) of process `pid` to its current RSS (`/proc/PID/clear_refs`).
fn reset_peak_rss(pid: &str) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// Sends one range query on a fresh connection; with `measure_rss`, also the server's peak RSS
/// while it ran.
pub(super) fn range_query(target: &QueryTarget, q: &str, r: Range, measure_rss: bool) -> Answer {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("query", q)
        .append_pair("start", &(r.start_ms / 1000).to_string())
        .append_pair("end", &(r.end_ms / 1000).to_string())
        .append_pair("step", &r.step_s.to_string());
    if r.nocache {
        form.append_pair("nocache", "1");
    }
    for (name, value) in &target.extra {
        form.append_pair(name, value);
    }
    let form = form.finish();
    let mut a = Answer::default();
    if measure_rss {
        a.rss_before = crate::status_kib(&target.pid, "VmRSS:") * 1024;
        if !reset_peak_rss(&target.pid) {
            a.rss_before = 0;
        }
    }
    let t = Instant::now();
    let answer = Conn::try_connect(target.addr, Some(target.timeout)).and_then(|mut c| {
        c.try_request(
            "POST",
            "/api/v1/query_range",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            form.as_bytes(),
        )
    });
    a.ms = t.elapsed().as_secs_f64() * 1000.0;
    if measure_rss && a.rss_before > 0 {
        a.peak_rss = crate::peak_rss(&target.pid);
    }
    let (status, body) = match answer {
        Ok(x) => x,
        Err(e) => {
            a.error = Some(format!("no answer: {e}"));
            return a;
        }
    };
    a.status = status;
    a.bytes = body.len();
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    if status != 200 || v["status"] != "success" {
        let why = v["error"].as_str().map_or_else(|| excerpt(&body), str::to_owned);
        a.error = Some(format!("{status} {why}"));
        return a;
    }
    let result = v["data"]["result"].as_array().map_or(&[][..], Vec::as_slice);
    a.series = result.len();
    a.points = result.iter().map(|s| s["values"].as_array().map_or(0, Vec::len)).sum();
    a
}

/// A first call and its repeats.
#[derive(Clone, Debug, Default)]
pub(super) struct Timed {
    pub(super) first: Answer,
    pub(super) repeats: Vec<Answer>,
}

impl Timed {
    /// Median of the repeats that succeeded (the upper one of an even count).
    pub(super) fn median_ms(&self) -> Option<f64> {
        let ok: Vec<f64> = self.repeats.iter().filter(|a| a.error.is_none()).map(|a| a.ms).collect();
        (!ok.is_empty()).then(|| crate::query::median(ok))
    }

    pub(super) fn first_ms(&self) -> Option<f64> {
        self.first.error.is_none().then_some(self.first.ms)
    }

    /// The first error among the calls.
    pub(super) fn error(&self) -> Option<&str> {
        std::iter::once(&self.first).chain(&self.repeats).find_map(|a| a.error.as_deref())
    }

    /// `first / median` in ms, or the error.
    pub(super) fn show(&self) -> String {
        match (self.first_ms(), self.median_ms()) {
            (Some(f), Some(m)) => format!("{} / {}", ms(f), ms(m)),
            _ => format!("!! {}", self.error().unwrap_or("no answer")),
        }
    }
}

pub(super) fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// The timings of one query on one target: the default request (for VictoriaMetrics, with its
/// rollup result cache on) and `nocache=1`.
#[derive(Clone, Debug, Default)]
pub(super) struct PerTarget {
    pub(super) default: Timed,
    pub(super) nocache: Timed,
}

/// Runs one query on every target: `runs` repeats after each first call, the targets taking
/// turns so that background load weighs on all alike. saltdb's default request goes first (its
/// first call is the first of this query text on the server), VictoriaMetrics' `nocache=1`
/// request first (the figure saltdb's first call is compared with). The two variants of a
/// target use ranges one step apart, so each variant's first call is the first of its range.
pub(super) fn run_query(
    targets: &[QueryTarget],
    q: &str,
    step_s: i64,
    start_ms: i64,
    end_ms: i64,
    runs: usize,
) -> Vec<PerTarget> {
    let step_ms = step_s * 1000;
    let here = Range { start_ms, end_ms, step_s, nocache: false };
    let earlier = Range { start_ms: start_ms - step_ms, end_ms: end_ms - step_ms, step_s, nocache: false };
    // Round 0: saltdb's default request and VictoriaMetrics' `nocache=1` over the range; round
    // 1: the other variant of each over the range one step earlier. Returns (default request?,
    // range).
    let request = |t: &QueryTarget, round: usize| -> (bool, Range) {
        let default = (round == 0) == t.name.starts_with("saltdb");
        let range = if round == 0 { here } else { earlier };
        (default, Range { nocache: !default, ..range })
    };
    let mut out = vec![PerTarget::default(); targets.len()];
    for round in 0..2 {
        let mut timed = vec![Timed::default(); targets.len()];
        for (t, slot) in targets.iter().zip(timed.iter_mut()) {
            slot.first = range_query(t, q, request(t, round).1, true);
        }
        for _ in 0..runs {
            for (t, slot) in targets.iter().zip(timed.iter_mut()) {
                slot.repeats.push(range_query(t, q, request(t, round).1, false));
            }
        }
        for ((t, slot), o) in targets.iter().zip(timed).zip(out.iter_mut()) {
            if request(t, round).0 {
                o.default = slot;
            } else {
                o.nocache = slot;
            }
        }
    }
    out
}
