//! saltdb: a time-series database on an LSM keyspace (fjall), fed by Prometheus remote-write
//! and JSON-lines import, read through the Prometheus HTTP query API.
//!
//! Layers, top to bottom: [`http`] (async, the only place that speaks HTTP) -> [`promql`]
//! (pure evaluation) -> [`storage`] (synchronous fjall access). Shared vocabulary:
//! [`labels`], [`matcher`], [`sample`].
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod allocator;
pub mod backend;
pub mod backfill;
pub mod bits;
pub mod clickhouse;
pub mod config;
pub mod containment;
pub mod cores;
pub mod decimal;
pub mod duration;
pub mod excerpt;
pub mod histogram;
pub mod http;
pub mod ingest;
pub mod inspect;
pub mod kahan;
pub mod labels;
pub mod logs;
pub mod matcher;
pub mod metrics;
pub mod promql;
pub mod remote;
pub mod rules;
pub mod sample;
pub mod server;
pub mod spare_samples;
pub mod storage;
pub mod tenant;
pub mod tier;
pub mod timestamp;
pub mod varint;
