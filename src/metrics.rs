//! saltdb's own metrics, served at `GET /metrics` in the Prometheus text format through the
//! `prometheus` crate.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `saltdb_samples_ingested_total` | counter | `protocol` |
//! | `saltdb_samples_rejected_total` | counter | `protocol`, `reason` |
//! | `saltdb_write_requests_rejected_total` | counter | `protocol`, `reason` |
//! | `saltdb_tenant_samples_ingested_total` (with `--tenants`) | counter | `tenant` (one per tenant that wrote: tenants are few) |
//! | `saltdb_tenant_refused_total` (requests refused by `--tenant-limits-file`) | counter | `tenant`, `reason` (`tenant_rate_limited`, `tenant_label_too_long`, `tenant_series_limit`, `tenant_metric_series_limit`, `query_too_long`, `too_many_concurrent_queries`) |
//! | `saltdb_tenant_active_series` (series written in the last 30 to 60 minutes, of tenants with a series limit; set when scraped) | gauge | `tenant` |
//! | `saltdb_tenant_series` (series in the newest window; with `--tenants`, embedded store, refreshed at most every 5 minutes) | gauge | `tenant` |
//! | `saltdb_tenant_disk_bytes_estimated` (each window's bytes times the tenant's share of its series; as above) | gauge | `tenant` |
//! | `saltdb_tenant_figures_timestamp_seconds` (when the two above were computed) | gauge | |
//! | `saltdb_http_requests_total` | counter | `route`, `code` |
//! | `saltdb_http_request_duration_seconds` | histogram | `route`, `code` |
//! | `saltdb_storage_write_duration_seconds` (group commit wait, shows write stalls) | histogram | `protocol` |
//! | `saltdb_series` (all series ever created) | gauge | |
//! | `saltdb_active_series` (series with samples in the newest window) | gauge | |
//! | `saltdb_series_created_total` | counter | |
//! | `saltdb_storage_index_rows_scanned_total` (rows of full window-index walks) | counter | |
//! | `saltdb_samples_written_total` | counter | `bucket` |
//! | `saltdb_windows` | gauge | |
//! | `saltdb_retention_class_windows`, `saltdb_retention_class_disk_bytes` (see `--retention-rule`) | gauge | `class` (`default`, or the class's retention, e.g. `7d`) |
//! | `saltdb_disk_bytes`, `saltdb_table_disk_bytes` | gauge | `table` |
//! | `saltdb_metadata_families`, `saltdb_remote_write_label_cache_bytes` | gauge | |
//! | `saltdb_head_samples`, `saltdb_head_series`, `saltdb_head_bytes` (the in-memory head, see `--head-max-memory`) | gauge | |
//! | `saltdb_fjall_write_buffer_bytes`, `saltdb_fjall_block_cache_bytes`, `saltdb_fjall_outstanding_flushes`, `saltdb_fjall_active_compactions`, `saltdb_fjall_journal_files`, `saltdb_fjall_journal_bytes` | gauge | |
//! | `saltdb_fjall_pinned_bytes` (index and filter blocks pinned outside the block cache), `saltdb_labels_cache_bytes`, `saltdb_index_cache_bytes`, `saltdb_label_set_filter_bytes`, `saltdb_allocator_committed_bytes` (what mimalloc has committed, in use or free) | gauge | |
//! | `saltdb_query_result_cache_requests_total` (range queries that looked in the result cache, see `--query-result-cache-size`) | counter | `outcome` (`hit`: some steps came from it, `miss`) |
//! | `saltdb_query_result_cache_steps_total` (steps of those queries) | counter | `source` (`cache`, `evaluated`) |
//! | `saltdb_query_result_cache_bytes`, `saltdb_query_result_cache_entries` | gauge | |
//! | `saltdb_fjall_compactions_completed_total`, `saltdb_fjall_compaction_seconds_total` | counter | |
//! | `saltdb_http_connections_open` | gauge | |
//! | `saltdb_http_connections_accepted_total` | counter | |
//! | `saltdb_http_connections_closed_early_total` (closed by the server before their first request head) | counter | `reason` (`header_timeout`, `evicted`, `tls_handshake`) |
//! | `saltdb_clickhouse_requests_total` (on `--storage clickhouse`) | counter | `shard`, `replica` (its place in the shard's list, from 0), `outcome` (`ok`, `failed`) |
//! | `saltdb_clickhouse_request_seconds_total` (time spent in requests; divided by the requests, the mean latency) | counter | `shard`, `replica` |
//! | `saltdb_clickhouse_rows_written_total` | counter | `shard`, `replica`, `table` (`series`, `postings`, `samples`, `chunks`) |
//! | `process_*` (RSS, CPU, open fds, threads, start time) | from the `prometheus` crate | |
//!
//! Protocol label values: [`Protocol::label`]. The ingest series of every protocol and the
//! rejection reasons known in advance (`exemplar`, `storage_rejected`, `storage_failure`) exist
//! from start, at 0. (Native histograms are stored since format 4: there is no `native_histogram`
//! reason any more.)

use crate::storage::EngineStats;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Why the server closed a connection before its first complete request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyClose {
    /// It did not complete its head within `--header-read-timeout`.
    HeaderTimeout,
    /// Every slot was taken and it was the oldest pending connection.
    Evicted,
    /// Its TLS handshake failed or timed out.
    TlsHandshake,
}

impl EarlyClose {
    const ALL: [Self; 3] = [Self::HeaderTimeout, Self::Evicted, Self::TlsHandshake];

    fn label(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::Evicted => "evicted",
            Self::TlsHandshake => "tls_handshake",
        }
    }
}

/// Open connections and why some were closed early; clones share the registered metrics.
#[derive(Clone, Debug)]
pub struct ConnectionMetrics {
    open: IntGauge,
    accepted: IntCounter,
    closed_early: IntCounterVec,
}

impl ConnectionMetrics {
    fn register(r: &Registry) -> Self {
        let m = Self {
            open: gauge(r, "saltdb_http_connections_open", "HTTP connections open now."),
            accepted: register(
                r,
                IntCounter::new("saltdb_http_connections_accepted_total", "HTTP connections accepted since start.")
                    .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            closed_early: counter_vec(
                r,
                "saltdb_http_connections_closed_early_total",
                "Connections the server closed before their first complete request head, by reason.",
                &["reason"],
            ),
        };
        for reason in EarlyClose::ALL {
            m.closed_early.with_label_values(&[reason.label()]);
        }
        m
    }

    /// Unregistered figures (a server built without metrics, tests).
    pub fn detached() -> Self {
        Self::register(&Registry::new())
    }

    /// A connection was accepted; it counts as open until [`Self::closed`].
    pub fn accepted(&self) {
        self.accepted.inc();
        self.open.inc();
    }

    /// A connection ended.
    pub fn closed(&self) {
        self.open.dec();
    }

    /// A connection is being closed early, for `reason`.
    pub fn closed_early(&self, reason: EarlyClose) {
        self.closed_early.with_label_values(&[reason.label()]).inc();
    }
}

/// The ingest protocols counted separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Prometheus remote-write 1.0.
    RemoteWriteV1,
    /// Prometheus remote-write 2.0.
    RemoteWriteV2,
    /// JSON-lines import.
    Import,
    /// InfluxDB line protocol.
    Influx,
    /// OpenTSDB HTTP `/api/put`.
    OpenTsdb,
    /// Prometheus text exposition import.
    PromText,
    /// OTLP metrics over HTTP.
    Otlp,
}

impl Protocol {
    /// Every protocol.
    pub const ALL: [Self; 7] = [
        Self::RemoteWriteV1,
        Self::RemoteWriteV2,
        Self::Import,
        Self::Influx,
        Self::OpenTsdb,
        Self::PromText,
        Self::Otlp,
    ];

    /// Value of the `protocol` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::RemoteWriteV1 => "remote_write_v1",
            Self::RemoteWriteV2 => "remote_write_v2",
            Self::Import => "import",
            Self::Influx => "influx",
            Self::OpenTsdb => "opentsdb",
            Self::PromText => "prometheus_text",
            Self::Otlp => "otlp",
        }
    }
}

/// Storage figures the metrics mirror, refreshed at each scrape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageFigures {
    /// Series ever created.
    pub series_total: u64,
    /// Series with samples in the newest window, when storage knows it.
    pub active_series: Option<u64>,
    /// Series created since start.
    pub series_created: u64,
    /// Rows read by full walks of window indexes since start.
    pub index_rows_scanned: u64,
    /// Samples written per bucket since start (index = bucket).
    pub samples_per_bucket: Vec<u64>,
    /// Windows on disk.
    pub windows: u64,
    /// Per resolution a window keeps (`raw`, or the finest tier of a downsampled window, e.g.
    /// `5m`): its windows and their bytes on disk.
    pub windows_by_resolution: Vec<(String, u64, u64)>,
    /// Per retention class (`default`, or its retention, e.g. `7d`; see `--retention-rule`):
    /// its windows and their bytes on disk.
    pub windows_by_class: Vec<(String, u64, u64)>,
    /// Bytes allocated under the data directory, as `du` counts them.
    pub disk_bytes: u64,
    /// Bytes per table.
    pub table_bytes: Vec<(&'static str, u64)>,
    /// fjall's own figures, when available.
    pub engine: Option<EngineStats>,
}

/// `saltdb_tenant_samples_ingested_total` and `saltdb_tenant_refused_total`, shared.
#[derive(Clone, Debug)]
pub struct TenantCounters {
    ingested: IntCounterVec,
    refused: IntCounterVec,
}

impl TenantCounters {
    /// Counts samples stored for `tenant`.
    pub fn ingested(&self, tenant: &str, samples: usize) {
        self.ingested.with_label_values(&[tenant]).inc_by(samples as u64);
    }

    /// Counts a write of `tenant` refused by its limits, under `reason`.
    pub fn refused(&self, tenant: &str, reason: &str) {
        self.refused.with_label_values(&[tenant, reason]).inc();
    }
}

/// Every metric of the process, registered in one registry.
pub struct Metrics {
    registry: Registry,
    samples_ingested: IntCounterVec,
    samples_rejected: IntCounterVec,
    requests_rejected: IntCounterVec,
    tenant_ingested: IntCounterVec,
    tenant_refused: IntCounterVec,
    tenant_active_series: IntGaugeVec,
    tenant_series: IntGaugeVec,
    tenant_bytes: IntGaugeVec,
    tenant_figures_at: IntGauge,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    write_duration: HistogramVec,
    series: IntGauge,
    active_series: IntGauge,
    series_created: IntCounter,
    index_rows_scanned: IntCounter,
    samples_written: IntCounterVec,
    windows: IntGauge,
    resolution_windows: IntGaugeVec,
    resolution_bytes: IntGaugeVec,
    class_windows: IntGaugeVec,
    class_bytes: IntGaugeVec,
    disk_bytes: IntGauge,
    table_bytes: IntGaugeVec,
    metadata_families: IntGauge,
    label_cache: IntGauge,
    head_samples: IntGauge,
    head_series: IntGauge,
    head_bytes: IntGauge,
    fjall_write_buffer: IntGauge,
    fjall_pinned: IntGauge,
    labels_cache: IntGauge,
    index_cache: IntGauge,
    label_set_filter: IntGauge,
    allocator_committed: IntGauge,
    fjall_block_cache: IntGauge,
    fjall_outstanding_flushes: IntGauge,
    fjall_active_compactions: IntGauge,
    fjall_journal_files: IntGauge,
    fjall_journal_bytes: IntGauge,
    fjall_compactions: IntCounter,
    fjall_compaction_seconds: prometheus::Counter,
    connections: ConnectionMetrics,
    notifications: crate::rules::notify::metrics::NotifierMetrics,
    clickhouse_requests: IntCounterVec,
    clickhouse_seconds: prometheus::CounterVec,
    clickhouse_rows: IntCounterVec,
    result_cache_requests: IntCounterVec,
    result_cache_steps: IntCounterVec,
    result_cache_bytes: IntGauge,
    result_cache_entries: IntGauge,
    /// Serialises scrapes so counters mirrored from storage move monotonically.
    refresh: std::sync::Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| panic!("BUG: metric {name}: {e}"));
    register(r, c)
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(r, IntGaugeVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| panic!("BUG: metric {name}: {e}")))
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    register(r, IntGauge::new(name, help).unwrap_or_else(|e| panic!("BUG: metric {name}: {e}")))
}

fn register<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    if let Err(e) = r.register(Box::new(c.clone())) {
        panic!("BUG: registering a metric twice: {e}");
    }
    c
}

impl Metrics {
    /// Builds and registers every metric, process metrics included (on Linux).
    ///
    /// # Panics
    /// Only on a programming error (an invalid or duplicate metric name), never on input.
    pub fn new() -> Self {
        let r = Registry::new();
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "saltdb_http_request_duration_seconds",
                "HTTP request latency by route and status code.",
            )
            .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            &["route", "code"],
        )
        .unwrap_or_else(|e| panic!("BUG: histogram: {e}"));
        let write_duration = HistogramVec::new(
            HistogramOpts::new(
                "saltdb_storage_write_duration_seconds",
                "Time from handing a decoded batch to storage until it is durable (fjall write stalls show here).",
            )
            .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["protocol"],
        )
        .unwrap_or_else(|e| panic!("BUG: histogram: {e}"));
        #[cfg(target_os = "linux")]
        {
            let _ = r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()));
        }
        let m = Self {
            samples_ingested: counter_vec(
                &r,
                "saltdb_samples_ingested_total",
                "Samples accepted and stored, by ingest protocol.",
                &["protocol"],
            ),
            samples_rejected: counter_vec(
                &r,
                "saltdb_samples_rejected_total",
                "Samples not stored, by ingest protocol and reason (native histograms included).",
                &["protocol", "reason"],
            ),
            requests_rejected: counter_vec(
                &r,
                "saltdb_write_requests_rejected_total",
                "Write requests answered with a 4xx, by protocol and reason.",
                &["protocol", "reason"],
            ),
            tenant_ingested: counter_vec(
                &r,
                "saltdb_tenant_samples_ingested_total",
                "Samples accepted and stored, by tenant (only with --tenants; one series per tenant that wrote).",
                &["tenant"],
            ),
            tenant_refused: counter_vec(
                &r,
                "saltdb_tenant_refused_total",
                "Requests refused by a tenant's limits (--tenant-limits-file), by tenant and reason.",
                &["tenant", "reason"],
            ),
            tenant_active_series: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "saltdb_tenant_active_series",
                        "Active series of each tenant with max_global_series_per_user or max_global_series_per_metric: \
                         the distinct series it wrote samples to in the last 30 to 60 minutes, counted since start.",
                    ),
                    &["tenant"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            tenant_series: gauge_vec(
                &r,
                "saltdb_tenant_series",
                "Series of each tenant in the newest time window (with --tenants; refreshed at most every 5 minutes).",
                &["tenant"],
            ),
            tenant_bytes: gauge_vec(
                &r,
                "saltdb_tenant_disk_bytes_estimated",
                "Bytes on disk of each tenant, estimated as each window's bytes times the tenant's share of its series \
                 (with --tenants; refreshed at most every 5 minutes).",
                &["tenant"],
            ),
            tenant_figures_at: gauge(
                &r,
                "saltdb_tenant_figures_timestamp_seconds",
                "When saltdb_tenant_series and saltdb_tenant_disk_bytes_estimated were computed (Unix seconds).",
            ),
            http_requests: counter_vec(
                &r,
                "saltdb_http_requests_total",
                "HTTP requests by route and status code.",
                &["route", "code"],
            ),
            http_duration: register(&r, duration),
            write_duration: register(&r, write_duration),
            series: gauge(&r, "saltdb_series", "Series ever created (highest series id allocated)."),
            active_series: gauge(&r, "saltdb_active_series", "Series with samples in the newest time window."),
            series_created: register(
                &r,
                IntCounter::new("saltdb_series_created_total", "Series created since the process started.")
                    .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            index_rows_scanned: register(
                &r,
                IntCounter::new(
                    "saltdb_storage_index_rows_scanned_total",
                    "Rows read by full walks of a window's series index (seals, retention, measuring the active series); a scrape does none.",
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            clickhouse_requests: counter_vec(
                &r,
                "saltdb_clickhouse_requests_total",
                "Requests to each ClickHouse server, by shard, replica and outcome.",
                &["shard", "replica", "outcome"],
            ),
            clickhouse_seconds: register(
                &r,
                prometheus::CounterVec::new(
                    Opts::new(
                        "saltdb_clickhouse_request_seconds_total",
                        "Time spent in requests to each ClickHouse server, by shard and replica.",
                    ),
                    &["shard", "replica"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            clickhouse_rows: counter_vec(
                &r,
                "saltdb_clickhouse_rows_written_total",
                "Rows inserted into each ClickHouse server, by shard, replica and table.",
                &["shard", "replica", "table"],
            ),
            samples_written: counter_vec(
                &r,
                "saltdb_samples_written_total",
                "Samples written to storage since start, by row-key bucket.",
                &["bucket"],
            ),
            windows: gauge(&r, "saltdb_windows", "Time windows on disk."),
            resolution_windows: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "saltdb_windows_by_resolution",
                        "Time windows on disk by what they keep: raw samples, or the finest tier interval of a \
                         downsampled window (--downsample AGE:INTERVAL).",
                    ),
                    &["keeps"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            class_windows: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "saltdb_retention_class_windows",
                        "Time windows on disk by retention class: default, or the retention of a --retention-rule.",
                    ),
                    &["class"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            class_bytes: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "saltdb_retention_class_disk_bytes",
                        "Bytes on disk of the time windows (flushed tables) by retention class, as saltdb_retention_class_windows.",
                    ),
                    &["class"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            resolution_bytes: register(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "saltdb_window_disk_bytes",
                        "Bytes on disk of the time windows (flushed tables) by what they keep, as saltdb_windows_by_resolution.",
                    ),
                    &["keeps"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            disk_bytes: gauge(
                &r,
                "saltdb_disk_bytes",
                "Bytes allocated under the data directory (journal included), as du counts them.",
            ),
            table_bytes: register(
                &r,
                IntGaugeVec::new(
                    Opts::new("saltdb_table_disk_bytes", "Bytes on disk per table (flushed data)."),
                    &["table"],
                )
                .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            label_cache: gauge(
                &r,
                "saltdb_remote_write_label_cache_bytes",
                "Bytes of remote-write label sets kept by their wire bytes (bounded by --remote-write-label-cache).",
            ),
            metadata_families: gauge(
                &r,
                "saltdb_metadata_families",
                "Metric families with metadata received through remote-write.",
            ),
            head_samples: gauge(&r, "saltdb_head_samples", "Samples in the in-memory head, not yet flushed."),
            head_series: gauge(&r, "saltdb_head_series", "Series holding samples in the in-memory head."),
            head_bytes: gauge(&r, "saltdb_head_bytes", "Memory the in-memory head takes (bounded by --head-max-memory)."),
            fjall_write_buffer: gauge(&r, "saltdb_fjall_write_buffer_bytes", "Bytes in fjall's memtables."),
            fjall_block_cache: gauge(&r, "saltdb_fjall_block_cache_bytes", "Bytes in the block cache (bounded by --block-cache)."),
            fjall_pinned: gauge(
                &r,
                "saltdb_fjall_pinned_bytes",
                "Index and filter blocks fjall keeps pinned in memory outside the block cache.",
            ),
            labels_cache: gauge(&r, "saltdb_labels_cache_bytes", "Bytes of decoded label sets cached (bounded by --labels-cache)."),
            result_cache_requests: counter_vec(
                &r,
                "saltdb_query_result_cache_requests_total",
                "Range queries that looked in the query result cache, by whether some steps came from it.",
                &["outcome"],
            ),
            result_cache_steps: counter_vec(
                &r,
                "saltdb_query_result_cache_steps_total",
                "Steps of the range queries that looked in the query result cache, answered from it or evaluated.",
                &["source"],
            ),
            result_cache_bytes: gauge(
                &r,
                "saltdb_query_result_cache_bytes",
                "Bytes of range query steps held by the query result cache (bounded by --query-result-cache-size).",
            ),
            result_cache_entries: gauge(&r, "saltdb_query_result_cache_entries", "Entries of the query result cache."),
            index_cache: gauge(
                &r,
                "saltdb_index_cache_bytes",
                "Bytes of window-index answers (label names, values, selections) cached (bounded by --index-cache).",
            ),
            label_set_filter: gauge(
                &r,
                "saltdb_label_set_filter_bytes",
                "Bytes of the writer's filter of stored label sets (about 2 per series), which spares new series a lookup.",
            ),
            allocator_committed: gauge(
                &r,
                "saltdb_allocator_committed_bytes",
                "Memory the allocator (mimalloc) has committed from the OS, in use or kept free.",
            ),
            fjall_outstanding_flushes: gauge(
                &r,
                "saltdb_fjall_outstanding_flushes",
                "Memtables waiting to be flushed (a growing value precedes write stalls).",
            ),
            fjall_active_compactions: gauge(&r, "saltdb_fjall_active_compactions", "Compactions running now."),
            fjall_journal_files: gauge(&r, "saltdb_fjall_journal_files", "Journal files on disk."),
            fjall_journal_bytes: gauge(
                &r,
                "saltdb_fjall_journal_bytes",
                "Bytes of journal on disk (replayed at start-up).",
            ),
            fjall_compactions: register(
                &r,
                IntCounter::new("saltdb_fjall_compactions_completed_total", "Compactions completed since start.")
                    .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            fjall_compaction_seconds: register(
                &r,
                prometheus::Counter::new("saltdb_fjall_compaction_seconds_total", "Time spent compacting since start.")
                    .unwrap_or_else(|e| panic!("BUG: {e}")),
            ),
            connections: ConnectionMetrics::register(&r),
            notifications: crate::rules::notify::metrics::NotifierMetrics::register(&r),
            refresh: std::sync::Mutex::new(()),
            registry: r,
        };
        m.initialise_known_series();
        m
    }

    /// The Alertmanager notifier's figures (shares the registered metrics).
    pub fn notifications(&self) -> crate::rules::notify::metrics::NotifierMetrics {
        self.notifications.clone()
    }

    /// The figures the accept loop keeps (shares the registered metrics).
    pub fn connections(&self) -> ConnectionMetrics {
        self.connections.clone()
    }

    /// Creates, at 0, the ingest and rejection series known in advance (Prometheus'
    /// "avoid missing metrics"): a dashboard shows "0 rejected" instead of "no data", and
    /// `rate()` sees the first rejection instead of a series that appears already at 1.
    fn initialise_known_series(&self) {
        for protocol in Protocol::ALL {
            self.samples_ingested.with_label_values(&[protocol.label()]);
            let dropped: &[&str] = match protocol {
                Protocol::RemoteWriteV1 | Protocol::RemoteWriteV2 => &["exemplar"],
                Protocol::Influx => &["string_field"],
                _ => &[],
            };
            for reason in dropped.iter().chain(&["storage_rejected", "storage_failure"]) {
                self.samples_rejected.with_label_values(&[protocol.label(), reason]);
            }
        }
    }

    /// Counts stored samples.
    pub fn ingested(&self, protocol: Protocol, samples: usize) {
        self.samples_ingested.with_label_values(&[protocol.label()]).inc_by(samples as u64);
    }

    /// Counts samples that were not stored, and the request when `request` is true.
    pub fn rejected(&self, protocol: Protocol, reason: &str, samples: usize, request: bool) {
        if samples > 0 {
            self.samples_rejected.with_label_values(&[protocol.label(), reason]).inc_by(samples as u64);
        }
        if request {
            self.requests_rejected.with_label_values(&[protocol.label(), reason]).inc();
        }
    }

    /// The per-tenant ingest and refusal counters, shared (for writes made outside a request:
    /// a tenant's rule outputs).
    pub fn tenant_counters(&self) -> TenantCounters {
        TenantCounters { ingested: self.tenant_ingested.clone(), refused: self.tenant_refused.clone() }
    }

    /// Counts samples stored for `tenant`. Tenants are few (each one an operator's team), so
    /// the `tenant` label's cardinality stays bounded by the tenants that wrote.
    pub fn tenant_ingested(&self, tenant: &str, samples: usize) {
        self.tenant_ingested.with_label_values(&[tenant]).inc_by(samples as u64);
    }

    /// Counts a request of `tenant` refused by its limits, under `reason`.
    pub fn tenant_refused(&self, tenant: &str, reason: &str) {
        self.tenant_refused.with_label_values(&[tenant, reason]).inc();
    }

    /// Sets `saltdb_tenant_active_series` to `active` (tenant, series), dropping tenants not
    /// listed.
    pub fn set_tenant_active_series(&self, active: &[(String, usize)]) {
        self.tenant_active_series.reset();
        for (tenant, n) in active {
            self.tenant_active_series.with_label_values(&[tenant.as_str()]).set(clamp(*n as u64));
        }
    }

    /// Sets `saltdb_tenant_series` and `saltdb_tenant_disk_bytes_estimated` to `figures`
    /// (tenant, series in the newest window, estimated bytes), computed at `at_s` (Unix
    /// seconds), dropping tenants not listed.
    pub fn set_tenant_figures(&self, figures: &[(String, u64, u64)], at_s: i64) {
        self.tenant_series.reset();
        self.tenant_bytes.reset();
        for (tenant, series, bytes) in figures {
            self.tenant_series.with_label_values(&[tenant.as_str()]).set(clamp(*series));
            self.tenant_bytes.with_label_values(&[tenant.as_str()]).set(clamp(*bytes));
        }
        self.tenant_figures_at.set(at_s);
    }

    /// Bytes the remote-write label cache holds.
    pub fn set_label_cache(&self, bytes: usize) {
        self.label_cache.set(clamp(bytes as u64));
    }

    /// Records how long one storage write took (successful or not).
    pub fn observe_write(&self, protocol: Protocol, seconds: f64) {
        self.write_duration.with_label_values(&[protocol.label()]).observe(seconds);
    }

    /// Records one HTTP request. `route` must be a route pattern, never a raw path.
    pub fn observe_http(&self, route: &str, code: u16, seconds: f64) {
        let code = code.to_string();
        self.http_requests.with_label_values(&[route, &code]).inc();
        self.http_duration.with_label_values(&[route, &code]).observe(seconds);
    }

    /// Mirrors storage figures and the metadata count into the metrics.
    pub fn set_storage(&self, s: &StorageFigures, metadata_families: usize) {
        let _guard = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
        self.series.set(clamp(s.series_total));
        if let Some(active) = s.active_series {
            self.active_series.set(clamp(active));
        }
        advance(&self.series_created, s.series_created);
        advance(&self.index_rows_scanned, s.index_rows_scanned);
        for (bucket, &n) in s.samples_per_bucket.iter().enumerate() {
            advance(&self.samples_written.with_label_values(&[&bucket.to_string()]), n);
        }
        self.windows.set(clamp(s.windows));
        // A resolution no window keeps any more goes.
        self.resolution_windows.reset();
        self.resolution_bytes.reset();
        for (keeps, windows, bytes) in &s.windows_by_resolution {
            self.resolution_windows.with_label_values(&[keeps]).set(clamp(*windows));
            self.resolution_bytes.with_label_values(&[keeps]).set(clamp(*bytes));
        }
        self.class_windows.reset();
        self.class_bytes.reset();
        for (class, windows, bytes) in &s.windows_by_class {
            self.class_windows.with_label_values(&[class]).set(clamp(*windows));
            self.class_bytes.with_label_values(&[class]).set(clamp(*bytes));
        }
        self.disk_bytes.set(clamp(s.disk_bytes));
        for (table, bytes) in &s.table_bytes {
            self.table_bytes.with_label_values(&[table]).set(clamp(*bytes));
        }
        if let Some(e) = &s.engine {
            self.head_samples.set(clamp(e.head.samples));
            self.head_series.set(clamp(e.head.series));
            self.head_bytes.set(clamp(e.head.bytes));
            self.fjall_write_buffer.set(clamp(e.write_buffer_bytes));
            self.fjall_block_cache.set(clamp(e.block_cache_bytes));
            self.fjall_pinned.set(clamp(e.pinned_bytes));
            self.labels_cache.set(clamp(e.labels_cache_bytes));
            self.index_cache.set(clamp(e.index_cache_bytes));
            self.label_set_filter.set(clamp(e.label_set_filter_bytes));
            self.fjall_outstanding_flushes.set(clamp(e.outstanding_flushes));
            self.fjall_active_compactions.set(clamp(e.active_compactions));
            self.fjall_journal_files.set(clamp(e.journal_files));
            self.fjall_journal_bytes.set(clamp(e.journal_bytes));
            advance(&self.fjall_compactions, e.compactions_completed);
            let secs = e.compaction_micros as f64 / 1e6;
            let cur = self.fjall_compaction_seconds.get();
            if secs > cur {
                self.fjall_compaction_seconds.inc_by(secs - cur);
            }
        }
        self.metadata_families.set(clamp(metadata_families as u64));
        if let Some(committed) = crate::allocator::committed_bytes() {
            self.allocator_committed.set(clamp(committed));
        }
    }

    /// Mirrors the query result cache's counters and sizes.
    pub fn set_result_cache(&self, f: &crate::promql::result_cache::Figures) {
        let _guard = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
        advance(&self.result_cache_requests.with_label_values(&["hit"]), f.hits);
        advance(&self.result_cache_requests.with_label_values(&["miss"]), f.misses);
        advance(&self.result_cache_steps.with_label_values(&["cache"]), f.steps_cached);
        advance(&self.result_cache_steps.with_label_values(&["evaluated"]), f.steps_evaluated);
        self.result_cache_bytes.set(clamp(f.bytes));
        self.result_cache_entries.set(clamp(f.entries));
    }

    /// Mirrors the ClickHouse servers' counters (labelled by shard and replica number, in
    /// `--clickhouse-url` order).
    pub fn set_clickhouse(&self, replicas: &[crate::clickhouse::ReplicaFigures]) {
        let _guard = self.refresh.lock().unwrap_or_else(|e| e.into_inner());
        for s in replicas {
            let (shard, replica) = (s.shard.to_string(), s.replica.to_string());
            advance(&self.clickhouse_requests.with_label_values(&[&shard, &replica, "ok"]), s.requests_ok);
            advance(&self.clickhouse_requests.with_label_values(&[&shard, &replica, "failed"]), s.requests_failed);
            let seconds = self.clickhouse_seconds.with_label_values(&[&shard, &replica]);
            if s.request_seconds > seconds.get() {
                seconds.inc_by(s.request_seconds - seconds.get());
            }
            for (table, n) in s.rows_written {
                advance(&self.clickhouse_rows.with_label_values(&[&shard, &replica, table]), n);
            }
        }
    }

    /// Renders every metric in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Content type of [`Metrics::render`]'s output.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Moves a counter up to an absolute value taken from elsewhere (never down).
fn advance(c: &IntCounter, to: u64) {
    let cur = c.get();
    if to > cur {
        c.inc_by(to - cur);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_mirrors_storage_monotonically() {
        let m = Metrics::new();
        m.ingested(Protocol::RemoteWriteV1, 5);
        m.rejected(Protocol::RemoteWriteV1, "exemplar", 2, false);
        m.rejected(Protocol::Import, "invalid_json", 0, true);
        m.observe_http("/api/v1/write", 204, 0.002);
        let mut figures =
            StorageFigures { series_created: 7, samples_per_bucket: vec![3, 4], windows: 1, ..Default::default() };
        m.set_storage(&figures, 2);
        figures.series_created = 5; // a lower figure never moves a counter back
        m.set_storage(&figures, 2);
        let text = m.render();
        for needle in [
            r#"saltdb_samples_ingested_total{protocol="remote_write_v1"} 5"#,
            r#"saltdb_samples_rejected_total{protocol="remote_write_v1",reason="exemplar"} 2"#,
            r#"saltdb_write_requests_rejected_total{protocol="import",reason="invalid_json"} 1"#,
            r#"saltdb_http_requests_total{code="204",route="/api/v1/write"} 1"#,
            r#"saltdb_http_request_duration_seconds_bucket{code="204",route="/api/v1/write",le="0.0025"} 1"#,
            "saltdb_series_created_total 7",
            r#"saltdb_samples_written_total{bucket="1"} 4"#,
            "saltdb_windows 1",
            "saltdb_metadata_families 2",
            r#"saltdb_samples_ingested_total{protocol="import"} 0"#,
            r#"saltdb_samples_rejected_total{protocol="import",reason="storage_rejected"} 0"#,
            r#"saltdb_samples_rejected_total{protocol="remote_write_v2",reason="exemplar"} 0"#,
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }
}
