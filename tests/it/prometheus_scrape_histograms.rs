//! A real Prometheus 2.42 (`--enable-feature=native-histograms`) scrapes native histograms from
//! a test exporter speaking protobuf exposition and remote-writes them to saltdb
//! (`send_native_histograms: true`); the same histogram queries, answered by both at the same
//! times, must agree within 1e-6 (histograms by count, sum and every bucket).
//!
//! The exporter (a hyper server on 127.0.0.1:0 inside the test) serves varint-length-delimited
//! `io.prometheus.client.MetricFamily` messages whose histograms gain observations at every
//! scrape: integer histograms of schemas 3 and 0, a float histogram, and a gauge histogram.
//! Then two series disappear from the exporter, and answers after their staleness markers are
//! compared too.
//!
//! Skipped with a `SKIPPED:` line when `prometheus` is not on PATH, except when `CI` is set.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use saltdb::remote::proto::BucketSpan;

use crate::common::*;
use crate::peers::{available, Prometheus};
use crate::prometheus_diff::{deltas, get, spans, HistState, Rng, Tally};

/// `io.prometheus.client.MetricFamily` (the fields this exporter uses).
#[derive(Clone, PartialEq, prost::Message)]
struct MetricFamily {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    help: String,
    /// `MetricType`: 4 HISTOGRAM, 5 GAUGE_HISTOGRAM.
    #[prost(int32, tag = "3")]
    r#type: i32,
    #[prost(message, repeated, tag = "4")]
    metric: Vec<Metric>,
}

/// `io.prometheus.client.Metric` with a histogram.
#[derive(Clone, PartialEq, prost::Message)]
struct Metric {
    #[prost(message, repeated, tag = "1")]
    label: Vec<LabelPair>,
    #[prost(message, optional, tag = "7")]
    histogram: Option<Histogram>,
}

/// `io.prometheus.client.LabelPair`.
#[derive(Clone, PartialEq, prost::Message)]
struct LabelPair {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

/// `io.prometheus.client.Histogram`, native fields only (no classic buckets). A float count
/// above zero makes it a float histogram; a zero threshold above zero makes it native.
#[derive(Clone, PartialEq, prost::Message)]
struct Histogram {
    #[prost(uint64, tag = "1")]
    sample_count: u64,
    #[prost(double, tag = "2")]
    sample_sum: f64,
    #[prost(double, tag = "4")]
    sample_count_float: f64,
    #[prost(sint32, tag = "5")]
    schema: i32,
    #[prost(double, tag = "6")]
    zero_threshold: f64,
    #[prost(uint64, tag = "7")]
    zero_count: u64,
    #[prost(double, tag = "8")]
    zero_count_float: f64,
    #[prost(message, repeated, tag = "9")]
    negative_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "10")]
    negative_delta: Vec<i64>,
    #[prost(double, repeated, tag = "11")]
    negative_count: Vec<f64>,
    #[prost(message, repeated, tag = "12")]
    positive_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, tag = "13")]
    positive_delta: Vec<i64>,
    #[prost(double, repeated, tag = "14")]
    positive_count: Vec<f64>,
}

const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// How one exposed histogram gains observations at each scrape.
#[derive(Clone, Copy)]
enum Feed {
    /// 5-24 observations between 1/8 and 8 (8% exactly 0), weight 1 or, for a float
    /// histogram, a multiple of 1/4.
    Random,
    /// 9 observations in (0.5, 1] per observation in (1, 2]: the 0.9-quantile of any rate
    /// is the bucket boundary 1, where linear (2.42) and exponential (3.x) interpolation agree.
    Boundary,
}

/// One exposed histogram series.
struct Exposed {
    family: &'static str,
    gauge: bool,
    label: &'static str,
    schema: i32,
    float: bool,
    feed: Feed,
    state: HistState,
}

impl Exposed {
    fn new(family: &'static str, label: &'static str, schema: i32, float: bool, gauge: bool, feed: Feed) -> Self {
        Self { family, gauge, label, schema, float, feed, state: HistState::default() }
    }

    /// `n` random observations (the [`Feed::Random`] kind).
    fn observe_random(&mut self, n: usize, rng: &mut Rng) {
        for _ in 0..n {
            let weight = if self.float { 0.25 * (1.0 + (rng.next() * 8.0).floor()) } else { 1.0 };
            let v = if rng.next() < 0.08 { 0.0 } else { ((rng.next() * 6.0 - 3.0).exp2() * 1000.0).round() / 1000.0 };
            self.state.observe(v, weight, self.schema, ZERO_THRESHOLD);
        }
    }

    /// One scrape's worth: counters grow (from a large start, so that `rate` never extrapolates
    /// to a zero point, which 2.42 does not do for histograms and 3.x does); a gauge histogram
    /// is a fresh snapshot.
    fn advance(&mut self, rng: &mut Rng) {
        let n = match self.feed {
            Feed::Boundary => 10 * (1 + (rng.next() * 5.0) as usize),
            Feed::Random if self.gauge => {
                self.state = HistState::default();
                10 + (rng.next() * 40.0) as usize
            }
            Feed::Random if self.state.count == 0.0 => 500,
            Feed::Random => 5 + (rng.next() * 20.0) as usize,
        };
        if let Feed::Boundary = self.feed {
            // Exactly one in ten above 1, so the 0.9 rank falls on the boundary.
            let above = n / 10;
            for (v, k) in [(0.75, n - above), (1.5, above)] {
                for _ in 0..k {
                    self.state.observe(v, 1.0, self.schema, ZERO_THRESHOLD);
                }
            }
            return;
        }
        self.observe_random(n, rng);
    }

    fn to_proto(&self) -> Histogram {
        let st = &self.state;
        let (positive_span, pos) = spans(&st.positive);
        let (negative_span, neg) = spans(&st.negative);
        let mut h = Histogram {
            sample_sum: st.sum,
            schema: self.schema,
            zero_threshold: ZERO_THRESHOLD,
            positive_span,
            negative_span,
            ..Default::default()
        };
        if self.float {
            (h.sample_count_float, h.zero_count_float) = (st.count, st.zero);
            (h.positive_count, h.negative_count) = (pos, neg);
        } else {
            (h.sample_count, h.zero_count) = (st.count as u64, st.zero as u64);
            (h.positive_delta, h.negative_delta) = (deltas(&pos), deltas(&neg));
        }
        h
    }
}

const ZERO_THRESHOLD: f64 = 0.001;

/// The exporter's state: its series and how many scrapes it has answered.
struct Exporter {
    series: Vec<Exposed>,
    rng: Rng,
    scrapes: u64,
}

impl Exporter {
    fn new() -> Self {
        let series = vec![
            Exposed::new("scrape_latency_seconds", "a", 3, false, false, Feed::Random),
            Exposed::new("scrape_latency_seconds", "b", 0, false, false, Feed::Random),
            Exposed::new("scrape_boundary_seconds", "a", 0, false, false, Feed::Boundary),
            Exposed::new("scrape_weight_seconds", "a", 1, true, false, Feed::Random),
            Exposed::new("scrape_queue_depth", "a", 2, false, true, Feed::Random),
        ];
        Self { series, rng: Rng(0x5c4a9e), scrapes: 0 }
    }

    /// Advances every series and answers the scrape: one delimited `MetricFamily` per family.
    fn scrape(&mut self) -> Vec<u8> {
        self.scrapes += 1;
        for s in &mut self.series {
            s.advance(&mut self.rng);
        }
        let mut families: Vec<MetricFamily> = Vec::new();
        for s in &self.series {
            let metric = Metric {
                label: vec![LabelPair { name: "path".into(), value: s.label.into() }],
                histogram: Some(s.to_proto()),
            };
            match families.iter_mut().find(|f| f.name == s.family) {
                Some(f) => f.metric.push(metric),
                None => families.push(MetricFamily {
                    name: s.family.into(),
                    help: "A test histogram.".into(),
                    r#type: if s.gauge { 5 } else { 4 },
                    metric: vec![metric],
                }),
            }
        }
        let mut out = Vec::new();
        for f in families {
            f.encode_length_delimited(&mut out).expect("encode to a Vec");
        }
        out
    }
}

/// Serves the exporter on `listener` until the runtime stops.
async fn serve(listener: tokio::net::TcpListener, exporter: Arc<Mutex<Exporter>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let exporter = exporter.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |_req| {
                let body = exporter.lock().unwrap().scrape();
                async move {
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .header("Content-Type", CONTENT_TYPE)
                            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                            .unwrap(),
                    )
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

/// Queries compared as they are (histograms by count, sum and buckets).
const QUERIES: &[&str] = &[
    "scrape_latency_seconds",
    "scrape_weight_seconds",
    "scrape_queue_depth",
    "rate(scrape_latency_seconds[1m])",
    "rate(scrape_weight_seconds[1m])",
    "histogram_count(rate(scrape_latency_seconds[1m]))",
    "histogram_sum(rate(scrape_latency_seconds[1m]))",
    "histogram_count(rate(scrape_weight_seconds[1m]))",
    "histogram_sum(rate(scrape_weight_seconds[1m]))",
    "histogram_count(scrape_queue_depth)",
    "histogram_sum(scrape_queue_depth)",
    "increase(scrape_latency_seconds[30s])",
    "sum(rate(scrape_latency_seconds[1m]))",
    "histogram_fraction(0, 1, rate(scrape_latency_seconds[1m]))",
    "histogram_quantile(0.9, rate(scrape_boundary_seconds[1m]))",
    "histogram_quantile(0.9, sum(rate(scrape_boundary_seconds[30s])))",
];

/// `histogram_quantile(q, inner)` queries, compared through each version's interpolation rule
/// ([`Tally::quantile`]).
const QUANTILES: &[(f64, &str)] = &[
    (0.9, "rate(scrape_latency_seconds[1m])"),
    (0.5, "rate(scrape_latency_seconds[1m])"),
    (0.9, "rate(scrape_weight_seconds[1m])"),
    (0.99, "sum(rate(scrape_latency_seconds[1m]))"),
    (0.9, "scrape_queue_depth"),
];

fn prometheus_config(exporter: std::net::SocketAddr, saltdb: std::net::SocketAddr) -> String {
    format!(
        r#"
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: exporter
    static_configs: [{{targets: ["{exporter}"]}}]
remote_write:
  - url: http://{saltdb}/api/v1/write
    send_native_histograms: true
    queue_config: {{batch_send_deadline: 500ms, max_samples_per_send: 2000}}
"#
    )
}

/// The value of a one-element instant vector, or NaN.
fn scalar_answer(base: &str, query: &str, at_ms: i64) -> f64 {
    let v = get(base, "/api/v1/query", &[("query", query.to_owned()), ("time", (at_ms as f64 / 1000.0).to_string())]);
    v["data"]["result"][0]["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

/// A query time 1.5-2.5 s ago, half a second off the millisecond phase of the scrapes: no
/// window of a query at it (or whole seconds away) starts exactly on a sample, where 2.x
/// includes the sample and 3.x leaves it out.
fn off_scrape_grid(prom: &str) -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    let last = scalar_answer(prom, "timestamp(scrape_latency_seconds{path=\"a\"})", now);
    assert!(last.is_finite(), "prometheus has no scraped sample");
    let phase = ((last * 1000.0).round() as i64 + 500).rem_euclid(1000);
    let t = now - 2_500;
    t - t.rem_euclid(1000) + phase + if phase < t.rem_euclid(1000) { 1000 } else { 0 }
}

#[test]
fn scraped_native_histograms_match_prometheus() {
    let test = "prometheus_scrape_histograms::scraped_native_histograms_match_prometheus";
    if !available("prometheus", test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let salt = InProcess::start(storage_config(&dir.path().join("salt")));
    let exporter = Arc::new(Mutex::new(Exporter::new()));
    let rt = runtime();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let exporter_addr = listener.local_addr().unwrap();
    rt.spawn(serve(listener, exporter.clone()));
    std::fs::create_dir_all(dir.path().join("prom")).unwrap();
    let prom = Prometheus::start_with(
        &dir.path().join("prom"),
        &prometheus_config(exporter_addr, salt.addr),
        &["--enable-feature=native-histograms"],
    );

    // A dozen scrapes, then everything up to `t_end` delivered to saltdb.
    let deadline = Instant::now() + Duration::from_secs(90);
    while exporter.lock().unwrap().scrapes < 14 {
        assert!(Instant::now() < deadline, "prometheus scraped the exporter too few times");
        std::thread::sleep(Duration::from_millis(250));
    }
    let t_end = off_scrape_grid(&prom.base);
    let (s, p) = (salt.url(""), prom.base.clone());
    // Every exposed series' samples so far, as a catch-up measure (remote-write shards may
    // deliver series at different times).
    let count = &["scrape_latency_seconds", "scrape_boundary_seconds", "scrape_weight_seconds", "scrape_queue_depth"]
        .map(|name| format!("(sum(count_over_time({name}[1m])) or vector(0))"))
        .join(" + ");
    let want = scalar_answer(&p, count, t_end);
    assert!(want >= 50.0, "prometheus holds {want} histograms of the exporter");
    while scalar_answer(&s, count, t_end) != want {
        assert!(Instant::now() < deadline, "saltdb did not receive the {want} scraped histograms");
        std::thread::sleep(Duration::from_millis(250));
    }

    let instants = [t_end, t_end - 2_317, t_end - 5_450];
    // What the data must look like in Prometheus for the comparison to mean something: the
    // 0.9-quantile of the boundary series on the bucket boundary, the float histogram's counts
    // fractional somewhere.
    let boundary = "histogram_quantile(0.9, rate(scrape_boundary_seconds[1m]))";
    assert!((scalar_answer(&p, boundary, t_end) - 1.0).abs() < 1e-9, "{boundary} in prometheus");
    let fractional = instants
        .iter()
        .map(|&at| scalar_answer(&p, "histogram_count(scrape_weight_seconds)", at))
        .any(|c| c.fract() != 0.0);
    assert!(fractional, "scrape_weight_seconds is not a float histogram in prometheus");
    let range = |query: &str| {
        vec![
            ("query", query.to_owned()),
            ("start", ((t_end - 8_000) as f64 / 1000.0).to_string()),
            ("end", (t_end as f64 / 1000.0).to_string()),
            ("step", "1".to_owned()),
        ]
    };
    let mut tally = Tally::default();
    let mut queries: Vec<String> = QUERIES.iter().map(|q| (*q).to_owned()).collect();
    // The raw samples themselves, as stored by both.
    queries.push("scrape_latency_seconds[20s]".into());
    queries.push("scrape_weight_seconds[20s]".into());
    for q in &queries {
        for at in instants {
            let params = [("query", q.clone()), ("time", (at as f64 / 1000.0).to_string())];
            let (o, t) = (get(&s, "/api/v1/query", &params), get(&p, "/api/v1/query", &params));
            tally.answers(format!("instant {q} @ {at}"), &o, &t);
        }
        if !q.ends_with("s]") {
            let params = range(q);
            let (o, t) = (get(&s, "/api/v1/query_range", &params), get(&p, "/api/v1/query_range", &params));
            tally.answers(format!("range {q}"), &o, &t);
        }
    }
    for &(q, inner) in QUANTILES {
        for at in instants {
            let params = [("time", (at as f64 / 1000.0).to_string())];
            tally.quantile(&s, &p, "/api/v1/query", q, inner, &params);
        }
        tally.quantile(&s, &p, "/api/v1/query_range", q, inner, &range(inner));
    }
    eprintln!(
        "prometheus_scrape_histograms: {} comparisons, {} differ; {} histogram_quantile answers differ between \
         saltdb and 2.42 by interpolation alone; empty in Prometheus: {:?}",
        tally.compared,
        tally.failures.len(),
        tally.interpolation_differs,
        tally.empty
    );
    assert!(tally.empty.is_empty(), "queries without an answer compare nothing: {:?}", tally.empty);

    // Two series disappear from the exporter: Prometheus writes staleness markers for them (a
    // histogram whose sum is the stale NaN, remote-written as such), after which neither may
    // answer them at an instant, and range functions must leave the markers out.
    exporter.lock().unwrap().series.retain(|s| s.family != "scrape_queue_depth" && s.label != "b");
    let before = exporter.lock().unwrap().scrapes;
    while exporter.lock().unwrap().scrapes < before + 4 {
        assert!(Instant::now() < deadline + Duration::from_secs(30), "no scrapes after the drop");
        std::thread::sleep(Duration::from_millis(250));
    }
    let t_stale = off_scrape_grid(&prom.base);
    let want = scalar_answer(&p, count, t_stale);
    while scalar_answer(&s, count, t_stale) != want {
        assert!(Instant::now() < deadline + Duration::from_secs(40), "saltdb did not catch up after the drop");
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_secs(1));
    let stale_queries = [
        "scrape_latency_seconds",
        "scrape_queue_depth",
        "histogram_count(scrape_queue_depth)",
        "count_over_time(scrape_queue_depth[20s])",
        "count_over_time(scrape_latency_seconds[20s])",
        "scrape_queue_depth[20s]",
        "scrape_latency_seconds[20s]",
        "rate(scrape_latency_seconds[1m])",
        "histogram_count(rate(scrape_latency_seconds[1m]))",
        "sum(scrape_queue_depth)",
        "absent(scrape_queue_depth)",
    ];
    let before_stale = tally.compared;
    for q in stale_queries {
        for at in [t_stale, t_stale - 1_250] {
            let params = [("query", q.to_owned()), ("time", (at as f64 / 1000.0).to_string())];
            let (o, t) = (get(&s, "/api/v1/query", &params), get(&p, "/api/v1/query", &params));
            tally.answers(format!("after the drop: instant {q} @ {at}"), &o, &t);
        }
        if !q.ends_with("s]") {
            let params = [
                ("query", q.to_owned()),
                ("start", ((t_stale - 12_000) as f64 / 1000.0).to_string()),
                ("end", (t_stale as f64 / 1000.0).to_string()),
                ("step", "1".to_owned()),
            ];
            let (o, t) = (get(&s, "/api/v1/query_range", &params), get(&p, "/api/v1/query_range", &params));
            tally.answers(format!("after the drop: range {q}"), &o, &t);
        }
    }
    eprintln!(
        "prometheus_scrape_histograms after the drop: {} comparisons; {} differ in all",
        tally.compared - before_stale,
        tally.failures.len()
    );
    assert!(
        tally.failures.is_empty(),
        "{} of {} answers differ from Prometheus:\n{}",
        tally.failures.len(),
        tally.compared,
        tally.failures.join("\n")
    );
    drop(prom);
    salt.stop();
}
