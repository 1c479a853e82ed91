//! `saltdb inspect`: prints a running server's windows as a table, with bytes per sample and
//! what each keeps (`raw`, or the finest tier interval of a downsampled window); with
//! `--tenants`, its tenants with their series and estimated bytes on disk.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Why inspection failed.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The URL is not `http://host:port`.
    #[error("unsupported URL {0:?}: use http://HOST:PORT")]
    Url(String),
    /// Connecting or reading failed.
    #[error("cannot reach {url}: {source}")]
    Io {
        /// The server URL.
        url: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The answer was not the expected JSON.
    #[error("unexpected answer from {url}: {why}")]
    Answer {
        /// The server URL.
        url: String,
        /// What was wrong.
        why: String,
    },
}

/// Fetches `/api/v1/status/windows` from `url` (plain HTTP/1.1) and renders the table.
///
/// # Errors
/// [`InspectError`] for a bad URL, a network failure or an unexpected answer.
pub fn inspect(url: &str) -> Result<String, InspectError> {
    let v = fetch(url, "/api/v1/status/windows")?;
    let rows = v["data"]
        .as_array()
        .ok_or_else(|| InspectError::Answer { url: url.to_owned(), why: format!("no data in {v}") })?;
    Ok(render(rows))
}

/// Fetches `/api/v1/status/tenants` from `url` and renders one row per tenant: its series in
/// the newest window, the windows it has series in and its estimated bytes on disk.
///
/// # Errors
/// As [`inspect`].
pub fn inspect_tenants(url: &str) -> Result<String, InspectError> {
    let v = fetch(url, "/api/v1/status/tenants")?;
    let rows = v["data"]["byTenant"]
        .as_array()
        .ok_or_else(|| InspectError::Answer { url: url.to_owned(), why: format!("no data in {v}") })?;
    let mut out = format!("{:<32} {:>12} {:>8} {:>16}\n", "tenant", "series", "windows", "est. bytes");
    for r in rows {
        out.push_str(&format!(
            "{:<32} {:>12} {:>8} {:>16}\n",
            r["tenant"].as_str().unwrap_or("?"),
            r["series"].as_u64().unwrap_or(0),
            r["windows"].as_u64().unwrap_or(0),
            r["estimatedBytes"].as_u64().unwrap_or(0)
        ));
    }
    if v["data"]["tenants"] == serde_json::Value::Bool(false) {
        out.push_str("(the server runs without --tenants: everything is the default tenant's)\n");
    }
    Ok(out)
}

/// GETs `path` from `url` (plain HTTP/1.1) and parses the JSON answer.
fn fetch(url: &str, path: &str) -> Result<serde_json::Value, InspectError> {
    let hostport = url
        .strip_prefix("http://")
        .map(|h| h.trim_end_matches('/'))
        .ok_or_else(|| InspectError::Url(url.to_owned()))?;
    let io = |source| InspectError::Io { url: url.to_owned(), source };
    let mut stream = TcpStream::connect(hostport).map_err(io)?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(io)?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n").map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    let answer = |why: String| InspectError::Answer { url: url.to_owned(), why };
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| answer("no HTTP header".into()))?;
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_owned() };
    serde_json::from_str(&body).map_err(|e| answer(e.to_string()))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(tail.get(..n).unwrap_or(""));
        rest = tail.get(n + 2..).unwrap_or("");
    }
    out
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%Y-%m-%d %H:%M").to_string())
}

/// The table: one row per window and a total; with retention classes (see `--retention-rule`),
/// a column names each window's.
pub fn render(rows: &[serde_json::Value]) -> String {
    let classed = rows.iter().any(|r| r["retentionClass"].as_str().is_some_and(|c| c != "default"));
    let class = |r: &serde_json::Value| {
        if classed {
            format!("{:<8} ", r["retentionClass"].as_str().unwrap_or("?"))
        } else {
            String::new()
        }
    };
    let mut out = format!(
        "{}{:<17} {:<17} {:<8} {:<6} {:>9} {:>13} {:>14} {:>9}\n",
        if classed { format!("{:<8} ", "class") } else { String::new() },
        "start",
        "end",
        "state",
        "keeps",
        "series",
        "samples",
        "bytes",
        "B/sample"
    );
    let (mut samples, mut bytes) = (0u64, 0u64);
    for r in rows {
        let (s, b) = (r["samples"].as_u64().unwrap_or(0), r["bytes"].as_u64().unwrap_or(0));
        samples += s;
        bytes += b;
        let per = if s > 0 { format!("{:.3}", b as f64 / s as f64) } else { "-".into() };
        // What a downsampled window keeps: its finest tier's points (its samples are the raw
        // ones left, of series with native histograms).
        let keeps = r["downsampledMs"].as_i64().map_or_else(|| "raw".to_owned(), crate::duration::format_ms);
        out.push_str(&format!(
            "{}{:<17} {:<17} {:<8} {:<6} {:>9} {:>13} {:>14} {:>9}\n",
            class(r),
            time(r["start"].as_i64().unwrap_or(0)),
            time(r["end"].as_i64().unwrap_or(0)),
            r["state"].as_str().unwrap_or("?"),
            keeps,
            r["series"].as_u64().unwrap_or(0),
            s,
            b,
            per
        ));
    }
    let per = if samples > 0 { format!("{:.3}", bytes as f64 / samples as f64) } else { "-".into() };
    out.push_str(&format!(
        "{}{:<17} {:<17} {:<8} {:<6} {:>9} {:>13} {:>14} {:>9}\n",
        if classed { format!("{:<8} ", "") } else { String::new() },
        "total",
        "",
        "",
        "",
        "",
        samples,
        bytes,
        per
    ));
    out
}
