//! `saltdb-bench protocols`: ingest throughput per protocol (InfluxDB line protocol, OpenTSDB
//! `/api/put`, Prometheus text, JSON lines, OTLP) against VictoriaMetrics 1.79 in the same run
//! (VictoriaMetrics has no OTLP receiver). Each protocol writes its own series: `--new-rounds`
//! rounds each create `--series` series never seen before (new-series ingest), then the later
//! rounds add samples to the first round's series (known-series ingest, the steady state of a
//! fleet); the median round of each kind is reported. A request carries each series' samples
//! back to back, or with `--interleave` one sample of every series at a time. Bodies are built
//! before the clock starts; `--concurrency` keep-alive connections send them. The two servers
//! take turns, saltdb first in odd rounds and VictoriaMetrics first in even ones, so neither is
//! always the one measured right after the other's burst.
//!
//! VictoriaMetrics acknowledges a write before it has stored it (it buffers about a second), so
//! after each send the bench waits until the server that took it is idle again (below 5% of a
//! core over 200 ms, at most 10 s) before the other server's turn: otherwise one server's
//! leftover work runs during the other's measurement. The CPU time each server used from the
//! first request until idle is reported too (microseconds per sample): on a shared machine it
//! varies less than the rate.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use prost::Message;

use crate::http_client::{Conn, Server};
use crate::peers::Peer;

/// Options.
#[derive(Debug, clap::Args)]
pub struct ProtocolArgs {
    /// Series per protocol.
    #[arg(long, default_value_t = 100_000)]
    series: usize,
    /// Samples per series in each round.
    #[arg(long, default_value_t = 10)]
    samples: usize,
    /// Samples per request.
    #[arg(long, default_value_t = 10_000)]
    per_request: usize,
    /// Rounds of known-series ingest, after the new-series rounds.
    #[arg(long, default_value_t = 4)]
    rounds: usize,
    /// Rounds that each create `--series` new series (the median is reported; the first
    /// round's series are the known ones of the later rounds).
    #[arg(long, default_value_t = 3)]
    new_rounds: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Only these protocols (`influx`, `tsdb`, `text`, `json`, `otlp`; repeatable). All by default.
    #[arg(long)]
    only: Vec<String>,
    /// Leave VictoriaMetrics out (saltdb alone, e.g. under a profiler).
    #[arg(long)]
    no_peer: bool,
    /// Order a request's one-sample lines and points by time, then series (a fleet's agents
    /// flushing one sample of each series at a time), instead of each series' samples back to
    /// back. JSON lines keep one line per series.
    #[arg(long)]
    interleave: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Influx,
    OpenTsdb,
    PromText,
    JsonLines,
    Otlp,
}

impl Proto {
    const ALL: [Self; 5] = [Self::Influx, Self::OpenTsdb, Self::PromText, Self::JsonLines, Self::Otlp];

    fn name(self) -> &'static str {
        match self {
            Self::Influx => "influx line protocol",
            Self::OpenTsdb => "opentsdb /api/put",
            Self::PromText => "prometheus text",
            Self::JsonLines => "json lines import",
            Self::Otlp => "otlp (protobuf)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Self::Influx => "influx",
            Self::OpenTsdb => "tsdb",
            Self::PromText => "text",
            Self::JsonLines => "json",
            Self::Otlp => "otlp",
        }
    }
}

/// One request: path, headers, body, samples.
struct Request {
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
    samples: usize,
}

/// The requests of one round: `samples` per series starting at `t0` (ms), 15 s apart, for the
/// series numbered `first..first + args.series`.
fn round(p: Proto, args: &ProtocolArgs, t0: i64, first: usize) -> Vec<Request> {
    let mut out = Vec::new();
    let per_request_series = (args.per_request / args.samples).max(1);
    let end = first + args.series;
    let mut s = first;
    while s < end {
        let ids: Vec<usize> = (s..(s + per_request_series).min(end)).collect();
        s += ids.len();
        let ts = |k: usize| t0 + k as i64 * 15_000;
        // The (series, sample) pairs of the one-sample-a-line bodies, in the order sent.
        let order: Vec<(usize, usize)> = if args.interleave {
            (0..args.samples).flat_map(|k| ids.iter().map(move |&i| (i, k))).collect()
        } else {
            ids.iter().flat_map(|&i| (0..args.samples).map(move |k| (i, k))).collect()
        };
        let v = |i: usize, k: usize| ((i * 31 + k * 7) % 1000) as f64 / 10.0;
        let (path, headers, body) = match p {
            Proto::Influx => {
                let mut b = String::new();
                for &(i, k) in &order {
                    b.push_str(&format!("bench_{},host=h{},id={i} value={} {}\n", p.tag(), i % 1000, v(i, k), ts(k)));
                }
                ("/write?precision=ms", vec![], b.into_bytes())
            }
            Proto::OpenTsdb => {
                let mut pts = Vec::new();
                for &(i, k) in &order {
                    pts.push(serde_json::json!({"metric": "bench_tsdb", "timestamp": ts(k), "value": v(i, k), "tags": {"host": format!("h{}", i % 1000), "id": i.to_string()}}));
                }
                ("/api/put", vec![], serde_json::to_vec(&pts).unwrap_or_default())
            }
            Proto::PromText => {
                let mut b = String::new();
                for &(i, k) in &order {
                    b.push_str(&format!("bench_text{{host=\"h{}\",id=\"{i}\"}} {} {}\n", i % 1000, v(i, k), ts(k)));
                }
                ("/api/v1/import/prometheus", vec![], b.into_bytes())
            }
            Proto::JsonLines => {
                let mut b = String::new();
                for &i in &ids {
                    let values: Vec<f64> = (0..args.samples).map(|k| v(i, k)).collect();
                    let times: Vec<i64> = (0..args.samples).map(ts).collect();
                    b.push_str(&serde_json::json!({"metric": {"__name__": "bench_json", "host": format!("h{}", i % 1000), "id": i.to_string()}, "values": values, "timestamps": times}).to_string());
                    b.push('\n');
                }
                ("/api/v1/import", vec![], b.into_bytes())
            }
            Proto::Otlp => {
                let attr = |k: &str, v: String| KeyValue {
                    key: k.into(),
                    value: Some(AnyValue { value: Some(any_value::Value::StringValue(v)) }),
                    ..Default::default()
                };
                let mut points = Vec::new();
                for &(i, k) in &order {
                    points.push(NumberDataPoint {
                        attributes: vec![attr("host", format!("h{}", i % 1000)), attr("id", i.to_string())],
                        time_unix_nano: u64::try_from(ts(k)).unwrap_or(0) * 1_000_000,
                        value: Some(number_data_point::Value::AsDouble(v(i, k))),
                        ..Default::default()
                    });
                }
                let metric = Metric {
                    name: "bench.otlp".into(),
                    data: Some(Data::Gauge(Gauge { data_points: points })),
                    ..Default::default()
                };
                let req = ExportMetricsServiceRequest {
                    resource_metrics: vec![ResourceMetrics {
                        scope_metrics: vec![ScopeMetrics { metrics: vec![metric], ..Default::default() }],
                        ..Default::default()
                    }],
                };
                ("/opentelemetry/v1/metrics", vec![("Content-Type", "application/x-protobuf")], req.encode_to_vec())
            }
        };
        out.push(Request { path, headers, body, samples: ids.len() * args.samples });
    }
    out
}

/// What one send measured.
struct Sent {
    /// Samples per second, first request to last answer.
    rate: f64,
    /// CPU microseconds the server used per sample, first request until it was idle again.
    cpu_us: f64,
    /// Requests answered with a status other than 2xx.
    failed: usize,
    /// Seconds from the last answer until the server was idle, and whether it got there
    /// within the wait's limit.
    settled: (f64, bool),
}

/// Sends every request over `concurrency` connections to the server of process `pid`, then
/// waits for that server to be idle.
fn send(addr: SocketAddr, pid: &str, requests: &[Request], concurrency: usize) -> Sent {
    let cpu_before = crate::cpu_seconds(pid);
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..concurrency {
            scope.spawn(|| {
                let mut conn = Conn::connect(addr);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(r) = requests.get(i) else { break };
                    let (status, body) = conn.request("POST", r.path, &r.headers, &r.body);
                    if !(200..300).contains(&status) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut e = first_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        e.get_or_insert_with(|| format!("{status} {}", String::from_utf8_lossy(&body)));
                    }
                }
            });
        }
    });
    let secs = started.elapsed().as_secs_f64();
    if let Some(e) = first_error.into_inner().unwrap_or(None) {
        eprintln!("  first failure: {e}");
    }
    let samples: usize = requests.iter().map(|r| r.samples).sum();
    let (waited, idle) = crate::wait_idle(pid, std::time::Duration::from_secs(10));
    let cpu = crate::cpu_seconds(pid) - cpu_before;
    Sent {
        rate: samples as f64 / secs,
        cpu_us: cpu * 1e6 / samples.max(1) as f64,
        failed: failed.into_inner(),
        settled: (waited.as_secs_f64(), idle),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the benchmark with data under `root`.
pub fn run(args: &ProtocolArgs, root: &Path) {
    let tsdb_port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
    let vm = if args.no_peer {
        None
    } else {
        Peer::victoria_metrics_with(&root.join("vm"), &[format!("-opentsdbHTTPListenAddr=127.0.0.1:{tsdb_port}")])
    };
    if vm.is_none() && !args.no_peer {
        eprintln!("victoria-metrics is not installed: saltdb alone");
    }
    let saltdb = Server::spawn(&root.join("saltdb"), &["--retention", "0"]);
    let saltdb_pid = saltdb.pid();
    eprintln!("saltdb: pid {saltdb_pid}, {}", saltdb.addr);
    let now = chrono::Utc::now().timestamp_millis();
    let span = args.samples as i64 * 15_000;
    let t_first = now - 2 * 3_600_000 - (args.rounds as i64 + 1) * span;
    println!(
        "protocols: {} series x {} samples per round per protocol, {} samples per request, {} connections, {} new-series rounds, {} known-series rounds",
        args.series, args.samples, args.per_request, args.concurrency, args.new_rounds, args.rounds
    );
    println!(
        "{:<22} {:>13} {:>13} {:>6} {:>13} {:>6} {:>13} {:>13} {:>6} {:>15} {:>6}",
        "protocol",
        "saltdb new/s",
        "VM new/s",
        "ratio",
        "new CPU us/s",
        "ratio",
        "saltdb known/s",
        "VM known/s",
        "ratio",
        "known CPU us/s",
        "ratio"
    );
    for p in Proto::ALL.into_iter().filter(|p| args.only.is_empty() || args.only.iter().any(|o| o == p.tag())) {
        let mut figures: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut new: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut new_cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let new_rounds = args.new_rounds.max(1);
        for r in 0..new_rounds + args.rounds {
            // New-series rounds create series `r * series..`; known-series rounds write the
            // first round's series again, a span later each time.
            let is_new = r < new_rounds;
            let (t0, first) =
                if is_new { (t_first, r * args.series) } else { (t_first + (r + 1 - new_rounds) as i64 * span, 0) };
            let requests = round(p, args, t0, first);
            let vm_pid = vm.as_ref().map(Peer::pid).unwrap_or_default();
            let mut targets: Vec<(usize, Option<SocketAddr>, &str)> = vec![
                (0, Some(saltdb.addr), &saltdb_pid),
                (
                    1,
                    vm.as_ref().filter(|_| p != Proto::Otlp).and_then(|v| {
                        let base = if p == Proto::OpenTsdb {
                            format!("127.0.0.1:{tsdb_port}")
                        } else {
                            v.base.trim_start_matches("http://").to_owned()
                        };
                        base.parse().ok()
                    }),
                    &vm_pid,
                ),
            ];
            if r % 2 == 1 {
                targets.reverse();
            }
            for (who, addr, pid) in targets {
                let Some(addr) = addr else { continue };
                let Sent { rate, cpu_us, failed, settled } = send(addr, pid, &requests, args.concurrency);
                eprintln!(
                    "  {} round {} ({}) {}: {rate:.0} samples/s, {cpu_us:.2} us CPU/sample, idle {:.1} s later{}",
                    p.tag(),
                    r + 1,
                    if is_new { "new" } else { "known" },
                    ["saltdb", "victoria-metrics"][who],
                    settled.0,
                    if settled.1 { "" } else { " (still busy: stopped waiting)" }
                );
                if failed > 0 {
                    eprintln!(
                        "  {} round {}: {failed} requests failed on {}",
                        p.name(),
                        r + 1,
                        ["saltdb", "victoria-metrics"][who]
                    );
                }
                if is_new {
                    new[who].push(rate);
                    new_cpu[who].push(cpu_us);
                } else {
                    figures[who].push(rate);
                    cpu[who].push(cpu_us);
                }
            }
        }
        let new = new.map(median);
        let new_cpu = new_cpu.map(median);
        let [s, v] = figures;
        let (s, v) = (median(s), median(v));
        let [cs, cv] = cpu;
        let (cs, cv) = (median(cs), median(cv));
        let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.2}x", a / b) } else { "-".into() };
        println!(
            "{:<22} {:>13.0} {:>13.0} {:>6} {:>5.2} / {:<5.2} {:>6} {:>13.0} {:>13.0} {:>6} {:>7.2} / {:<5.2} {:>6}",
            p.name(),
            new[0],
            new[1],
            ratio(new[0], new[1]),
            new_cpu[0],
            new_cpu[1],
            ratio(new_cpu[0], new_cpu[1]),
            s,
            v,
            ratio(s, v),
            cs,
            cv,
            ratio(cs, cv)
        );
    }
    saltdb.stop();
}
