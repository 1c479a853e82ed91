//! Overload: a flood of write requests beyond `--max-concurrent-writes`/`--max-inflight-bytes`
//! gets 429 with `Retry-After`, the server's memory stays bounded, and it recovers; queries
//! beyond their limits fail with 422/503.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use saltdb::http::{AppState, Limits, QueryConfig};

use crate::common::*;

#[test]
fn a_write_flood_gets_429_with_bounded_memory_and_the_server_recovers() {
    const INFLIGHT_MIB: u64 = 48;
    let dir = tempfile::tempdir().unwrap();
    let inflight = format!("{INFLIGHT_MIB}MiB");
    let bin = Binary::spawn(
        dir.path(),
        &[
            "--retention",
            "0",
            "--max-request-bytes",
            "12MiB",
            "--max-inflight-bytes",
            &inflight,
            "--max-concurrent-writes",
            "4",
        ],
    );
    let base = bin.url("");
    let pid = bin.child.id();
    // Warm up: one write and one read, so the baseline includes the runtime's steady state.
    let (small, _) = dataset(100, 10, 1_600_000_000_000, "warm");
    assert_eq!(import(&base, small).0, 204);
    let baseline_kib = proc_status_kib(pid, "VmRSS:");

    // 8 MiB bodies that are mostly blank lines around 50 real series: the server must buffer
    // each whole body, but what it accepts stays small, so RSS growth measures requests in
    // flight rather than accepted data (which grows memtables at whatever speed the machine has).
    let (lines, _) = dataset(50, 20, 1_600_000_000_000, "flood");
    let mut body = lines;
    body.push_str(&"\n".repeat((8 << 20) - body.len()));
    let body = Arc::new(body);

    let stop = Arc::new(AtomicBool::new(false));
    let (accepted, refused, other) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let peak_kib = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (stop, peak) = (stop.clone(), peak_kib.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(proc_status_kib(pid, "VmRSS:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(8);
    let senders: Vec<_> = (0..24)
        .map(|_| {
            let (body, base) = (body.clone(), base.clone());
            let (accepted, refused, other) = (accepted.clone(), refused.clone(), other.clone());
            std::thread::spawn(move || {
                let c = client();
                while Instant::now() < deadline {
                    match c.post(format!("{base}/api/v1/import")).body(body.as_str().to_owned()).send() {
                        Ok(resp) if resp.status().as_u16() == 204 => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(resp) if resp.status().as_u16() == 429 => {
                            assert_eq!(resp.headers()["retry-after"], "1");
                            let text = resp.text().unwrap();
                            assert!(text.contains("--max-"), "{text}");
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(resp) => panic!("unexpected {}: {}", resp.status(), resp.text().unwrap_or_default()),
                        Err(_) => {
                            other.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    let peak_kib = peak_kib.load(Ordering::Relaxed).max(proc_status_kib(pid, "VmHWM:"));
    let (accepted, refused, other) =
        (accepted.load(Ordering::Relaxed), refused.load(Ordering::Relaxed), other.load(Ordering::Relaxed));
    let growth_mib = peak_kib.saturating_sub(baseline_kib) / 1024;
    println!(
        "flood: {accepted} accepted, {refused} refused with 429, {other} transport errors; RSS baseline {} MiB, peak {} MiB (+{growth_mib} MiB, --max-inflight-bytes {INFLIGHT_MIB} MiB)",
        baseline_kib / 1024,
        peak_kib / 1024
    );
    assert!(accepted > 0, "some writes get through");
    assert!(refused > accepted, "the flood is mostly refused");
    assert_eq!(other, 0, "refused clients read a 429, not a reset connection");
    // The write budget plus allocator and runtime slack (measured: +78..88 MiB). Without the
    // budget the same flood grows RSS by about 220 MiB: 24 x 8 MiB bodies at once.
    assert!(growth_mib < INFLIGHT_MIB + 80, "RSS grew by {growth_mib} MiB");

    // It recovers: a normal write and read right after the flood.
    let (after, expected) = dataset(20, 5, 1_600_100_000_000, "after_flood");
    assert_eq!(import(&base, after).0, 204);
    assert_eq!(export(&base, r#"{__name__=~"after_flood_.*"}"#), expected);
    let metrics = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    let overloaded = metrics
        .lines()
        .find(|l| l.starts_with("saltdb_write_requests_rejected_total") && l.contains("reason=\"overloaded\""))
        .expect("overload rejections counted");
    assert!(overloaded.ends_with(&format!(" {refused}")), "{overloaded} vs {refused}");
    bin.terminate();
}

/// A protobuf length-delimited field.
fn len_field(dst: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    dst.push(tag << 3 | 2);
    let mut n = payload.len();
    while n >= 0x80 {
        dst.push((n as u8) | 0x80);
        n >>= 7;
    }
    dst.push(n as u8);
    dst.extend_from_slice(payload);
}

/// Bodies of empty messages decode to many times their size (an empty `TimeSeries` is 2 bytes
/// and a 96-byte struct, an empty `Sample` 2 bytes and 16; an imported sample can be 4 bytes of
/// JSON): each is refused before it is decoded, with a reason, and the server's memory stays
/// within its write budget.
#[test]
fn bodies_that_decode_far_beyond_their_size_are_refused_within_the_budget() {
    const INFLIGHT_MIB: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let inflight = format!("{INFLIGHT_MIB}MiB");
    let bin = Binary::spawn(
        dir.path(),
        &["--retention", "0", "--max-request-bytes", "16MiB", "--max-inflight-bytes", &inflight],
    );
    let base = bin.url("");
    let write = format!("{base}/api/v1/write");
    let pid = bin.child.id();
    let (small, _) = dataset(10, 10, 1_600_000_000_000, "warm");
    assert_eq!(import(&base, small).0, 204);
    let baseline_kib = proc_status_kib(pid, "VmRSS:");

    let compress = |raw: &[u8]| snap::raw::Encoder::new().compress_vec(raw).unwrap();
    let mut name = Vec::new();
    len_field(&mut name, 1, b"__name__");
    len_field(&mut name, 2, b"bomb");
    // One series whose body is `filler` repeated to 16 MiB - 64 bytes.
    let one_series = |filler: &[u8]| {
        let mut ts = Vec::new();
        len_field(&mut ts, 1, &name);
        ts.extend(filler.repeat(((16 << 20) - 64) / filler.len()));
        let mut body = Vec::new();
        len_field(&mut body, 1, &ts);
        compress(&body)
    };
    let mut v2_series = vec![0x0a, 0x02, 0x01, 0x02];
    v2_series.extend([0x12, 0x00].repeat(((16 << 20) - 64) / 2));
    let mut v2_body = Vec::new();
    len_field(&mut v2_body, 4, b"");
    len_field(&mut v2_body, 4, b"__name__");
    len_field(&mut v2_body, 4, b"bomb");
    len_field(&mut v2_body, 5, &v2_series);
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: Vec<(&str, Headers, Vec<u8>, u16, &str)> = vec![
        (
            "8 M empty series",
            &V1_HEADERS,
            compress(&[0x0a, 0x00].repeat((16 << 20) / 2)),
            400,
            "8388608 series, more than the limit of 1000000",
        ),
        ("8 M empty samples", &V1_HEADERS, one_series(&[0x12, 0x00]), 413, "of memory to decode"),
        ("8 M empty labels", &V1_HEADERS, one_series(&[0x0a, 0x00]), 413, "of memory to decode"),
        ("2.0: 8 M empty samples", &V2_HEADERS, compress(&v2_body), 413, "of memory to decode"),
    ];
    for (what, headers, body, status, needle) in cases {
        assert!(body.len() < 1 << 20, "{what}: {} bytes compressed", body.len());
        let (got, _, text) = post(&write, headers, body);
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(needle), "{what}: {text}");
        println!("{what}: {got} {text}");
    }
    // Import: 4 bytes of JSON per sample (`1,` in values and in timestamps), 16 bytes decoded.
    let ones = vec!["1"; 2 << 20].join(",");
    let line = format!(r#"{{"metric":{{"__name__":"bomb"}},"values":[{ones}],"timestamps":[{ones}]}}"#);
    let (got, text) = import(&base, line);
    assert_eq!(got, 413, "import of 2 M samples in 8 MiB: {text}");
    assert!(text.contains("of memory to decode"), "{text}");
    let peak_kib = proc_status_kib(pid, "VmHWM:");
    let growth_mib = peak_kib.saturating_sub(baseline_kib) / 1024;
    println!("decoding bombs: RSS baseline {} MiB, peak {} MiB", baseline_kib / 1024, peak_kib / 1024);
    // Before the walk, the first body alone made prost allocate ~1.3 GB of empty series.
    assert!(growth_mib < INFLIGHT_MIB + 80, "RSS grew by {growth_mib} MiB");

    // Nothing was stored, and the server goes on serving.
    let (after, expected) = dataset(5, 5, 1_600_100_000_000, "after_bombs");
    assert_eq!(import(&base, after).0, 204);
    assert_eq!(export(&base, r#"{__name__=~"after_bombs_.*"}"#), expected);
    assert!(export(&base, r#"{__name__="bomb"}"#).is_empty());
    let metrics = client().get(format!("{base}/metrics")).send().unwrap().text().unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("saltdb_write_requests_rejected_total") && l.contains("reason=\"too_large\"")),
        "413s are counted"
    );
    bin.terminate();
}

#[test]
fn a_query_past_its_timeout_is_503_and_a_full_query_pool_is_503() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let storage = saltdb::storage::Storage::open(storage_config(dir.path())).unwrap();
    let mut query = QueryConfig { max_concurrency: 1, ..QueryConfig::default() };
    query.engine.timeout = Duration::from_millis(300);
    let state = Arc::new(AppState::new(storage, Limits::default(), query));
    let ask = |q: &str| {
        let resp = rt.block_on(saltdb::http::api::query::instant(
            axum::extract::State(state.clone()),
            axum::Extension(saltdb::tenant::Scope::Unscoped),
            None,
            axum::http::Method::GET,
            axum::extract::RawQuery(Some(format!("query={q}&time=1700000000"))),
            axum::http::HeaderMap::new(),
            axum::body::Body::empty(),
        ));
        let resp = match resp {
            Ok(r) => r,
            Err(e) => axum::response::IntoResponse::into_response(e),
        };
        let status = resp.status().as_u16();
        let bytes = rt.block_on(http_body_util::BodyExt::collect(resp.into_body())).unwrap().to_bytes();
        (status, serde_json::from_slice::<serde_json::Value>(&bytes).unwrap())
    };
    assert_eq!(ask("vector(1)").0, 200);

    // Every slot taken: the next query waits for its timeout, then fails with 503.
    let held = rt.block_on(state.query_slots.clone().acquire_owned()).unwrap();
    let started = Instant::now();
    let (status, v) = ask("vector(1)");
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["errorType"], "timeout");
    assert!(v["error"].as_str().unwrap().contains("query slots"), "{v}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    drop(held);
    assert_eq!(ask("vector(1)").0, 200);

    // A query that runs past its timeout fails with 503 (a timeout too short for any query).
    let storage = saltdb::storage::Storage::open(storage_config(&dir.path().join("b"))).unwrap();
    let mut query = QueryConfig::default();
    query.engine.timeout = Duration::from_nanos(1);
    let state = Arc::new(AppState::new(storage, Limits::default(), query));
    let resp = rt.block_on(saltdb::http::api::query::range(
        axum::extract::State(state),
        axum::Extension(saltdb::tenant::Scope::Unscoped),
        None,
        axum::http::Method::GET,
        axum::extract::RawQuery(Some("query=vector(1)&start=1700000000&end=1700003600&step=15".into())),
        axum::http::HeaderMap::new(),
        axum::body::Body::empty(),
    ));
    let err = resp.expect_err("timed out");
    let text = err.to_string();
    let resp = axum::response::IntoResponse::into_response(err);
    assert_eq!(resp.status().as_u16(), 503, "{text}");
    assert!(text.contains("timed out"), "{text}");
}
