//! The life of stored data after it is written: time windows and their keyspaces ([`window`]:
//! created, listed and dropped when retention passes them), sealing a closed window into chunks
//! ([`seal`]) and folding late samples into a sealed one ([`reseal`]), keeping only the tiers of
//! old windows ([`downsample`]), removing series left
//! without data once their windows are dropped ([`churn`]), deleting series in a time range
//! ([`delete`]), snapshots ([`snapshot`]), the clean close ([`close`]) and one-time upgrades of
//! older data directories ([`migrate`]).
//!
//! Owns: every change to data that is not a new sample. Its mutations reach fjall on the writer
//! thread (commands of `write/`) or, for sealing, as a new generation the writer makes visible;
//! may not: assign series ids or write samples into the head.

pub(super) mod churn;
pub mod class;
pub(super) mod close;
pub(super) mod delete;
pub mod downsample;
pub(super) mod migrate;
pub(super) mod reseal;
pub mod seal;
pub(super) mod snapshot;
pub(super) mod window;
