//! The series id, the key every row of a series carries, and maps keyed by it. Shared vocabulary
//! of every group (like `error.rs`): where ids are assigned is `index/series.rs` and the writer
//! thread (`write/mod.rs`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A series id: allocated from 1 upwards, never reused.
pub type SeriesId = u64;

/// Hashes series ids (dense integers) with one multiplication instead of SipHash.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
}

/// A map keyed by series id.
pub type IdMap<V> = HashMap<SeriesId, V, BuildHasherDefault<IdHasher>>;
