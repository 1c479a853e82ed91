//! Formats: the bytes of every key and row saltdb writes, and the reading and writing of one row
//! family at a time: keys and tables ([`keys`]), the manifest, hot runs of samples and of native
//! histograms, sealed chunks, downsampled tier rows, start timestamps and exemplar rows. The byte layouts are specified
//! in `docs/format.md`.
//!
//! Owns: encodings (pure, in [`keys`] and [`chunk`]) and the row-level reads and writes of each
//! family on a keyspace it is handed. Depends only on the root's errors and series ids: the bottom
//! of the storage layers. May not: own a thread, hold the window registry or the shared state,
//! decide when anything is written or dropped (that is `write/` and `lifecycle/`), or resolve
//! matchers (that is `index/`).

pub mod chunk;
pub(super) mod compact_run;
pub(super) mod exemplars;
pub(super) mod histogram_run;
pub mod keys;
pub mod manifest;
pub(super) mod run;
pub(super) mod start_ts;
pub(super) mod tier_rows;
pub mod tier_run;
