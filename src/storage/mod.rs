//! Storage on fjall. Synchronous: nothing here knows about tokio. The HTTP layer reaches it only
//! through `http/blocking.rs`.
//!
//! Layout of the keys and tables: see [`keys`]. Manifest: see [`manifest`].

pub mod chunk;
mod db;
mod error;
pub mod keys;
pub mod manifest;
mod matchers;
mod postings;
mod select;
pub mod series;
mod shared;
mod window;
mod write;

pub use db::{now_ms, FsyncMode, Storage, StorageConfig, StorageStats, WindowStats};
pub use error::{Result, StorageError};
pub use keys::{BucketScheme, Bucketing};
pub use write::WriteOutcome;
