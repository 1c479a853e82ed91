//! A decoded write request ([`Batch`]), in either of storage's batch forms: what the ingest
//! pipeline (`ingest.rs`) hands to storage and what the tenant limits (`tenant_limits.rs`)
//! inspect. Below both, so neither imports the other.

use crate::sample::{PackedBatch, WriteBatch};

/// A decoded request, in either of storage's batch forms.
#[derive(Debug)]
pub enum Batch {
    /// Series with their own label sets.
    Series(WriteBatch),
    /// Packed labels and samples (remote-write's decoder).
    Packed(PackedBatch),
}

impl Batch {
    /// Float samples in the batch.
    pub fn sample_count(&self) -> usize {
        match self {
            Self::Series(b) => b.sample_count(),
            Self::Packed(b) => b.sample_count(),
        }
    }

    /// Native histogram samples in the batch.
    pub fn histogram_count(&self) -> usize {
        match self {
            Self::Series(b) => b.histogram_count(),
            Self::Packed(b) => b.histogram_count(),
        }
    }

    /// Exemplars in the batch (remote-write's only).
    pub fn exemplar_count(&self) -> usize {
        match self {
            Self::Series(_) => 0,
            Self::Packed(b) => b.exemplar_count(),
        }
    }
}
