//! Slow clients: a flood of connections that send part of a request head and then nothing
//! cannot hold more than `--max-connections` file descriptors of the server, normal queries and
//! writes keep being served during the flood, and the server closes every held connection
//! (`--header-read-timeout`); a kept-alive connection left idle is closed after
//! `--idle-timeout`; a request body that stalls gets a 408 (`--body-read-timeout`) and frees its
//! write slot.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;

/// The connection bound the server runs with.
const MAX_CONNECTIONS: usize = 64;
/// Connections the flood opens.
const FLOOD: usize = 3_000;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Opens a connection and sends the start of a request head, never finishing it.
fn slow_connection(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    s.write_all(b"GET /api/v1/query?query=up HTTP/1.1\r\nHost: slow\r\nX-Slow: ")?;
    Ok(s)
}

/// True when the server has closed `s`: a read returns EOF or a reset (the request head was
/// never finished, so no response bytes may arrive).
fn closed_by_server(mut s: &TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe),
    }
}

/// A request error with its causes (reqwest's own message hides whether it was the connect,
/// a reset or the timeout).
fn chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// One write and one query that must succeed within a few seconds.
fn normal_round(base: &str, round: u64) -> Result<(), String> {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let t = recent_ms() + round as i64;
    let line = serde_json::json!({"metric": {"__name__": "during_flood", "round": round.to_string()}, "values": [round], "timestamps": [t]});
    let resp = client.post(format!("{base}/api/v1/import")).body(line.to_string()).send().map_err(|e| chain(&e))?;
    if resp.status().as_u16() != 204 {
        return Err(format!("import answered {}", resp.status()));
    }
    let q = format!("{base}/api/v1/query?query=count(during_flood)&time={}", t / 1000 + 1);
    let resp = client.get(q).send().map_err(|e| chain(&e))?;
    let status = resp.status().as_u16();
    let text = resp.text().map_err(|e| e.to_string())?;
    let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    if status != 200 || body["data"]["result"][0]["value"][1].as_str().is_none() {
        return Err(format!("query answered {status}: {body}"));
    }
    Ok(())
}

/// A client that connects and only then, after a pause (a busy client machine, a congested
/// network), sends a complete request: sending nothing for a moment does not make it a slow
/// client, so the flood must not cost it its connection.
fn late_talker_round(addr: SocketAddr, pause: Duration) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| format!("connect: {e}"))?;
    std::thread::sleep(pause);
    s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: late\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("a client that paused {pause:?} before its request could not send it: {e}"))?;
    let answer = read_until_closed(&mut s, Duration::from_secs(10));
    if !answer.starts_with("HTTP/1.1 200") {
        return Err(format!("a client that paused {pause:?} before its request was answered {answer:?}"));
    }
    Ok(())
}

#[test]
fn a_slow_client_flood_is_bounded_and_normal_clients_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(
        dir.path(),
        &[
            "--retention",
            "0",
            "--max-connections",
            &MAX_CONNECTIONS.to_string(),
            "--header-read-timeout",
            "3s",
            "--idle-timeout",
            "3s",
        ],
    );
    let base = bin.url("");
    let (pid, addr) = (bin.child.id(), bin.addr);
    normal_round(&base, 0).expect("a normal round before the flood");
    let baseline_fds = open_fds(pid);

    // Normal clients keep working while the flood is opened and held.
    let stop = Arc::new(AtomicBool::new(false));
    let (served, peak_fds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let normal = {
        let (stop, served, peak_fds, base) = (stop.clone(), served.clone(), peak_fds.clone(), base.clone());
        std::thread::spawn(move || -> Result<(), String> {
            let mut round = 1;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                normal_round(&base, round).map_err(|e| format!("round {round}: {e}"))?;
                late_talker_round(addr, Duration::from_millis(50)).map_err(|e| format!("round {round}: {e}"))?;
                served.fetch_add(1, Ordering::Relaxed);
                peak_fds.fetch_max(open_fds(pid) as u64, Ordering::Relaxed);
                assert!(started.elapsed() < Duration::from_secs(5), "round {round} took {:?}", started.elapsed());
                round += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        })
    };
    let mut flood = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        match slow_connection(bin.addr) {
            Ok(s) => flood.push(s),
            Err(e) => panic!("slow connection {i} could not even connect: {e}"),
        }
        if i % 100 == 0 {
            peak_fds.fetch_max(open_fds(pid) as u64, Ordering::Relaxed);
        }
    }
    // Hold the flood open for longer than the header timeout, with a trickler among it that
    // keeps sending header bytes (not idle, but never finishing its head).
    let mut trickler = slow_connection(bin.addr).unwrap();
    let held_until = Instant::now() + Duration::from_secs(4);
    let mut trickle_failed = false;
    while Instant::now() < held_until {
        peak_fds.fetch_max(open_fds(pid) as u64, Ordering::Relaxed);
        trickle_failed |= trickler.write_all(b"x").is_err();
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    normal.join().unwrap().expect("normal queries and writes succeed during the flood");
    let served = served.load(Ordering::Relaxed);
    assert!(served >= 5, "only {served} normal rounds were served during the flood");

    // The server never held much more than the bound (the slack covers fjall's files).
    let peak = peak_fds.load(Ordering::Relaxed) as usize;
    assert!(peak <= baseline_fds + MAX_CONNECTIONS + 32, "server fds peaked at {peak} (baseline {baseline_fds})");

    // Every held connection has been closed by the server by now (evicted or timed out).
    let still_open = flood.iter().filter(|s| !closed_by_server(s, Duration::from_secs(3))).count();
    assert_eq!(still_open, 0, "{still_open} of {FLOOD} slow connections are still open");
    assert!(trickle_failed || closed_by_server(&trickler, Duration::from_secs(3)), "the trickler is still open");
    normal_round(&base, 1_000_000).expect("a normal round after the flood");
    println!("slow-client flood: {FLOOD} connections, {served} normal rounds served, server fds peaked at {peak} (baseline {baseline_fds}, bound {MAX_CONNECTIONS})");
    bin.terminate();
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--header-read-timeout", "1s", "--idle-timeout", "3s"]);
    let mut s = TcpStream::connect(bin.addr).unwrap();
    s.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: idle\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let idle_since = Instant::now();
    // Past the header read timeout (which applies to the first request only) it is still open.
    assert!(!closed_by_server(&s, Duration::from_millis(1_500)), "closed before the idle timeout");
    assert!(closed_by_server(&s, Duration::from_secs(4)), "still open after the idle timeout");
    let idle = idle_since.elapsed();
    assert!(idle >= Duration::from_millis(2_500) && idle < Duration::from_millis(5_000), "closed after {idle:?}");
    bin.terminate();
}

#[test]
fn slow_clients_do_not_hold_up_a_graceful_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(dir.path(), &["--retention", "0", "--header-read-timeout", "60s", "--idle-timeout", "60s"]);
    let held: Vec<TcpStream> = (0..20).map(|_| slow_connection(bin.addr).unwrap()).collect();
    // A kept-alive idle connection too.
    let mut idle = TcpStream::connect(bin.addr).unwrap();
    idle.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: idle\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    assert!(idle.read(&mut buf).unwrap() > 0);
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    bin.terminate();
    assert!(started.elapsed() < Duration::from_secs(10), "shutdown took {:?}", started.elapsed());
    assert!(held.iter().all(|s| closed_by_server(s, Duration::from_secs(1))), "a slow connection outlived the server");
}

/// Reads what the server sends on `s` until it closes the connection (or `wait` passes).
fn read_until_closed(s: &mut TcpStream, wait: Duration) -> String {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of one sample line of `/metrics` (`name{labels}` exactly as rendered).
fn metric(base: &str, series: &str) -> Option<f64> {
    let text = reqwest::blocking::get(format!("{base}/metrics")).ok()?.text().ok()?;
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn a_body_that_stalls_gets_a_408_and_frees_its_write_slot() {
    let dir = tempfile::tempdir().unwrap();
    let bin = Binary::spawn(
        dir.path(),
        &[
            "--retention",
            "0",
            "--body-read-timeout",
            "2s",
            "--header-read-timeout",
            "1s",
            "--max-concurrent-writes",
            "2",
        ],
    );
    let base = format!("http://{}", bin.addr);
    // Every write slot is taken by a client that declares a body and then sends only a part of it.
    let started = Instant::now();
    let mut stalled: Vec<TcpStream> = (0..2)
        .map(|i| {
            let mut s = TcpStream::connect(bin.addr).unwrap();
            let head = format!("POST /api/v1/import HTTP/1.1\r\nHost: stall{i}\r\nContent-Length: 1000\r\n\r\n");
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(br#"{"metric":{"__name__":"stalled"},"#).unwrap();
            s
        })
        .collect();
    // A connection that never finishes its head, for the early-close count.
    let slow = slow_connection(bin.addr).unwrap();
    for s in &mut stalled {
        let answer = read_until_closed(s, Duration::from_secs(8));
        assert!(answer.starts_with("HTTP/1.1 408"), "a stalled body was answered {answer:?}");
        assert!(answer.contains("--body-read-timeout"), "the 408 does not name the flag: {answer}");
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1_900) && waited < Duration::from_secs(8), "answered after {waited:?}");
    assert!(closed_by_server(&slow, Duration::from_secs(3)), "the slow head is still open");
    // The write slots are free again and nothing of the stalled bodies was written.
    normal_round(&base, 7).expect("a write and a query after the stalled bodies");
    let export = reqwest::blocking::get(format!("{base}/api/v1/export?match[]=stalled")).unwrap().text().unwrap();
    assert_eq!(export.trim(), "", "a stalled body wrote samples");
    assert_eq!(metric(&base, r#"saltdb_http_connections_closed_early_total{reason="header_timeout"}"#), Some(1.0));
    let accepted = metric(&base, "saltdb_http_connections_accepted_total").unwrap_or(0.0);
    assert!(accepted >= 4.0, "accepted connections: {accepted}");
    let open = metric(&base, "saltdb_http_connections_open").unwrap_or(-1.0);
    assert!((1.0..=3.0).contains(&open), "open connections during a scrape: {open}");
    bin.terminate();
}
