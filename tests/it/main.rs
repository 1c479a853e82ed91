//! Integration tests, compiled into one binary: each module is one behaviour, driven the way a
//! user drives saltdb (real server on 127.0.0.1:0, real HTTP, real data directory).

mod common;

mod abandoned_query;
mod backfill;
mod bad_input;
mod browser;
mod clean_close;
mod clickhouse;
mod clickhouse_cluster;
mod crash;
mod crash_load;
mod disk_full;
mod future_timestamps;
mod grafana;
mod head_flush;
mod histograms;
mod hostile;
mod hostile_queries;
mod import_export;
mod index;
mod ingest_protocols;
mod logs;
mod manifest;
mod metadata_api;
mod metrics_cost;
mod operator_api;
mod otlp;
mod overload;
mod peers;
mod prometheus_diff;
mod query_api;
mod query_histograms;
mod query_memory;
mod readme;
mod real_prometheus;
mod remote_write;
mod retention;
mod seal;
mod security;
mod skip;
mod slow_clients;
mod status_api;
mod storage_api;
mod storage_failure;
mod upgrade;
