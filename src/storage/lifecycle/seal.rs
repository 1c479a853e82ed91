//! Sealing: rewriting a closed window's hot runs into a new generation of Gorilla+zstd chunks,
//! one series at a time, with each series' downsampled tier rows beside its chunks (for the
//! configured intervals where its points are dense enough to be worth reading,
//! [`crate::tier::MIN_DENSITY`]; a series with native histograms in the window gets none).
//! Restartable and idempotent: the new generation, tier rows included, is invisible until the
//! writer thread marks it in the manifest (see `write/mod.rs`), so a crash at any point loses
//! nothing and duplicates nothing. A window already sealed, whose overlay holds late samples, is not
//! rewritten: only the overlay's series are merged into its visible chunks (see `reseal.rs`).

use std::sync::mpsc::{self, SyncSender};

use super::reseal;
use super::window::{self, WindowKey};
use crate::sample::MAX_TIMESTAMP_MS;
use crate::storage::error::{Result, StorageError};
use crate::storage::format::chunk;
use crate::storage::format::histogram_run;
use crate::storage::format::keys;
use crate::storage::format::start_ts;
use crate::storage::format::tier_rows;
use crate::storage::index::postings;
use crate::storage::index::series;
use crate::storage::read::select::{read_histograms, read_series, universe};
use crate::storage::shared::Shared;
use crate::storage::write::{Command, FinishSeal, SealSwap};

/// Rows per write batch while sealing (bounds memory).
const BATCH_ROWS: usize = 20_000;

/// Marks a window as being sealed for as long as it lives.
struct SealingStatus<'a>(&'a Shared);

impl<'a> SealingStatus<'a> {
    fn set(sh: &'a Shared, key: WindowKey) -> Self {
        *sh.sealing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(key);
        Self(sh)
    }
}

impl Drop for SealingStatus<'_> {
    fn drop(&mut self) {
        *self.0.sealing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// What one seal did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealOutcome {
    /// The window.
    pub start_ms: i64,
    /// Its retention class.
    pub class: crate::storage::lifecycle::class::ClassId,
    /// Series written (on a re-seal, only the series the overlay held).
    pub series: usize,
    /// Samples written (of those series).
    pub samples: usize,
    /// Chunks written.
    pub chunks: usize,
    /// Tier rows written (see `format/tier_rows.rs`).
    pub tier_rows: usize,
    /// How the swap ended.
    pub swap: SealSwap,
}

/// Seals window `key`. Returns `None` when there is nothing to seal (no
/// such window, or already sealed without an overlay).
///
/// # Errors
/// Engine errors and corrupt rows; the window stays as it was.
pub fn seal_window(sh: &Shared, writer: &SyncSender<Command>, key: WindowKey) -> Result<Option<SealOutcome>> {
    let start_ms = key.start_ms;
    let _one_at_a_time = sh.seal_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // The window's samples still in the head go to its hot keyspace first (the head is not
    // flushed for a seal when it holds none of the window's); any arriving later are flushed
    // into it after this seal (moving its write counter, so the overlay stays).
    if sh.head.any_in(start_ms, start_ms.saturating_add(sh.windows.window_ms())) {
        let (reply, rx) = mpsc::sync_channel(1);
        writer.send(Command::Flush(reply)).map_err(|_| StorageError::ShuttingDown)?;
        rx.recv().map_err(|_| StorageError::ShuttingDown)??;
    }
    let Some(w) = sh.windows.get(key) else { return Ok(None) };
    if w.points.is_none() {
        return Ok(None);
    }
    let _status = SealingStatus::set(sh, key);
    tracing::debug!(window = start_ms, "sealing window");
    let writes_at_start = sh.windows.writes(key);
    if let (Some((_, chunks)), Some(points)) = (&w.chunks, &w.points) {
        // Already sealed: fold only the overlay's series into the visible chunks.
        let outcome = reseal::merge_overlay(sh, writer, (key, chunks, points), writes_at_start)?;
        tracing::debug!(window = start_ms, series = outcome.series, swap = ?outcome.swap, "re-seal finished");
        return Ok(Some(outcome));
    }
    let (generation, chunks_ks) = new_generation(sh, key)?;
    let mut outcome = match write_chunks(sh, &w, &chunks_ks) {
        Ok(outcome) => outcome,
        Err(e) => {
            // Not deleted (see `Windows::put_spare`): the next seal of the window reuses it.
            sh.windows.put_spare(key, (generation, chunks_ks));
            return Err(e);
        }
    };
    let (reply, rx) = mpsc::sync_channel(1);
    let finish = FinishSeal { key, generation, chunks: chunks_ks, writes_at_start, samples: outcome.samples as u64 };
    writer.send(Command::FinishSeal(finish, reply)).map_err(|_| StorageError::ShuttingDown)?;
    outcome.swap = rx.recv().map_err(|_| StorageError::ShuttingDown)??;
    tracing::debug!(window = start_ms, swap = ?outcome.swap, "seal finished");
    Ok(Some(outcome))
}

/// An empty chunks keyspace for the next generation of window `key`, not
/// yet visible: the window's spare (of a rewrite that did not finish), cleared, or a new one
/// under a fresh generation.
///
/// # Errors
/// Engine errors.
pub(super) fn new_generation(sh: &Shared, key: WindowKey) -> Result<(u32, fjall::Keyspace)> {
    Ok(match sh.windows.take_spare(key) {
        Some((generation, ks)) => {
            super::close::empty(&ks)?;
            (generation, ks)
        }
        None => {
            let generation = sh.allocate_generation()?;
            (generation, sh.db.keyspace(&sh.windows.chunks_keyspace_name(key, generation), window::keyspace_options)?)
        }
    })
}

/// Writes the window's series into `chunks_ks` (not yet visible).
fn write_chunks(sh: &Shared, w: &window::Window, chunks_ks: &fjall::Keyspace) -> Result<SealOutcome> {
    let start_ms = w.start_ms;
    let ids = universe(std::slice::from_ref(w))?;
    let mut outcome = SealOutcome {
        start_ms,
        class: w.class,
        series: 0,
        samples: 0,
        chunks: 0,
        tier_rows: 0,
        swap: SealSwap::WindowGone,
    };
    let mut batch = sh.db.batch().durability(Some(fjall::PersistMode::Buffer));
    let mut buf = Vec::new();
    let mut index = postings::PostingsBuilder::default();
    for id in ids {
        let bucket = sh.bucketing.bucket(id);
        let mut samples = Vec::new();
        read_series(std::slice::from_ref(w), None, bucket, id, 0, MAX_TIMESTAMP_MS, &mut samples)?;
        let histograms = read_histograms(sh, std::slice::from_ref(w), None, bucket, id, (0, MAX_TIMESTAMP_MS))?;
        if samples.is_empty() && histograms.is_empty() {
            continue;
        }
        index.add(id, &series::canonical_of(&sh.series, id)?);
        if !histograms.is_empty() {
            histogram_run::drop_shadowed(&mut samples, &histograms);
            outcome.chunks += histogram_run::write(&mut batch, chunks_ks, bucket, id, &histograms)?;
            outcome.samples += histograms.len();
        }
        for run in samples.chunks(chunk::CHUNK_SAMPLES) {
            let Some(head) = run.first() else { continue };
            buf.clear();
            chunk::encode(run, chunk::ZSTD_LEVEL, &mut buf)
                .map_err(|_| StorageError::Corrupt { what: "unsorted samples while sealing" })?;
            batch.insert(chunks_ks, keys::point_key(bucket, id, head.timestamp_ms), buf.clone());
            outcome.chunks += 1;
        }
        if histograms.is_empty() {
            outcome.tier_rows += tier_rows::put_series(
                &mut batch,
                chunks_ks,
                (bucket, id),
                &samples,
                (&sh.tier_intervals_ms, sh.tier_min_density),
                &mut buf,
            )?;
        }
        outcome.series += 1;
        outcome.samples += samples.len();
        if batch.len() >= BATCH_ROWS {
            index.write(&mut batch, chunks_ks);
            std::mem::replace(&mut batch, sh.db.batch().durability(Some(fjall::PersistMode::Buffer))).commit()?;
        }
    }
    index.write(&mut batch, chunks_ks);
    if let Some(points) = &w.points {
        // Start timestamps are change points, copied as they are.
        start_ts::copy_all(&mut batch, points, chunks_ks)?;
    }
    batch.commit()?;
    // Written once: into tables now, rather than left in a memtable that holds every journal
    // file written since back from deletion until an idle flush (see `write/idle.rs`).
    chunks_ks.rotate_memtable()?;
    Ok(outcome)
}
