//! The API requests the cardinality benchmark times, and the size of their answers.

use std::time::Instant;

use serde_json::{json, Value};

use super::target::{excerpt, Target};
use crate::http_client::Conn;

/// One API request to time.
#[derive(Clone, Debug)]
pub(super) struct Probe {
    pub(super) name: &'static str,
    /// Path and query string.
    pub(super) path: String,
    /// Why the targets may legitimately disagree on its answer's size.
    pub(super) note: Option<&'static str>,
}

/// The size of an answer: series, label names or values (`items`), and samples (`points`) of a
/// query result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) items: usize,
    pub(super) points: usize,
}

impl Answer {
    pub(super) fn of(data: &Value) -> Self {
        if let Some(a) = data.as_array() {
            return Self { items: a.len(), points: 0 };
        }
        let result = data["result"].as_array().map_or(&[][..], Vec::as_slice);
        match data["resultType"].as_str() {
            Some("matrix") => Self {
                items: result.len(),
                points: result.iter().map(|s| s["values"].as_array().map_or(0, Vec::len)).sum(),
            },
            Some("vector") => Self { items: result.len(), points: result.len() },
            Some(_) => Self { items: 1, points: 1 },
            None => Self::default(),
        }
    }

    pub(super) fn show(self) -> String {
        if self.points > 0 && self.points != self.items {
            format!("{}/{}", self.items, self.points)
        } else {
            self.items.to_string()
        }
    }
}

/// Latencies of one request type on one target.
#[derive(Clone, Debug, Default)]
pub(super) struct Timing {
    pub(super) runs_ms: Vec<f64>,
    /// Server CPU (user + system) per timed run.
    pub(super) cpu_ms: Option<f64>,
    pub(super) answer: Option<Answer>,
    pub(super) errors: Vec<String>,
}

impl Timing {
    pub(super) fn median_ms(&self) -> Option<f64> {
        (!self.runs_ms.is_empty()).then(|| crate::query::median(self.runs_ms.clone()))
    }

    pub(super) fn json(&self, probe: &Probe) -> Value {
        json!({
            "name": probe.name, "request": probe.path, "median_ms": self.median_ms(), "runs_ms": self.runs_ms,
            "server_cpu_ms": self.cpu_ms, "items": self.answer.map(|a| a.items),
            "points": self.answer.map(|a| a.points), "errors": self.errors,
        })
    }
}

/// `path?k=v&...`, URL-encoded.
pub(super) fn api(path: &str, params: &[(&str, &str)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        q.append_pair(k, v);
    }
    format!("{path}?{}", q.finish())
}

/// Milliseconds as the API's seconds with a fraction.
pub(super) fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

pub(super) fn instant(name: &'static str, query: &str, at_ms: i64) -> Probe {
    Probe { name, path: api("/api/v1/query", &[("query", query), ("time", &secs(at_ms))]), note: None }
}

/// One GET, timed; its answer's size. Drops the connection after an I/O error.
fn call(conn: &mut Option<Conn>, target: &Target, path: &str) -> Result<(f64, Answer), String> {
    if conn.is_none() {
        *conn = Some(Conn::try_connect(target.addr, Some(target.timeout)).map_err(|e| format!("connect: {e}"))?);
    }
    let c = conn.as_mut().ok_or("no connection")?;
    let t = Instant::now();
    let response = c.try_request("GET", path, &[], b"");
    let seconds = t.elapsed().as_secs_f64();
    let (status, body) = match response {
        Ok(r) => r,
        Err(e) => {
            *conn = None;
            return Err(match e.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                    format!("no answer within {:?}", target.timeout)
                }
                _ => e.to_string(),
            });
        }
    };
    if status != 200 {
        return Err(format!("HTTP {status}: {}", excerpt(&body)));
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| format!("bad JSON ({e}): {}", excerpt(&body)))?;
    if v["status"] != "success" {
        return Err(format!("status {}: {}", v["status"], excerpt(&body)));
    }
    Ok((seconds, Answer::of(&v["data"])))
}

/// Requests whose warm-up answered within this many milliseconds are timed at least
/// [`FAST_RUNS`] times: their medians sit within a tenth of a millisecond of each other, where a
/// context switch on a shared machine moves a median of five.
const FAST_MS: f64 = 20.0;
const FAST_RUNS: usize = 25;

/// One warm-up, then `runs` timed runs ([`FAST_RUNS`] for a fast request; none when the warm-up
/// fails: a request that times out is not repeated). Errors are printed as they happen.
pub(super) fn time_probe(target: &Target, probe: &Probe, runs: usize) -> Timing {
    let mut conn = None;
    let mut t = Timing::default();
    let fail = |t: &mut Timing, e: String| {
        println!("  !! {} {}: {e}", target.name(), probe.name);
        t.errors.push(e);
    };
    let runs = match call(&mut conn, target, &probe.path) {
        Ok((seconds, answer)) => {
            t.answer = Some(answer);
            if seconds * 1000.0 < FAST_MS {
                runs.max(FAST_RUNS)
            } else {
                runs
            }
        }
        Err(e) => {
            fail(&mut t, format!("warm-up: {e}"));
            return t;
        }
    };
    let pid = target.pid();
    let cpu = crate::cpu_seconds(&pid);
    for _ in 0..runs {
        match call(&mut conn, target, &probe.path) {
            Ok((seconds, answer)) => {
                t.runs_ms.push(seconds * 1000.0);
                if t.answer != Some(answer) {
                    fail(&mut t, format!("answer changed between runs: {answer:?}"));
                }
            }
            Err(e) => fail(&mut t, e),
        }
    }
    t.cpu_ms = Some((crate::cpu_seconds(&pid) - cpu) * 1000.0 / runs.max(1) as f64);
    t
}
