//! Every key saltdb writes, and its byte encoding. Pure: no I/O.
//!
//! All integers are fixed-width big-endian, so byte order equals numeric order; there are no
//! separator characters between integer fields.
//!
//! | keyspace            | key                                                        | value                       |
//! |---------------------|------------------------------------------------------------|-----------------------------|
//! | `meta`              | setting name (ASCII)                                       | setting bytes (manifest)    |
//! | `series`            | `series_id u64`                                            | canonical label set         |
//! | `series_by_labels`  | `md5(canonical label set) [16]`                            | `series_id u64`             |
//! | `series_by_labels`  | `md5 [16]` `series_id u64` (a second label set, same md5)  | empty                       |
//! | `wal`               | group-commit sequence number `u64`                         | the group's samples (`wal`) |
//! | `points_`, `chunks_`| `bucket u16` `series_id u64` `u64::MAX - first ts_ms`      | a run of samples (`run`, `compact_run`) |
//! | `chunks_`           | `0x2000 + bucket u16` `series_id u64` `u64::MAX - interval_ms` | the series' points of one tier (`tier_run`) |
//! | `points_`, `chunks_`| `0x4000 + bucket u16` `series_id u64` `u64::MAX - ts_ms` | start timestamp from `ts_ms` on (`start_ts`) |
//! | `points_`, `chunks_`| `0x8000 + bucket u16` `series_id u64` `u64::MAX - first ts_ms` | histogram run (`histogram_run`) |
//! | `points_`, `chunks_`| `0xFFFF` `series_id u64` (window index: series has data)   | empty                       |
//! | `points_`, `chunks_`| `0xFFFE` `name 0x00 value 0x00` `series_id u64` (window postings) | empty               |
//!
//! Keys of a window keyspace whose first byte is `0xFF` are *index rows* (the window index and
//! the window postings); every other key is a point key. Byte layouts: `docs/format.md`.
//!
//! Invariants:
//! - a bucket is always `< MAX_BUCKETS`, so the window-index prefix `0xFFFF` never collides
//!   with point rows;
//! - for one series, run keys sort by strictly descending first timestamp (newest first);
//! - point keys of two series never interleave: the `bucket, series_id` prefix groups them.

use md5::{Digest, Md5};

/// Largest bucket count a database may be created with.
pub const MAX_BUCKETS: u16 = 4096;
/// Bucket value reserved for the per-window index of series present in the window.
pub const WINDOW_INDEX_BUCKET: u16 = 0xFFFF;
// The window index must never collide with a real bucket.
const _: () = assert!((MAX_BUCKETS as u32) < WINDOW_INDEX_BUCKET as u32);
/// Bucket value prefixing the per-window postings (`name 0x00 value 0x00 series_id`).
pub const WINDOW_POSTINGS_BUCKET: u16 = 0xFFFE;
const _: () = assert!((MAX_BUCKETS as u32) < WINDOW_POSTINGS_BUCKET as u32);
/// The prefix of every per-window postings key.
pub const WINDOW_POSTINGS_PREFIX: [u8; 2] = WINDOW_POSTINGS_BUCKET.to_be_bytes();
/// First byte of every index row of a window keyspace (no point key starts with it).
pub const INDEX_ROW_BYTE: u8 = 0xFF;
const _: () = assert!(MAX_BUCKETS.to_be_bytes()[0] < INDEX_ROW_BYTE);
/// Added to the bucket in the keys of histogram rows: a series' histogram runs sit in their own
/// key range, apart from its float runs, so float reads never meet them.
pub const HISTOGRAM_FAMILY: u16 = 0x8000;
const _: () = assert!((MAX_BUCKETS as u32) <= HISTOGRAM_FAMILY as u32);
const _: () = assert!(((HISTOGRAM_FAMILY + MAX_BUCKETS) as u32) < WINDOW_POSTINGS_BUCKET as u32);
const _: () = assert!((HISTOGRAM_FAMILY + MAX_BUCKETS).to_be_bytes()[0] < INDEX_ROW_BYTE);
/// Added to the bucket in the keys of start-timestamp rows (see `start_ts.rs`): sorted after
/// every float run and before every histogram run and index row.
pub const START_FAMILY: u16 = 0x4000;
const _: () = assert!((MAX_BUCKETS as u32) <= START_FAMILY as u32);
const _: () = assert!(((START_FAMILY + MAX_BUCKETS) as u32) <= HISTOGRAM_FAMILY as u32);
/// Added to the bucket in the keys of tier rows (see `tier_run.rs`), which only sealed windows
/// hold: sorted after every float run and before every start-timestamp row.
pub const TIER_FAMILY: u16 = 0x2000;
const _: () = assert!((MAX_BUCKETS as u32) <= TIER_FAMILY as u32);
const _: () = assert!(((TIER_FAMILY + MAX_BUCKETS) as u32) <= START_FAMILY as u32);
/// Length of a point key.
pub const POINT_KEY_LEN: usize = 18;
/// Length of the `bucket, series_id` prefix shared by a series' point keys.
pub const SERIES_PREFIX_LEN: usize = 10;

/// How a series id is mapped to its bucket. Fixed at database creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BucketScheme {
    /// First two bytes of `md5(series_id as 8 BE bytes)`, modulo the bucket count.
    Hash,
    /// `series_id % buckets`.
    Modulo,
}

impl BucketScheme {
    /// The manifest spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hash => "hash",
            Self::Modulo => "modulo",
        }
    }

    /// Parses the manifest spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hash" => Some(Self::Hash),
            "modulo" => Some(Self::Modulo),
            _ => None,
        }
    }
}

/// A bucket scheme with its bucket count. Invariant: `1 <= count <= MAX_BUCKETS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucketing {
    scheme: BucketScheme,
    count: u16,
}

impl Bucketing {
    /// Returns `None` when `count` is 0 or above [`MAX_BUCKETS`].
    pub fn new(scheme: BucketScheme, count: u16) -> Option<Self> {
        (1..=MAX_BUCKETS).contains(&count).then_some(Self { scheme, count })
    }

    /// The scheme.
    pub fn scheme(&self) -> BucketScheme {
        self.scheme
    }

    /// The bucket count.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// The bucket of a series; always `< count`.
    pub fn bucket(&self, series_id: u64) -> u16 {
        match self.scheme {
            BucketScheme::Hash => {
                let digest = Md5::digest(series_id.to_be_bytes());
                let prefix = u16::from_be_bytes([digest[0], digest[1]]);
                prefix % self.count
            }
            // The remainder is < count <= u16::MAX, so the cast cannot truncate.
            BucketScheme::Modulo => (series_id % u64::from(self.count)) as u16,
        }
    }
}

/// Maps a timestamp (must be >= 0) to its reversed, order-inverting form.
fn reverse_ts(ts_ms: i64) -> u64 {
    u64::MAX - ts_ms.max(0).unsigned_abs()
}

/// Encodes a point key. `ts_ms` must be non-negative (validated at ingest).
pub fn point_key(bucket: u16, series_id: u64, ts_ms: i64) -> [u8; POINT_KEY_LEN] {
    let mut k = [0u8; POINT_KEY_LEN];
    k[..2].copy_from_slice(&bucket.to_be_bytes());
    k[2..10].copy_from_slice(&series_id.to_be_bytes());
    k[10..].copy_from_slice(&reverse_ts(ts_ms).to_be_bytes());
    k
}

/// Decodes a point key into `(bucket, series_id, ts_ms)`; `None` when it is not one.
pub fn decode_point_key(key: &[u8]) -> Option<(u16, u64, i64)> {
    let key: &[u8; POINT_KEY_LEN] = key.try_into().ok()?;
    let (b, rest) = key.split_at(2);
    let (sid, rev) = rest.split_at(8);
    let bucket = u16::from_be_bytes(b.try_into().ok()?);
    let series_id = u64::from_be_bytes(sid.try_into().ok()?);
    let ts = u64::MAX - u64::from_be_bytes(rev.try_into().ok()?);
    Some((bucket, series_id, i64::try_from(ts).ok()?))
}

/// The key of a histogram run of series `series_id` in `bucket` (`< MAX_BUCKETS`) starting at
/// `ts_ms`: a point key in the histogram family.
pub fn histogram_key(bucket: u16, series_id: u64, ts_ms: i64) -> [u8; POINT_KEY_LEN] {
    point_key(HISTOGRAM_FAMILY + bucket, series_id, ts_ms)
}

/// The prefix shared by the histogram run keys of a series.
pub fn histogram_series_prefix(bucket: u16, series_id: u64) -> [u8; SERIES_PREFIX_LEN] {
    series_prefix(HISTOGRAM_FAMILY + bucket, series_id)
}

/// The bucket of a histogram run key's bucket field (`None` for a float run's).
pub fn histogram_bucket(field: u16) -> Option<u16> {
    field.checked_sub(HISTOGRAM_FAMILY).filter(|b| *b < MAX_BUCKETS)
}

/// The first and last key of the histogram family: a keyspace with no key in between holds no
/// histogram.
pub fn histogram_family_bounds() -> ([u8; 2], [u8; 2]) {
    (HISTOGRAM_FAMILY.to_be_bytes(), (HISTOGRAM_FAMILY + MAX_BUCKETS).to_be_bytes())
}

/// The key of the tier row of series `series_id` in `bucket` (`< MAX_BUCKETS`) holding its
/// points of `interval_ms` in a sealed window: a point key in the tier family, the interval in
/// place of the timestamp.
pub fn tier_key(bucket: u16, series_id: u64, interval_ms: i64) -> [u8; POINT_KEY_LEN] {
    point_key(TIER_FAMILY + bucket, series_id, interval_ms)
}

/// The prefix shared by the tier row keys of a series.
pub fn tier_series_prefix(bucket: u16, series_id: u64) -> [u8; SERIES_PREFIX_LEN] {
    series_prefix(TIER_FAMILY + bucket, series_id)
}

/// The bucket of a tier key's bucket field (`None` for any other family's).
pub fn tier_bucket(field: u16) -> Option<u16> {
    field.checked_sub(TIER_FAMILY).filter(|b| *b < MAX_BUCKETS)
}

/// The key of the start-timestamp row of series `series_id` in `bucket` (`< MAX_BUCKETS`) at
/// sample timestamp `ts_ms`: a point key in the start-timestamp family.
pub fn start_key(bucket: u16, series_id: u64, ts_ms: i64) -> [u8; POINT_KEY_LEN] {
    point_key(START_FAMILY + bucket, series_id, ts_ms)
}

/// The bucket of a start-timestamp key's bucket field (`None` for any other family's).
pub fn start_bucket(field: u16) -> Option<u16> {
    field.checked_sub(START_FAMILY).filter(|b| *b < MAX_BUCKETS)
}

/// The first and last key of the start-timestamp family: a keyspace with no key in between
/// holds no start timestamp.
pub fn start_family_bounds() -> ([u8; 2], [u8; 2]) {
    (START_FAMILY.to_be_bytes(), (START_FAMILY + MAX_BUCKETS).to_be_bytes())
}

/// The prefix shared by all point keys of a series (and, with [`WINDOW_INDEX_BUCKET`],
/// the window-index key of a series).
pub fn series_prefix(bucket: u16, series_id: u64) -> [u8; SERIES_PREFIX_LEN] {
    let mut k = [0u8; SERIES_PREFIX_LEN];
    k[..2].copy_from_slice(&bucket.to_be_bytes());
    k[2..].copy_from_slice(&series_id.to_be_bytes());
    k
}

/// The window-index key recording that `series_id` has samples in a window.
pub fn window_index_key(series_id: u64) -> [u8; SERIES_PREFIX_LEN] {
    series_prefix(WINDOW_INDEX_BUCKET, series_id)
}

/// The prefix of every window-index key.
pub const WINDOW_INDEX_PREFIX: [u8; 2] = WINDOW_INDEX_BUCKET.to_be_bytes();

/// Series id out of a window-index key.
pub fn decode_window_index_key(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(&WINDOW_INDEX_PREFIX)?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// Encodes a sample value: the f64's bits, big-endian (every NaN payload survives).
pub fn encode_value(v: f64) -> [u8; 8] {
    v.to_bits().to_be_bytes()
}

/// Decodes a sample value; `None` when the slice is not 8 bytes.
pub fn decode_value(v: &[u8]) -> Option<f64> {
    Some(f64::from_bits(u64::from_be_bytes(v.try_into().ok()?)))
}

/// md5 of a canonical label set: the `series_by_labels` key prefix and the id-cache key.
pub fn labels_hash(canonical: &[u8]) -> [u8; 16] {
    Md5::digest(canonical).into()
}

/// A `series_by_labels` key.
pub fn series_by_labels_key(hash: &[u8; 16], series_id: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..16].copy_from_slice(hash);
    k[16..].copy_from_slice(&series_id.to_be_bytes());
    k
}

/// Series id out of a `series_by_labels` key.
pub fn decode_series_by_labels_key(key: &[u8]) -> Option<u64> {
    let sid = key.get(16..24)?;
    Some(u64::from_be_bytes(sid.try_into().ok()?))
}

/// True for the index rows of a window keyspace (window index and window postings).
pub fn is_index_row(key: &[u8]) -> bool {
    key.first() == Some(&INDEX_ROW_BYTE)
}

/// Prefix of the window postings of a label name: `0xFFFE name 0x00`.
pub fn postings_name_prefix(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 3);
    k.extend_from_slice(&WINDOW_POSTINGS_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k.push(0);
    k
}

/// Prefix of the window postings of one label pair: `0xFFFE name 0x00 value 0x00`.
pub fn postings_pair_prefix(name: &str, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + value.len() + 12);
    k.extend_from_slice(&WINDOW_POSTINGS_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k.push(0);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

/// A window postings key from one pair of a canonical label set (`name 0x00 value 0x00`, as
/// [`crate::labels::Labels::encode`] writes it) and a series id.
pub fn postings_key_from_pair(pair: &[u8], series_id: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(pair.len() + 10);
    k.extend_from_slice(&WINDOW_POSTINGS_PREFIX);
    k.extend_from_slice(pair);
    k.extend_from_slice(&series_id.to_be_bytes());
    k
}

/// A full window postings key.
pub fn postings_key(name: &str, value: &str, series_id: u64) -> Vec<u8> {
    let mut k = postings_pair_prefix(name, value);
    k.extend_from_slice(&series_id.to_be_bytes());
    k
}

/// The pairs (`name 0x00 value 0x00`) of a canonical label set, in order; a trailing fragment
/// without its two separators is not returned.
pub fn canonical_pairs(canonical: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = canonical;
    std::iter::from_fn(move || {
        let name_end = rest.iter().position(|&b| b == 0)?;
        let value_len = rest.get(name_end + 1..)?.iter().position(|&b| b == 0)?;
        let (pair, tail) = rest.split_at_checked(name_end + value_len + 2)?;
        rest = tail;
        Some(pair)
    })
}

/// Decodes a window postings key into `(name, value, series_id)`.
pub fn decode_postings_key(key: &[u8]) -> Option<(&str, &str, u64)> {
    let key = key.strip_prefix(&WINDOW_POSTINGS_PREFIX)?;
    let (head, sid) = key.split_at_checked(key.len().checked_sub(8)?)?;
    let head = head.strip_suffix(&[0])?;
    let sep = head.iter().position(|&b| b == 0)?;
    let (name, value) = head.split_at(sep);
    let value = value.get(1..)?;
    Some((std::str::from_utf8(name).ok()?, std::str::from_utf8(value).ok()?, u64::from_be_bytes(sid.try_into().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX_TS: i64 = crate::sample::MAX_TIMESTAMP_MS;

    proptest! {
        #[test]
        fn point_key_round_trips(b in 0u16..MAX_BUCKETS, sid: u64, ts in 0..=MAX_TS) {
            prop_assert_eq!(decode_point_key(&point_key(b, sid, ts)), Some((b, sid, ts)));
        }

        #[test]
        fn one_series_sorts_newest_first(b in 0u16..MAX_BUCKETS, sid: u64, t1 in 0..=MAX_TS, t2 in 0..=MAX_TS) {
            prop_assume!(t1 != t2);
            let (k1, k2) = (point_key(b, sid, t1), point_key(b, sid, t2));
            prop_assert_eq!(t1 < t2, k1 > k2);
        }

        #[test]
        fn two_series_never_interleave(
            b1 in 0u16..MAX_BUCKETS, s1: u64, b2 in 0u16..MAX_BUCKETS, s2: u64,
            t1 in 0..=MAX_TS, t2 in 0..=MAX_TS, t3 in 0..=MAX_TS,
        ) {
            prop_assume!((b1, s1) != (b2, s2));
            // Any key of series 2 is on the same side of every key of series 1.
            let a = point_key(b1, s1, t1);
            let c = point_key(b1, s1, t3);
            let x = point_key(b2, s2, t2);
            prop_assert_eq!(x < a, x < c);
            prop_assert!(x[..SERIES_PREFIX_LEN] != a[..SERIES_PREFIX_LEN]);
        }

        #[test]
        fn bucket_is_stable_and_in_range(sid: u64, count in 1u16..=MAX_BUCKETS, hash: bool) {
            let scheme = if hash { BucketScheme::Hash } else { BucketScheme::Modulo };
            let b = Bucketing::new(scheme, count).unwrap();
            let bucket = b.bucket(sid);
            prop_assert!(bucket < count);
            prop_assert_eq!(bucket, b.bucket(sid));
        }

        #[test]
        fn postings_key_round_trips(name in "[a-zA-Z_][a-zA-Z0-9_]{0,10}", value in "[^\u{0}]{0,16}", sid: u64) {
            let k = postings_key(&name, &value, sid);
            prop_assert_eq!(decode_postings_key(&k), Some((name.as_str(), value.as_str(), sid)));
            prop_assert!(k.starts_with(&postings_pair_prefix(&name, &value)));
            prop_assert!(k.starts_with(&postings_name_prefix(&name)));
            prop_assert!(is_index_row(&k));
            let pair = [name.as_bytes(), &[0], value.as_bytes(), &[0]].concat();
            prop_assert_eq!(postings_key_from_pair(&pair, sid), k);
        }

        #[test]
        fn canonical_pairs_split_label_sets(pairs in proptest::collection::btree_map("[a-z_]{1,6}", "[^\u{0}]{0,8}", 0..6)) {
            let labels = crate::labels::Labels::from_pairs(pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))).unwrap();
            let canonical = labels.to_bytes();
            let got: Vec<&[u8]> = canonical_pairs(&canonical).collect();
            prop_assert_eq!(got.len(), labels.len());
            prop_assert_eq!(got.concat(), canonical);
        }

        #[test]
        fn point_keys_are_never_index_rows(b in 0u16..MAX_BUCKETS, sid: u64, ts in 0..=MAX_TS) {
            prop_assert!(!is_index_row(&point_key(b, sid, ts)));
            prop_assert!(is_index_row(&window_index_key(sid)));
        }

        #[test]
        fn value_bits_survive(bits: u64) {
            let v = f64::from_bits(bits);
            prop_assert_eq!(decode_value(&encode_value(v)).map(f64::to_bits), Some(bits));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode_point_key(&bytes);
            let _ = decode_postings_key(&bytes);
            let _ = decode_window_index_key(&bytes);
            let _ = decode_series_by_labels_key(&bytes);
        }
    }

    #[test]
    fn hash_scheme_spreads_sequential_ids_evenly() {
        let b = Bucketing::new(BucketScheme::Hash, 16).unwrap();
        let mut counts = [0u32; 16];
        for sid in 0..100_000u64 {
            counts[usize::from(b.bucket(sid))] += 1;
        }
        let mean = 100_000.0 / 16.0;
        for (i, &c) in counts.iter().enumerate() {
            let dev = (f64::from(c) - mean).abs() / mean;
            assert!(dev <= 0.10, "bucket {i} has {c} series, {:.1}% off the mean", dev * 100.0);
        }
    }

    #[test]
    fn window_index_prefix_is_outside_bucket_range() {
        assert_eq!(decode_window_index_key(&window_index_key(42)), Some(42));
        assert_eq!(decode_point_key(&window_index_key(42)), None);
    }

    #[test]
    fn bucket_count_bounds() {
        assert!(Bucketing::new(BucketScheme::Hash, 0).is_none());
        assert!(Bucketing::new(BucketScheme::Hash, MAX_BUCKETS + 1).is_none());
    }
}
