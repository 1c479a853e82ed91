//! The series index: where a series id is assigned and looked up ([`series`]: `series`,
//! `series_by_labels` and their caches), the per-window inverted index ([`postings`]) and the
//! resolution of label matchers on it ([`matchers`]), and the caches of its answers
//! ([`index_cache`]: between requests; [`known_label_sets`]: which label sets may be stored).
//!
//! Owns: series identity and the postings of every window, on keyspaces it is handed. Depends only
//! on `format/` (the key encodings) and the root's errors and series ids. May not: read or write
//! samples (runs and chunks are `format/`, reading them is `read/`), hold the window registry or
//! the shared state, or create and drop windows (that is `lifecycle/` and the writer thread in
//! `write/`).

pub(super) mod index_cache;
pub(super) mod known_label_sets;
pub(super) mod matchers;
pub(super) mod postings;
pub mod series;
