//! The command line (clap).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::http::access::{AccessPolicy, Credentials, CredentialsError, Exposure, SecretString};
use crate::http::admission::DECODED_FACTOR;
use crate::http::connections::ConnectionLimits;
use crate::http::tls::TlsFiles;
use crate::http::{Limits, QueryConfig};
use crate::ingest::SeriesLimits;
use crate::promql::EngineOptions;
use crate::server::{Maintenance, ServerConfig};
use crate::storage::{BucketScheme, FsyncMode, HeadLimits, StorageConfig};
use crate::tenant::LimitsFile;

/// saltdb: a time-series database for Prometheus remote-write and the Prometheus query API.
#[derive(Debug, Parser)]
#[command(name = "saltdb", version, about, long_about = None)]
pub struct Cli {
    /// Log lines on stderr: `text` (coloured only on a terminal) or `json` (one object per
    /// line). The level comes from `RUST_LOG` (default `info`, the storage library at `warn`).
    #[arg(long, value_enum, global = true, default_value_t = crate::logs::LogFormat::Text)]
    pub log_format: crate::logs::LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's command line (exiting with clap's message on an error) and, for
    /// `serve`, records every flag's value for `/api/v1/status/flags`.
    pub fn parse_with_flags() -> Self {
        Self::try_parse_with_flags_from(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// As [`Cli::parse_with_flags`], from `args` (the first is the program name).
    ///
    /// # Errors
    /// clap's error for an invalid command line.
    pub fn try_parse_with_flags_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let command = Self::command();
        let matches = command.clone().try_get_matches_from(args)?;
        let mut cli = Self::from_arg_matches(&matches)?;
        if let (Command::Serve(serve), Some(("serve", given)), Some(spec)) =
            (&mut cli.command, matches.subcommand(), command.find_subcommand("serve"))
        {
            serve.flags = flag_values(spec, given);
        }
        Ok(cli)
    }
}

/// Each flag of `spec` (by its long name) with its value in `given`: as typed or defaulted,
/// several values joined by commas; secrets (flags whose environment values clap hides) show
/// only `<set>` or an empty string.
fn flag_values(spec: &clap::Command, given: &clap::ArgMatches) -> std::collections::BTreeMap<String, String> {
    spec.get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let id = arg.get_id().as_str();
            let raw = given.get_raw(id).map(|vals| vals.map(|v| v.to_string_lossy()).collect::<Vec<_>>().join(","));
            let value = match raw {
                Some(_) if arg.is_hide_env_values_set() => "<set>".to_owned(),
                Some(v) => v,
                None => String::new(),
            };
            Some((long.to_owned(), value))
        })
        .collect()
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(Box<ServeArgs>),
    /// Print a running server's time windows (state, series, samples, bytes per sample).
    Inspect {
        /// The server's base URL.
        #[arg(long, default_value = "http://127.0.0.1:9201")]
        url: String,
        /// Print the tenants instead (series in the newest window, estimated bytes on disk).
        #[arg(long)]
        tenants: bool,
    },
    /// Send files of JSON lines, Prometheus text or InfluxDB line protocol to a running server,
    /// in batches, with retries and progress.
    Import(crate::backfill::ImportArgs),
    /// Write a running server's series out as JSON lines (the import format).
    Export(crate::backfill::ExportArgs),
    /// Run unit tests of rules (the `promtool test rules` format).
    #[command(subcommand)]
    Test(TestCommand),
    /// Print where the bytes of a stopped server's data directory go: bytes on disk per
    /// keyspace, and rows and bytes per key family within each.
    DiskUsage {
        /// The data directory (no server may be running on it).
        #[arg(long, default_value = "./saltdb-data")]
        data_dir: PathBuf,
    },
    /// Check files without a server, as `promtool check` does.
    #[command(subcommand)]
    Check(CheckCommand),
    /// Work with rules on a running server.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Work with a saltdb database on ClickHouse.
    #[command(subcommand, name = "clickhouse")]
    ClickHouse(ClickHouseCommand),
}

/// `saltdb clickhouse` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClickHouseCommand {
    /// Move a database of unreplicated shards onto replicated ones: each shard's old server
    /// becomes one of its replicas, its tables copied into `Replicated*MergeTree` ones the other
    /// replicas fetch through ZooKeeper. Stop every saltdb node of the database first; run again
    /// after an interruption.
    Replicate {
        /// The shards as `saltdb serve` will be given them: each shard's replicas joined by `|`,
        /// the old server among them (every server configured with ZooKeeper and a `replica`
        /// macro).
        #[arg(long, value_delimiter = ',', required = true)]
        clickhouse_url: Vec<String>,
        /// The database.
        #[arg(long, default_value = "saltdb")]
        clickhouse_database: String,
    },
}

/// `saltdb rules` subcommands.
#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Evaluate rule files over past data on a running server, as if they had been running
    /// then: recording rules' outputs and alerting rules' `ALERTS` and `ALERTS_FOR_STATE`
    /// series written at their historic timestamps. Exit status 1 when a file is refused or any
    /// rule evaluation failed.
    Replay(crate::rules::replay::client::ReplayArgs),
}

/// `saltdb check` subcommands.
#[derive(Debug, Subcommand)]
pub enum CheckCommand {
    /// Check Prometheus rule files as `promtool check rules` does: each is parsed and validated,
    /// its problems printed in Prometheus' words, and rules of the same name and labels reported.
    /// Exit status 1 when a file is refused.
    Rules(crate::rules::file::check::CheckRulesArgs),
}

/// `saltdb test` subcommands.
#[derive(Debug, Subcommand)]
pub enum TestCommand {
    /// Run rule unit test files (`promtool test rules` format) on saltdb's rule evaluator; exits
    /// 1 when any test fails.
    Rules {
        /// Unit test files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// `saltdb serve` flags.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (HTTP).
    #[arg(long, default_value = "127.0.0.1:9201")]
    pub listen: SocketAddr,
    /// Data directory; created if missing.
    #[arg(long, default_value = "./saltdb-data")]
    pub data_dir: PathBuf,
    /// Where the data lives: `embedded` (in --data-dir) or `clickhouse` (on the shards of
    /// --clickhouse-url; this node then keeps no data, and any number of nodes can share them).
    #[arg(long, value_enum, default_value_t = StorageKind::Embedded)]
    pub storage: StorageKind,
    /// ClickHouse shards for `--storage clickhouse`: comma-separated HTTP URLs
    /// (`http://h1:8123,http://h2:8123`). Their order is the shard numbering and must stay the
    /// same for a database. A shard of several replicas lists them joined by `|`
    /// (`http://a1:8123|http://a2:8123,http://b1:8123|http://b2:8123`): its tables are then
    /// replicated through ZooKeeper, and requests fail over between its replicas.
    #[arg(long, value_delimiter = ',')]
    pub clickhouse_url: Vec<String>,
    /// Create replicated tables (`Replicated*MergeTree`, through the servers' ZooKeeper) even
    /// when every shard lists one server, so replicas can be added later. Implied by a shard of
    /// several replicas.
    #[arg(long)]
    pub clickhouse_replicated: bool,
    /// Replicas of a shard that must hold a write before it is acknowledged (ClickHouse's
    /// `insert_quorum`). 1 keeps writes going while a shard has one replica up; 2 of 3 replicas
    /// keeps them going and survives the loss of a replica's disk.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub clickhouse_insert_quorum: u32,
    /// ClickHouse database holding saltdb's tables (created on every shard at start-up).
    #[arg(long, default_value = "saltdb")]
    pub clickhouse_database: String,
    /// Buckets the series are spread over on ClickHouse (a bucket lives on shard
    /// `bucket % shards`). Fixed for a database.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub clickhouse_buckets: u16,
    /// When a ClickHouse shard is down, answer queries from the others with a warning naming
    /// it (as Thanos and Mimir can) instead of a 503. Writes that need it still fail.
    #[arg(long)]
    pub clickhouse_partial_reads: bool,
    /// Number of buckets (1..=4096) the row keys are spread over. Fixed when the data directory
    /// is created; opening it with another value fails.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub buckets: u16,
    /// How a series is mapped to its bucket: `hash` (md5 prefix of the series id) or `modulo`
    /// (series id modulo buckets). Fixed when the data directory is created.
    #[arg(long, value_enum, default_value_t = BucketScheme::Hash)]
    pub bucket_scheme: BucketScheme,
    /// Length of a time window (one keyspace each), e.g. 2h or 1d. Fixed when the data directory
    /// is created. Units: ms s m h d w.
    #[arg(long, default_value = "1d", value_parser = parse_window)]
    pub window: i64,
    /// How long samples are kept; whole windows older than this are dropped. `0` keeps forever.
    #[arg(long, default_value = "30d", value_parser = parse_duration)]
    pub retention: i64,
    /// Downsampled tiers to build beside the raw samples, separated by commas (e.g. `5m,1h`):
    /// each sealed window gets, per series and interval, the aggregates every range function
    /// needs, and range queries whose steps and ranges are whole intervals read them instead of
    /// every raw sample (`max_source_resolution` chooses). Each interval must divide --window.
    /// An interval written `AGE:INTERVAL` (`7d:5m,60d:1h`) also ages: windows older than AGE
    /// drop their raw samples and finer tiers, keeping that interval's points and coarser ones
    /// (a coarser interval needs a longer age, and every age must be below --retention).
    /// Without an age raw samples are kept for the whole retention. Embedded storage only.
    #[arg(long, value_delimiter = ',', value_parser = parse_tier)]
    pub downsample: Vec<TierSpec>,
    /// A retention for the series a selector matches, `SELECTOR:DURATION` (e.g.
    /// `'{team="batch"}:7d'`, `'{__name__=~"debug_.*"}:2d'`, `'{env="prod"}:1y'`). Repeatable; the
    /// first rule a series matches decides (rules of --retention-rules-file come after these);
    /// a series matching none keeps --retention. Each retention keeps its own windows, dropped
    /// whole when it passes. Embedded storage only.
    #[arg(long = "retention-rule", value_parser = parse_retention_rule)]
    pub retention_rules: Vec<crate::storage::RetentionRule>,
    /// A file of retention rules, one `SELECTOR:DURATION` per line (blank lines and lines
    /// starting with `#` are skipped), read at start-up, after the --retention-rule flags.
    #[arg(long)]
    pub retention_rules_file: Option<std::path::PathBuf>,
    /// Samples further ahead of the server's clock than this are refused with 400 (the whole
    /// request, like samples older than retention). `0` accepts any timestamp up to 2262.
    /// The default is VictoriaMetrics' bound; Prometheus 2.42 has none.
    #[arg(long, default_value = "2d", value_parser = parse_duration)]
    pub max_future: i64,
    /// What a 2xx on a write promises beyond surviving `kill -9` (which every mode does):
    /// `always` fsyncs before answering (survives power loss; slowest), `batch` fsyncs every
    /// second in the background (a power loss loses at most ~1 s), `never` leaves it to the OS.
    #[arg(long, value_enum, default_value_t = FsyncMode::Batch)]
    pub fsync: FsyncMode,
    /// Largest request body accepted, also after gzip/snappy decompression (e.g. 64MiB).
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub max_request_bytes: usize,
    /// Write requests (remote-write and import) handled at once; more are refused with 429
    /// and `Retry-After` (Prometheus backs off and retries).
    #[arg(long, default_value_t = crate::http::admission::DEFAULT_MAX_CONCURRENT_WRITES)]
    pub max_concurrent_writes: usize,
    /// Memory all write requests in flight may hold together: bodies as received, their
    /// decompressed form and the decoded samples (computed from the body before decoding). A
    /// request that does not fit gets 429 and `Retry-After`; one that could never fit gets 413.
    /// Must be at least 4x --max-request-bytes.
    #[arg(long, default_value = "512MiB", value_parser = parse_bytes)]
    pub max_inflight_bytes: usize,
    /// Memory for the label sets remote-write 1.0 requests repeat every scrape, kept as they
    /// arrive on the wire (about 200 bytes a series): a series sent before skips label parsing
    /// and checks (8 MiB holds about 40,000 series). Series beyond it are decoded in full, as with
    /// 0 (off).
    #[arg(long, default_value = "8MiB", value_parser = parse_bytes)]
    pub remote_write_label_cache: usize,
    /// Most connections open at once. When all are taken, a new connection closes the oldest one
    /// that has not sent a complete request head yet; if none is pending, it waits to be accepted.
    /// The default is Prometheus' --web.max-connections.
    #[arg(long, default_value_t = crate::http::connections::DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Longest a new connection may take to send its first complete request head (TLS handshake
    /// included); slower connections are closed.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub header_read_timeout: i64,
    /// Longest a kept-alive connection may wait, after a response, for its next complete
    /// request head; then it is closed.
    #[arg(long, default_value = "1m", value_parser = parse_positive_duration)]
    pub idle_timeout: i64,
    /// Longest a request's body may take to arrive completely, counted from its head; a slower
    /// body gets a 408 and its connection is closed. The default is Prometheus'
    /// --web.read-timeout.
    #[arg(long, default_value = "5m", value_parser = parse_positive_duration)]
    pub body_read_timeout: i64,
    /// Most labels one series may carry.
    #[arg(long, default_value_t = 128)]
    pub max_labels_per_series: usize,
    /// Longest label name or value, in bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    pub max_label_bytes: usize,
    /// Rewrite the label names InfluxDB line protocol tag keys, OpenTSDB tag keys and OTLP
    /// attributes (under `--otlp-metric-names keep-utf8`) give, as saltdb did before keeping
    /// them as sent: every character outside `[a-zA-Z0-9_]` becomes `_` and a leading digit gets
    /// a `_` (`dc-id` -> `dc_id`, `tag,x` -> `tag_x`), so two keys may collide into one label.
    /// By default names are kept as sent (any non-empty UTF-8), as Prometheus 3 and
    /// VictoriaMetrics keep them. Metric names are kept as sent either way.
    #[arg(long)]
    pub ingest_legacy_label_names: bool,
    /// Most series one remote-write request or import may carry (import: one per line); more is
    /// rejected with 400. The default never bothers Prometheus (it sends ~2,000 per request).
    #[arg(long, default_value_t = crate::ingest::DEFAULT_MAX_SERIES_PER_REQUEST)]
    pub max_series_per_request: usize,
    /// Memory for the in-memory cache from label set to series id (about 32 bytes a series;
    /// a series missing from it costs one point read per write). `auto`: 1/32 of the machine's
    /// memory, between 64MiB and 2GiB (768MiB, ~25M series, on a 24 GiB machine). On ClickHouse,
    /// the node's set of series already indexed that day (about 32 bytes a series and day).
    #[arg(long, default_value = "auto", value_parser = parse_bytes_or_auto)]
    pub series_cache: MemorySize,
    /// Samples the in-memory head holds before it is flushed into the window keyspaces (about
    /// 16 bytes each), or 4 per series it holds when that is more (so that each series' run on
    /// disk holds several samples at millions of active series), within `--head-max-memory`.
    /// Acknowledged samples in the head are in the write-ahead log, replayed at the next start
    /// after a crash.
    #[arg(long, default_value_t = 4_000_000)]
    pub head_max_samples: usize,
    /// Most memory the head may take (96 bytes a series, which holds its first 4 samples, and 16
    /// bytes a sample of a series holding more) before it is flushed, whatever
    /// `--head-max-samples` allows. `auto`: 1/16 of the machine's
    /// memory, between 256MiB and 4GiB (1.5GiB on a 24 GiB machine).
    #[arg(long, default_value = "auto", value_parser = parse_bytes_or_auto)]
    pub head_max_memory: MemorySize,
    /// Longest a sample stays in the head before a flush (bounds the log replayed after a
    /// crash; longer gives longer runs on disk, which read faster).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub head_flush_interval: i64,
    /// How long after a window closes its hot rows are sealed into compressed chunks. Late
    /// samples arriving after that still land and are merged by the next seal. `0` seals as soon
    /// as a window closes.
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub ooo_grace: i64,
    /// How often retention and sealing run in the background.
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub maintenance_interval: i64,
    /// Longest a query may run before it fails with a timeout (clients may ask for less).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub query_timeout: i64,
    /// Most samples one query may hold in memory at once (what its selectors keep once reduced
    /// to the values its steps read, cached step values, its result); beyond it the query fails
    /// (422).
    #[arg(long, default_value_t = 50_000_000)]
    pub query_max_samples: usize,
    /// Most samples one query may read from storage, however few it holds; beyond it the query
    /// fails (422).
    #[arg(long, default_value_t = crate::promql::DEFAULT_MAX_SCANNED_SAMPLES)]
    pub query_max_scanned_samples: usize,
    /// Most memory one query's evaluation may hold, in bytes: loaded series (samples and
    /// labels), cached subquery steps and rollup values, subquery windows and the result being
    /// assembled. Beyond it the query fails (422). Responses are streamed, so answering adds
    /// little on top.
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub query_max_memory: usize,
    /// Queries evaluated at once; further queries wait for a slot until their timeout (then 503).
    #[arg(long, default_value_t = 20)]
    pub query_max_concurrency: usize,
    /// Log every query (instant, range) that runs at least this long, at `warn`: the query,
    /// its time range, duration, samples read and the client's address. `0` turns it off. The
    /// default follows VictoriaMetrics' `-search.logSlowQueryDuration` (5s).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub query_log_slow: i64,
    /// How far back an instant selector looks for the latest sample.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub query_lookback_delta: i64,
    /// Memory for the steps of range queries that read only data older than five minutes (or
    /// than the sealed windows' end): a dashboard's repeated range query evaluates only the
    /// steps it does not hold. A write of an older sample, a deletion, a re-seal or a retention
    /// drop makes every held step stale. `0` turns it off;
    /// `nocache=1` skips it for one query.
    #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
    pub query_result_cache_size: usize,
    /// How a read takes the samples of many series: `auto` (one iterator over a bucket's key
    /// range where the selected series are dense, a seek per series where sparse), or always
    /// `seek` / `range` (for benchmarks).
    #[arg(long, value_enum, default_value_t = crate::storage::ReadStrategy::Auto, hide = true)]
    pub read_strategy: crate::storage::ReadStrategy,
    /// Block cache size for reads (e.g. 256MiB).
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub block_cache: usize,
    /// Exemplars kept (the newest, over all series), in memory and on disk, as Prometheus'
    /// `--storage.exemplars.max-exemplars`; 0 stores none.
    #[arg(long, default_value_t = crate::storage::DEFAULT_MAX_EXEMPLARS)]
    pub max_exemplars: usize,
    /// Memory for decoded label sets on the read path (about 150-300 bytes a series): series a
    /// request asks about again (a dashboard's refresh) skip the `series` table.
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub labels_cache: usize,
    /// Memory for answers of the per-window index (label names, label values, the series ids a
    /// selector picks): a dashboard's repeated metadata requests cost a lookup while no series
    /// was created or removed.
    #[arg(long, default_value = "16MiB", value_parser = parse_bytes)]
    pub index_cache: usize,
    /// Memory for the storage engine's memtables over all tables (writes not yet flushed into
    /// tables on disk): past it, the largest memtable is flushed. Without it each written table
    /// filled its own to 64 MiB.
    #[arg(long, default_value = "64MiB", value_parser = parse_bytes)]
    pub write_buffer: usize,
    /// Threads of the storage engine that flush memtables into tables and compact tables. The
    /// default is one: fjall 3.1 keeps its first worker re-queueing a compaction while another
    /// compacts, a busy loop that took 12% of the server's CPU under new-series ingest on two
    /// cores (a flush then waits for the compaction under way). More than one may pay on a
    /// machine with many idle cores and a heavy compaction load.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub storage_threads: u16,
    /// After this long without a write (or a seal, deletion or snapshot), flush the in-memory
    /// head and every memtable into tables and roll the storage engine's journal over, so that
    /// the journal files, which then only repeat tables, are deleted: the data directory of a
    /// server that stopped receiving writes is then about its size after a clean shutdown
    /// instead of carrying up to hundreds of MB of journal. `0` turns it off.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub idle_flush: i64,
    /// Bearer token required on the write paths (`/api/v1/write`, `/api/v1/import`, admin API).
    /// Prefer the environment variable: command lines are visible to other users.
    #[arg(long, env = "SALTDB_WRITE_TOKEN", hide_env_values = true)]
    pub write_token: Option<SecretString>,
    /// Bearer token required on the read paths (queries, series, labels, export, remote read,
    /// status).
    #[arg(long, env = "SALTDB_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<SecretString>,
    /// File of `user:password` lines accepted as basic auth on the write paths (alone or beside
    /// --write-token).
    #[arg(long)]
    pub write_basic_auth_file: Option<PathBuf>,
    /// File of `user:password` lines accepted as basic auth on the read paths.
    #[arg(long)]
    pub read_basic_auth_file: Option<PathBuf>,
    /// Serve many tenants, each seeing only its own series: a request names its tenant in the
    /// `X-Scope-OrgID` header, in the URL (`/insert/<tenant>/prometheus/api/v1/write`,
    /// `/select/<tenant>/prometheus/api/v1/query`, ...) or by a tenant's token
    /// (--tenant-tokens-file); one naming none is the `default` tenant's, which holds the data
    /// written without --tenants. See docs/tenants.md.
    #[arg(long)]
    pub tenants: bool,
    /// File of `tenant:token` lines (blank lines and `#` comments skipped): a request with
    /// `Authorization: Bearer <token>` (or basic auth as the tenant with the token as password)
    /// reads and writes as that tenant only. Once any token is bound, the read and write paths
    /// need credentials: a tenant's token, or --read-token/--write-token, which act for any
    /// tenant and may read several at once (`X-Scope-OrgID: a|b`). Needs --tenants.
    #[arg(long)]
    pub tenant_tokens_file: Option<PathBuf>,
    /// YAML file of limits per tenant, in the shape of Grafana Mimir's runtime configuration
    /// overrides: `defaults:` for every tenant and `overrides:` per tenant id, with the keys
    /// `ingestion_rate` (samples/s), `ingestion_burst_size`, `max_label_name_length`,
    /// `max_label_value_length`, `max_fetched_samples_per_query`, `max_total_query_length` (a
    /// duration, `30d`) and `max_concurrent_queries`; unknown keys are refused. Read again on
    /// `POST /-/reload`, SIGHUP and within 10 s of the file changing; a bad file refuses to
    /// start, and on reload keeps the limits in force. See docs/limits-per-tenant.md. Needs
    /// --tenants.
    #[arg(long, value_name = "FILE")]
    pub tenant_limits_file: Option<PathBuf>,
    /// Whether `/metrics` needs the read credentials (`read`) or is open (`public`).
    #[arg(long, value_enum, default_value_t = Exposure::Public)]
    pub metrics_auth: Exposure,
    /// Whether `/-/healthy` and `/-/ready` need the read credentials (`read`) or are open.
    #[arg(long, value_enum, default_value_t = Exposure::Public)]
    pub health_auth: Exposure,
    /// Enable `/api/v1/admin/tsdb/delete_series` and `/api/v1/admin/tsdb/snapshot` (behind the
    /// write credentials when they are set).
    #[arg(long)]
    pub enable_admin_api: bool,
    /// A Prometheus rule file (recording and alerting rules) to evaluate; repeatable, globs
    /// allowed (`rules/*.yml`). Reloaded on SIGHUP and `POST /-/reload`. See docs/rules.md.
    #[arg(long = "rule-file", value_name = "PATH")]
    pub rule_files: Vec<String>,
    /// Evaluation interval of rule groups that set none (Prometheus' global
    /// evaluation_interval).
    #[arg(long, default_value = "1m", value_parser = parse_positive_duration)]
    pub rule_evaluation_interval: i64,
    /// How far back of each evaluation time rules query, for groups that set no query_offset
    /// (Prometheus' global rule_query_offset): room for late samples.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub rule_query_offset: i64,
    /// Least time between two sends of an unchanged firing alert to Alertmanager (Prometheus'
    /// --rules.alert.resend-delay).
    #[arg(long, default_value = "1m", value_parser = parse_positive_duration)]
    pub rules_resend_delay: i64,
    /// The URL users reach this server at: `$externalURL` of rule templates and the source link
    /// of alerts (Prometheus' --web.external-url).
    #[arg(long, default_value = "")]
    pub external_url: String,
    /// A label `name=value` of this server: `$externalLabels` of rule templates, added to alerts
    /// sent (Prometheus' global external_labels); repeatable.
    #[arg(long = "external-label", value_name = "NAME=VALUE", value_parser = parse_external_label)]
    pub external_labels: Vec<(String, String)>,
    /// An Alertmanager to send alerts to, as its base URL (`http://127.0.0.1:9093`); repeatable:
    /// every alert goes to each, through Alertmanager's v2 API.
    #[arg(long = "alertmanager-url", value_name = "URL")]
    pub alertmanager_urls: Vec<String>,
    /// Alerts waiting to be sent to Alertmanager at most; beyond it the oldest are dropped and
    /// counted in prometheus_notifications_dropped_total (Prometheus'
    /// --alertmanager.notification-queue-capacity).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub alertmanager_queue_capacity: u32,
    /// How OTLP metric names become series names: Prometheus' default translation (invalid
    /// characters to `_`, unit and `_total`/`_ratio` suffixes, attribute names translated too),
    /// or the name as sent (UTF-8 kept) with the same suffixes, attribute names kept as sent
    /// (unless --ingest-legacy-label-names).
    #[arg(long, value_enum, default_value_t = crate::ingest::otlp::Naming::default())]
    pub otlp_metric_names: crate::ingest::otlp::Naming,
    /// PEM certificate chain: serve HTTPS instead of HTTP (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Every flag and its value, filled by [`Cli::parse_with_flags`] (not a flag itself).
    #[arg(skip)]
    pub flags: std::collections::BTreeMap<String, String>,
}

/// Where a server's data lives (`--storage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StorageKind {
    /// The embedded store in `--data-dir`.
    #[default]
    Embedded,
    /// The ClickHouse shards of `--clickhouse-url`.
    #[value(name = "clickhouse")]
    ClickHouse,
}

/// Flags that are individually valid but cannot work together, or files that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--tenant-tokens-file` without `--tenants`.
    #[error("--tenant-tokens-file binds tokens to tenants: it needs --tenants")]
    TenantTokensWithoutTenants,
    /// `--tenant-limits-file` without `--tenants`.
    #[error("--tenant-limits-file sets limits per tenant: it needs --tenants")]
    TenantLimitsWithoutTenants,
    /// The tenant limits file.
    #[error(transparent)]
    TenantLimits(#[from] crate::tenant::LimitsError),
    /// The tenant tokens file.
    #[error(transparent)]
    TenantTokens(#[from] crate::http::access::TenantTokensError),
    /// `--downsample` with `--storage clickhouse`, which keeps no tiers.
    #[error("--downsample works with the embedded storage only; --storage clickhouse keeps raw samples")]
    TiersOnClickHouse,
    /// `--retention-rule` with `--storage clickhouse`, whose partitions share one retention.
    #[error("--retention-rule (and a tenant's retention_period) works with the embedded storage only; --storage clickhouse has one --retention")]
    RetentionRulesOnClickHouse,
    /// A rule of --retention-rules-file (or the file itself) is unusable.
    #[error("--retention-rules-file {path}: {message}")]
    RetentionRulesFile {
        /// The file.
        path: String,
        /// What is wrong, with the line number.
        message: String,
    },
    /// The retention rules as a whole are unusable (too many distinct retentions).
    #[error("--retention-rule: {0}")]
    RetentionRules(String),
    /// `--storage clickhouse` without shards.
    #[error("--storage clickhouse needs --clickhouse-url (the shards' HTTP URLs, comma-separated)")]
    NoClickHouseShards,
    /// A basic-auth file is unusable.
    #[error("{0}")]
    Credentials(#[from] CredentialsError),
    /// The write budget could never admit a request of the largest allowed size.
    #[error(
        "--max-inflight-bytes ({inflight} bytes) must be at least {factor}x --max-request-bytes ({request} bytes), or no request of the largest allowed size could ever be admitted"
    )]
    InflightTooSmall {
        /// --max-inflight-bytes.
        inflight: usize,
        /// --max-request-bytes.
        request: usize,
        /// The factor.
        factor: usize,
    },
}

fn parse_duration(s: &str) -> Result<i64, String> {
    crate::duration::parse_ms(s).map_err(|e| e.to_string())
}

fn parse_external_label(s: &str) -> Result<(String, String), String> {
    let (name, value) = s.split_once('=').ok_or("expected NAME=VALUE")?;
    if !crate::labels::is_valid_label_name(name) {
        return Err(format!("invalid label name {name:?}"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

fn parse_positive_duration(s: &str) -> Result<i64, String> {
    let ms = parse_duration(s)?;
    if ms <= 0 {
        return Err("must be longer than 0".into());
    }
    Ok(ms)
}

/// One `--downsample` entry: `INTERVAL` or `AGE:INTERVAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierSpec {
    /// Past this age, windows keep nothing finer than [`interval_ms`](Self::interval_ms).
    pub after_ms: Option<i64>,
    /// The tier's interval, ms.
    pub interval_ms: i64,
}

fn parse_tier(s: &str) -> Result<TierSpec, String> {
    let (age, interval) = match s.split_once(':') {
        Some((age, interval)) => (Some(age), interval),
        None => (None, s),
    };
    let interval_ms = parse_positive_duration(interval).map_err(|e| format!("interval {interval:?}: {e}"))?;
    let after_ms = age
        .map(|a| parse_positive_duration(a).map_err(|e| format!("age {a:?} (AGE:INTERVAL, e.g. 7d:5m): {e}")))
        .transpose()?;
    Ok(TierSpec { after_ms, interval_ms })
}

/// `SELECTOR:DURATION`: the selector is everything before the last `:` (a label value may hold
/// colons), as PromQL writes it; `or` alternatives are allowed.
/// The retention rules of the tenants' `retention_period` in a limits file
/// ([`LimitsFile::retention_selectors`]), first match first.
///
/// # Errors
/// A period that is not a positive duration, named with its tenant's selector.
pub fn tenant_retention_rules(limits: &LimitsFile) -> Result<Vec<crate::storage::RetentionRule>, String> {
    limits
        .retention_selectors()
        .into_iter()
        .map(|(selector, period)| parse_retention_rule(&format!("{selector}:{period}")))
        .collect()
}

fn parse_retention_rule(s: &str) -> Result<crate::storage::RetentionRule, String> {
    let (selector, duration) =
        s.trim().rsplit_once(':').ok_or("expected SELECTOR:DURATION, e.g. '{team=\"batch\"}:7d'")?;
    let retention_ms = parse_positive_duration(duration.trim()).map_err(|e| format!("duration {duration:?}: {e}"))?;
    let selector = selector.trim();
    // The parser refuses a selector whose matchers all match the empty value (one that would
    // match every series: that is --retention).
    let matchers = crate::http::params::parse_selector(selector)?;
    Ok(crate::storage::RetentionRule { selector: selector.to_owned(), matchers, retention_ms })
}

fn parse_window(s: &str) -> Result<i64, String> {
    let ms = parse_duration(s)?;
    if ms < 60_000 {
        return Err("window must be at least 1m".into());
    }
    Ok(ms)
}

/// Parses `65536`, `64KiB`, `64MiB`, `1GiB` (also KB/MB/GB as powers of 1000).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = s.split_at(digits);
    let n: usize = num.parse().map_err(|_| format!("invalid size {s:?}: use e.g. 65536, 64KiB, 64MiB, 1GiB"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(format!("invalid size unit in {s:?}: use B, KiB, MiB or GiB")),
    };
    n.checked_mul(factor).ok_or_else(|| format!("size {s:?} is too large"))
}

/// A memory size flag: bytes, or `auto` for a default derived from the machine's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemorySize {
    /// Derived from the machine's memory.
    Auto,
    /// This many bytes.
    Bytes(usize),
}

fn parse_bytes_or_auto(s: &str) -> Result<MemorySize, String> {
    if s == "auto" {
        return Ok(MemorySize::Auto);
    }
    parse_bytes(s).map(MemorySize::Bytes)
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), `None` where unknown.
fn physical_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The default series-cache size: 1/32 of memory, between 64 MiB and 2 GiB (256 MiB where the
/// memory is unknown).
fn auto_series_cache_bytes() -> usize {
    physical_memory().map_or(256 << 20, |m| (m / 32).clamp(64 << 20, 2 << 30))
}

/// The default head memory bound: 1/16 of memory, between 256 MiB and 4 GiB (1 GiB where the
/// memory is unknown).
fn auto_head_bytes() -> usize {
    physical_memory().map_or(1 << 30, |m| (m / 16).clamp(256 << 20, 4 << 30))
}

impl ServeArgs {
    /// The retention rules: the `--retention-rule` flags, then the lines of
    /// `--retention-rules-file`, then the tenants' `retention_period` of `tenant_limits` (the
    /// parsed `--tenant-limits-file`), first match first.
    ///
    /// # Errors
    /// An unreadable file, a line that is not a rule, or too many distinct retentions.
    pub fn retention_rules(
        &self,
        tenant_limits: Option<&LimitsFile>,
    ) -> Result<Vec<crate::storage::RetentionRule>, ConfigError> {
        let mut rules = self.retention_rules.clone();
        if let Some(path) = &self.retention_rules_file {
            let failed =
                |message: String| ConfigError::RetentionRulesFile { path: path.display().to_string(), message };
            let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                rules.push(parse_retention_rule(line).map_err(|e| failed(format!("line {}: {e}", n + 1)))?);
            }
        }
        // Then each tenant's `retention_period` from the limits file.
        if let Some(limits) = tenant_limits {
            rules.extend(tenant_retention_rules(limits).map_err(|problem| {
                let file = self.tenant_limits_file.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
                ConfigError::TenantLimits(crate::tenant::LimitsError { file, problem })
            })?);
        }
        crate::storage::check_retention_rules(&rules).map_err(ConfigError::RetentionRules)?;
        Ok(rules)
    }

    /// [`ServeArgs::retention_rules`] without the tenants' (kept to rebuild the rules when the
    /// limits file changes).
    ///
    /// # Errors
    /// As [`ServeArgs::retention_rules`].
    pub fn base_retention_rules(&self) -> Result<Vec<crate::storage::RetentionRule>, ConfigError> {
        self.retention_rules(None)
    }

    /// The server configuration these flags describe.
    ///
    /// # Errors
    /// [`ConfigError`] for contradictory limits or unreadable credential files.
    pub fn server_config(&self) -> Result<ServerConfig, ConfigError> {
        let factor = 1 + DECODED_FACTOR;
        if self.max_inflight_bytes < self.max_request_bytes.saturating_mul(factor) {
            return Err(ConfigError::InflightTooSmall {
                inflight: self.max_inflight_bytes,
                request: self.max_request_bytes,
                factor,
            });
        }
        let access = AccessPolicy {
            write: Credentials::new(
                self.write_token.as_ref().map(SecretString::expose),
                self.write_basic_auth_file.as_deref(),
            )?,
            read: Credentials::new(
                self.read_token.as_ref().map(SecretString::expose),
                self.read_basic_auth_file.as_deref(),
            )?,
            metrics: self.metrics_auth,
            health: self.health_auth,
            tenants: match &self.tenant_tokens_file {
                Some(_) if !self.tenants => return Err(ConfigError::TenantTokensWithoutTenants),
                Some(path) => crate::http::access::TenantTokens::read(path)?,
                None => crate::http::access::TenantTokens::default(),
            },
        };
        let tenant_limits = match &self.tenant_limits_file {
            Some(_) if !self.tenants => return Err(ConfigError::TenantLimitsWithoutTenants),
            // Refused here, before storage opens, with the file and the problem named.
            Some(path) => Some(crate::http::tenant_limits::TenantLimitsHandle::load(path)?.file()),
            None => None,
        };
        let mut storage = StorageConfig::new(self.data_dir.clone());
        storage.buckets = self.buckets;
        storage.bucket_scheme = self.bucket_scheme;
        storage.window_ms = self.window;
        storage.retention_ms = (self.retention > 0).then_some(self.retention);
        storage.max_future_ms = (self.max_future > 0).then_some(self.max_future);
        storage.tier_intervals_ms = self.downsample.iter().map(|t| t.interval_ms).collect();
        storage.downsample_after = self
            .downsample
            .iter()
            .filter_map(|t| Some(crate::storage::DownsampleAge { after_ms: t.after_ms?, interval_ms: t.interval_ms }))
            .collect();
        storage.retention_rules = self.retention_rules(tenant_limits.as_deref())?;
        storage.fsync = self.fsync;
        let cache_bytes = match self.series_cache {
            MemorySize::Auto => auto_series_cache_bytes(),
            MemorySize::Bytes(n) => n,
        };
        storage.series_cache_size = (cache_bytes / crate::storage::index::series::CACHE_ENTRY_BYTES).max(2);
        storage.block_cache_bytes = self.block_cache as u64;
        storage.labels_cache_bytes = self.labels_cache as u64;
        storage.index_cache_bytes = self.index_cache as u64;
        storage.write_buffer_bytes = (self.write_buffer as u64).max(1 << 20);
        storage.storage_threads = usize::from(self.storage_threads);
        storage.idle_flush =
            (self.idle_flush > 0).then(|| std::time::Duration::from_millis(self.idle_flush.unsigned_abs()));
        storage.max_exemplars = self.max_exemplars;
        storage.read_strategy = self.read_strategy;
        storage.head = HeadLimits {
            max_samples: self.head_max_samples.max(1),
            max_bytes: match self.head_max_memory {
                MemorySize::Auto => auto_head_bytes(),
                MemorySize::Bytes(n) => n.max(1),
            },
            max_age: std::time::Duration::from_millis(self.head_flush_interval.max(0).unsigned_abs()),
        };
        let clickhouse = match self.storage {
            StorageKind::Embedded => None,
            StorageKind::ClickHouse => {
                if self.clickhouse_url.iter().all(|u| u.trim().is_empty()) {
                    return Err(ConfigError::NoClickHouseShards);
                }
                if !self.downsample.is_empty() {
                    return Err(ConfigError::TiersOnClickHouse);
                }
                if !storage.retention_rules.is_empty() {
                    return Err(ConfigError::RetentionRulesOnClickHouse);
                }
                let shards: Vec<Vec<String>> = self
                    .clickhouse_url
                    .iter()
                    .map(|shard| shard.split('|').map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect())
                    .filter(|replicas: &Vec<String>| !replicas.is_empty())
                    .collect();
                let mut ch = crate::clickhouse::ClickHouseConfig::replicated(shards);
                ch.replicated |= self.clickhouse_replicated;
                ch.insert_quorum = self.clickhouse_insert_quorum;
                ch.database.clone_from(&self.clickhouse_database);
                ch.buckets = self.clickhouse_buckets;
                ch.timeout = std::time::Duration::from_millis(self.query_timeout.unsigned_abs()).max(ch.timeout);
                ch.retention_ms = storage.retention_ms;
                ch.max_future_ms = storage.max_future_ms;
                ch.partial_reads = self.clickhouse_partial_reads;
                ch.seal_after_ms = Some(self.ooo_grace.max(0));
                ch.known_series = (cache_bytes / crate::clickhouse::KNOWN_ENTRY_BYTES).max(2);
                Some(ch)
            }
        };
        Ok(ServerConfig {
            listen: self.listen,
            storage,
            clickhouse,
            limits: Limits {
                max_request_bytes: self.max_request_bytes,
                series: SeriesLimits {
                    max_labels: self.max_labels_per_series,
                    max_label_bytes: self.max_label_bytes,
                    max_series: self.max_series_per_request,
                    legacy_label_names: self.ingest_legacy_label_names,
                },
                max_concurrent_writes: self.max_concurrent_writes,
                max_inflight_bytes: self.max_inflight_bytes,
                label_cache_bytes: self.remote_write_label_cache,
            },
            connections: ConnectionLimits {
                max_connections: self.max_connections as usize,
                header_read_timeout: std::time::Duration::from_millis(self.header_read_timeout.unsigned_abs()),
                idle_timeout: std::time::Duration::from_millis(self.idle_timeout.unsigned_abs()),
                body_read_timeout: std::time::Duration::from_millis(self.body_read_timeout.unsigned_abs()),
            },
            query: QueryConfig {
                engine: EngineOptions {
                    lookback_ms: self.query_lookback_delta,
                    max_samples: self.query_max_samples,
                    max_scanned_samples: self.query_max_scanned_samples.max(1),
                    max_memory_bytes: self.query_max_memory,
                    timeout: std::time::Duration::from_millis(self.query_timeout.unsigned_abs()),
                    source_resolution: crate::promql::SourceResolution::Auto,
                },
                max_concurrency: self.query_max_concurrency,
                slow_query: (self.query_log_slow > 0)
                    .then(|| std::time::Duration::from_millis(self.query_log_slow.unsigned_abs())),
                result_cache_bytes: self.query_result_cache_size as u64,
            },
            maintenance: Maintenance {
                interval: std::time::Duration::from_millis(self.maintenance_interval.max(1).unsigned_abs()),
                ooo_grace_ms: Some(self.ooo_grace),
            },
            access,
            tenants: self.tenants,
            tenant_limits_file: self.tenant_limits_file.clone(),
            base_retention_rules: self.base_retention_rules()?,
            admin_api: self.enable_admin_api,
            rules: crate::rules::evaluator::RulesConfig {
                files: self.rule_files.clone(),
                evaluation_interval_ms: self.rule_evaluation_interval,
                query_offset_ms: self.rule_query_offset.max(0),
                resend_delay_ms: self.rules_resend_delay,
                external_labels: self.external_labels.iter().cloned().collect(),
                external_url: self.external_url.trim_end_matches('/').to_owned(),
                state_dir: Some(self.data_dir.join("rules")),
                ruler_dir: Some(self.data_dir.join("rules").join("api")),
                alertmanagers: self.alertmanager_urls.clone(),
                notification_queue_capacity: self.alertmanager_queue_capacity as usize,
                tenants: self.tenants,
            },
            otlp_naming: self.otlp_metric_names,
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert: cert.clone(), key: key.clone() }),
                _ => None,
            },
            flags: self.flags.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("12XB").is_err());
    }

    #[test]
    fn flags_hold_every_serve_flag_with_given_or_default_values() {
        let cli = Cli::try_parse_with_flags_from(["saltdb", "serve", "--retention", "15d", "--write-token", "s3cret"])
            .expect("valid command line");
        let Command::Serve(args) = cli.command else { panic!("serve expected") };
        assert_eq!(args.flags.get("retention").map(String::as_str), Some("15d"));
        assert_eq!(args.flags.get("window").map(String::as_str), Some("1d"));
        assert_eq!(args.flags.get("enable-admin-api").map(String::as_str), Some("false"));
        assert_eq!(args.flags.get("write-token").map(String::as_str), Some("<set>"));
        assert_eq!(args.flags.get("read-token").map(String::as_str), Some(""));
        assert!(!args.flags.values().any(|v| v.contains("s3cret")));
        use clap::CommandFactory;
        let command = Cli::command();
        let serve = command.find_subcommand("serve").expect("serve");
        let longs: Vec<&str> = serve.get_arguments().filter_map(clap::Arg::get_long).collect();
        assert_eq!(args.flags.keys().map(String::as_str).collect::<Vec<_>>().len(), longs.len());
        assert!(longs.iter().all(|l| args.flags.contains_key(*l)), "{longs:?}");
    }

    #[test]
    fn storage_threads_default_to_one_and_refuse_zero() {
        let threads = |extra: &[&str]| {
            let argv = ["saltdb", "serve"].iter().chain(extra).copied().collect::<Vec<_>>();
            Cli::try_parse_with_flags_from(argv).map(|cli| match cli.command {
                Command::Serve(args) => args.server_config().map(|c| c.storage.storage_threads).ok(),
                _ => None,
            })
        };
        assert_eq!(threads(&[]).ok().flatten(), Some(1));
        assert_eq!(threads(&["--storage-threads", "3"]).ok().flatten(), Some(3));
        let refused = threads(&["--storage-threads", "0"]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("--storage-threads"), "{refused}");
    }

    #[test]
    fn label_names_are_kept_unless_legacy_names_are_asked_for() {
        let legacy = |extra: &[&str]| {
            let argv = ["saltdb", "serve"].iter().chain(extra).copied().collect::<Vec<_>>();
            Cli::try_parse_with_flags_from(argv).ok().and_then(|cli| match cli.command {
                Command::Serve(args) => args.server_config().map(|c| c.limits.series.legacy_label_names).ok(),
                _ => None,
            })
        };
        assert_eq!(legacy(&[]), Some(false));
        assert_eq!(legacy(&["--ingest-legacy-label-names"]), Some(true));
    }

    #[test]
    fn downsample_takes_intervals_and_ages() {
        let storage = |extra: &[&str]| {
            let argv = ["saltdb", "serve"].iter().chain(extra).copied().collect::<Vec<_>>();
            Cli::try_parse_with_flags_from(argv).map_err(|e| e.to_string()).and_then(|cli| match cli.command {
                Command::Serve(args) => args.server_config().map(|c| c.storage).map_err(|e| e.to_string()),
                _ => Err("not serve".into()),
            })
        };
        let s = storage(&["--downsample", "5m,30d:1h"]).unwrap();
        assert_eq!(s.tier_intervals_ms, vec![300_000, 3_600_000]);
        let age = crate::storage::DownsampleAge { after_ms: 30 * 86_400_000, interval_ms: 3_600_000 };
        assert_eq!(s.downsample_after, vec![age]);
        let s = storage(&["--downsample", "7d:5m", "--downsample", "60d:1h"]).unwrap();
        assert_eq!(s.tier_intervals_ms, vec![300_000, 3_600_000]);
        assert_eq!(s.downsample_after.iter().map(|a| a.after_ms / 86_400_000).collect::<Vec<_>>(), vec![7, 60]);
        assert!(storage(&[]).unwrap().downsample_after.is_empty());
        for (bad, says) in [("7d:0s", "interval \"0s\""), ("x:5m", "age \"x\""), ("0s:5m", "age \"0s\""), ("5q", "5q")]
        {
            let err = storage(&["--downsample", bad]).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
