//! The manifest: settings fixed when a data directory is created, kept in the `meta` keyspace.
//!
//! | key               | value                         |
//! |-------------------|-------------------------------|
//! | `format_version`  | `u32` BE, currently 7         |
//! | `bucket_scheme`   | `hash` or `modulo`            |
//! | `buckets`         | `u16` BE                      |
//! | `window_ms`       | `i64` BE                      |
//! | `next_series_id`  | `u64` BE, next id to allocate |
//! | `last_clean_close`| `i64` BE, ms: written last by a clean close (see `lifecycle/close.rs`) |
//! | `series_by_labels_slim_pending` | empty: an upgrade to format 6 has rows left to rewrite |

use super::keys::{BucketScheme, Bucketing};
use crate::storage::error::{Result, StorageError};

/// The on-disk format this build writes and reads. History (see `docs/format.md`):
/// - 1: postings for all time in a `postings` keyspace;
/// - 2: postings per window, inside each window keyspace (`lifecycle/migrate.rs` upgrades 1 at open);
/// - 3: a window postings row may be a block of several ids (see `index/postings.rs`); format 2's
///   rows are blocks of one, so 2 upgrades by writing the new version alone (a build that
///   reads only 2 must not open a directory holding blocks).
/// - 4: window keyspaces may hold histogram runs (keys in the histogram family, see `keys.rs`)
///   and the write-ahead log rows of version 2; 3 upgrades by writing the new version alone (a
///   build that reads only 3 would not see the histograms, and refuse their log rows).
/// - 5: window keyspaces may hold start-timestamp rows (keys in the start-timestamp family, see
///   `start_ts.rs`); 4 upgrades by writing the new version alone (a build that reads only 4
///   would drop them when sealing and refuse them when re-sealing).
/// - 6: `series_by_labels` rows hold the series id alone (the label set is read from `series`),
///   and hot runs may be compact runs (`compact_run.rs`); 5 upgrades by writing the new version
///   with [`SLIM_PENDING_KEY`], then rewriting the rows (`lifecycle/migrate.rs`).
/// - 7: chunks keyspaces may hold tier rows (keys in the tier family, see `tier_rows.rs`) and a
///   window may be downsampled (manifest key `downsampled/<start>`: its floats are tier rows
///   only, see `lifecycle/downsample.rs`); 6 upgrades by writing the new version alone (a build
///   that reads only 6 would read a downsampled window as empty, take writes into it, and
///   rebuild its tier rows from those late samples alone).
pub const FORMAT_VERSION: u32 = 7;
/// Manifest key present (empty value) while `series_by_labels` rows of format 5 may be left to
/// rewrite after an upgrade to format 6.
pub const SLIM_PENDING_KEY: &str = "series_by_labels_slim_pending";
/// The oldest format this build upgrades at open.
pub const OLDEST_UPGRADABLE: u32 = 1;
/// Manifest key of the format version.
pub const FORMAT_VERSION_KEY: &str = "format_version";
/// Manifest key of the series-id counter.
pub const NEXT_SERIES_ID: &str = "next_series_id";

/// The settings a database is created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Bucket scheme and count.
    pub bucketing: Bucketing,
    /// Length of a time window in milliseconds.
    pub window_ms: i64,
    /// The older format version the directory is in, when it must be upgraded before use.
    pub upgrade_from: Option<u32>,
}

fn read_fixed<const N: usize>(meta: &fjall::Keyspace, key: &str) -> Result<Option<[u8; N]>> {
    match meta.get(key)? {
        None => Ok(None),
        Some(v) => v
            .as_ref()
            .try_into()
            .map(Some)
            .map_err(|_| StorageError::Manifest(format!("{key} has {} bytes, expected {N}", v.len()))),
    }
}

impl Manifest {
    /// Loads the manifest, or writes `requested` if the database is new. Fails when an existing
    /// manifest disagrees with `requested`, naming both values.
    ///
    /// # Errors
    /// [`StorageError::ManifestMismatch`], [`StorageError::Manifest`] or an engine error.
    pub fn load_or_create(db: &fjall::Database, meta: &fjall::Keyspace, requested: Manifest) -> Result<Manifest> {
        let Some(version) = read_fixed::<4>(meta, FORMAT_VERSION_KEY)? else {
            let mut batch = db.batch().durability(Some(fjall::PersistMode::SyncAll));
            batch.insert(meta, FORMAT_VERSION_KEY, FORMAT_VERSION.to_be_bytes().to_vec());
            batch.insert(meta, "bucket_scheme", requested.bucketing.scheme().as_str());
            batch.insert(meta, "buckets", requested.bucketing.count().to_be_bytes().to_vec());
            batch.insert(meta, "window_ms", requested.window_ms.to_be_bytes().to_vec());
            batch.insert(meta, NEXT_SERIES_ID, 1u64.to_be_bytes().to_vec());
            batch.commit()?;
            return Ok(requested);
        };
        let version = u32::from_be_bytes(version);
        if !(OLDEST_UPGRADABLE..=FORMAT_VERSION).contains(&version) {
            return Err(StorageError::Manifest(format!(
                "format version {version} is not supported by this build (it reads version {FORMAT_VERSION} and \
                 upgrades versions {OLDEST_UPGRADABLE} to {FORMAT_VERSION}); use a saltdb release that supports it"
            )));
        }
        let scheme_bytes = meta.get("bucket_scheme")?.ok_or_else(|| missing("bucket_scheme"))?;
        let scheme = std::str::from_utf8(&scheme_bytes)
            .ok()
            .and_then(BucketScheme::parse)
            .ok_or_else(|| StorageError::Manifest("unknown bucket_scheme".into()))?;
        let count = u16::from_be_bytes(read_fixed(meta, "buckets")?.ok_or_else(|| missing("buckets"))?);
        let window_ms = i64::from_be_bytes(read_fixed(meta, "window_ms")?.ok_or_else(|| missing("window_ms"))?);
        let bucketing = Bucketing::new(scheme, count)
            .ok_or_else(|| StorageError::Manifest(format!("bucket count {count} out of range")))?;
        let upgrade_from = (version < FORMAT_VERSION).then_some(version);
        let stored = Manifest { bucketing, window_ms, upgrade_from };
        stored.check_matches(&requested)?;
        Ok(stored)
    }

    fn check_matches(&self, requested: &Manifest) -> Result<()> {
        let mismatch = |setting, stored: String, requested: String| {
            Err(StorageError::ManifestMismatch { setting, stored, requested })
        };
        if self.bucketing.scheme() != requested.bucketing.scheme() {
            return mismatch(
                "bucket-scheme",
                self.bucketing.scheme().as_str().into(),
                requested.bucketing.scheme().as_str().into(),
            );
        }
        if self.bucketing.count() != requested.bucketing.count() {
            return mismatch("buckets", self.bucketing.count().to_string(), requested.bucketing.count().to_string());
        }
        if self.window_ms != requested.window_ms {
            return mismatch(
                "window",
                crate::duration::format_ms(self.window_ms),
                crate::duration::format_ms(requested.window_ms),
            );
        }
        Ok(())
    }
}

fn missing(key: &str) -> StorageError {
    StorageError::Manifest(format!("{key} is missing"))
}

/// Reads the persistent series-id counter.
///
/// # Errors
/// A corrupt counter or an engine error.
pub fn next_series_id(meta: &fjall::Keyspace) -> Result<u64> {
    Ok(read_fixed::<8>(meta, NEXT_SERIES_ID)?.map_or(1, u64::from_be_bytes))
}
