//! The read path: the [`querier`] seam every reader goes through (the PromQL engine, every HTTP
//! read, and the ClickHouse backend implementing the same trait), and [`select`], which turns
//! matchers and a time range into series with their samples: windows overlapping the range,
//! candidate ids from their postings, then per bucket, in parallel, labels checked and runs,
//! chunks and the head read; `stream` feeds a reduced selection's series to their sinks window by
//! window instead of collecting them; `tiers` answers a selection in downsampled points, from tier
//! rows where sealed windows have them. [`cardinality`] counts series per metric and label over a
//! time range from the same windows' postings.
//!
//! Owns: reading. Uses `format/` and `index/` to decode, the window registry
//! (`lifecycle/window.rs`) and the head (`write/head.rs`) to find data. May not: write to any
//! keyspace or send commands to the writer thread.

pub(super) mod cardinality;
pub mod querier;
pub(super) mod select;
mod stream;
pub(super) mod tiers;
