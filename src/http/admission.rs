//! Admission control for the write paths (remote-write and import): at most
//! `--max-concurrent-writes` requests and `--max-inflight-bytes` of request memory at once.
//!
//! Invariant: every byte a write request holds (its body, its decompressed form, and its decoded
//! form: reserved as the zero-copy scanner's batch grows, bounded by a walk over the body before
//! prost decodes it ([`crate::remote::footprint`]), or counted per import line before the line
//! is parsed) is reserved in the byte budget *before* it is allocated, except gzip output
//! (reserved right after decompression, which is itself capped by `--max-request-bytes`), and
//! stays reserved until the request has been committed and answered. A request that cannot
//! reserve is refused at once with 429 and `Retry-After`: it never waits, so a flood can never
//! queue unbounded memory.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;

/// The byte budget counts in units of this many bytes (so `u32` permit counts cover terabytes).
const UNIT: usize = 1024;

/// How much memory a typical request holds per decompressed byte: the decompressed buffer itself
/// plus the decoded batch (canonical label bytes and 16-byte samples). Used to check that
/// `--max-inflight-bytes` admits a request of `--max-request-bytes`; the write path reserves
/// each request's exact needs.
pub const DECODED_FACTOR: usize = 3;

/// Default `--max-concurrent-writes`.
pub const DEFAULT_MAX_CONCURRENT_WRITES: usize = 64;

/// Default `--max-inflight-bytes`.
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 512 << 20;

/// The write budget shared by all write requests.
#[derive(Debug)]
pub struct Admission {
    slots: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_concurrent: usize,
    max_bytes: usize,
    /// Permits `bytes` was created with (`max_bytes` in units).
    units: usize,
}

/// What one admitted request holds; dropping it gives everything back.
#[derive(Debug)]
pub struct Ticket {
    _slot: OwnedSemaphorePermit,
    bytes: Arc<Semaphore>,
    /// Whole units taken from the budget; always covers `used`.
    held: Option<OwnedSemaphorePermit>,
    /// Bytes reserved so far (decoders reserve per series: a few hundred bytes at a time, so
    /// the budget's semaphore is only touched when `used` outgrows `held`).
    used: usize,
    max_bytes: usize,
}

impl Admission {
    /// A budget of `max_concurrent` requests and `max_bytes` bytes (both at least 1 unit).
    pub fn new(max_concurrent: usize, max_bytes: usize) -> Self {
        let max_concurrent = max_concurrent.max(1);
        let units = max_bytes.div_ceil(UNIT).clamp(1, Semaphore::MAX_PERMITS);
        Self {
            slots: Arc::new(Semaphore::new(max_concurrent)),
            bytes: Arc::new(Semaphore::new(units)),
            max_concurrent,
            max_bytes,
            units,
        }
    }

    /// Takes a request slot, or refuses when `--max-concurrent-writes` requests are in flight.
    ///
    /// # Errors
    /// [`ApiError::Overloaded`] (429).
    pub fn admit(&self) -> Result<Ticket, ApiError> {
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            ApiError::Overloaded(format!(
                "{} write requests are already in flight (--max-concurrent-writes); retry later",
                self.max_concurrent
            ))
        })?;
        Ok(Ticket { _slot: slot, bytes: self.bytes.clone(), held: None, used: 0, max_bytes: self.max_bytes })
    }

    /// Bytes currently reserved by requests in flight (rounded to the accounting unit).
    pub fn bytes_in_use(&self) -> usize {
        self.units.saturating_sub(self.bytes.available_permits()) * UNIT
    }
}

impl Ticket {
    /// Reserves `bytes` more for this request.
    ///
    /// # Errors
    /// [`ApiError::Overloaded`] (429) when the budget cannot cover them right now;
    /// [`ApiError::Oversized`] (413) when the whole budget could never cover this request.
    pub fn reserve(&mut self, bytes: usize) -> Result<(), ApiError> {
        if bytes == 0 {
            return Ok(());
        }
        let total = bytes.saturating_add(self.used);
        let held = self.reserved();
        if total <= held {
            self.used = total;
            return Ok(());
        }
        if total > self.max_bytes {
            return Err(ApiError::Oversized(format!(
                "this request needs at least {} KiB of memory to decode (body, decompressed body and decoded samples), more than the whole {} MiB budget (--max-inflight-bytes); send smaller requests",
                total.div_ceil(UNIT),
                self.max_bytes >> 20
            )));
        }
        let units = u32::try_from((total - held).div_ceil(UNIT)).map_err(|_| self.refuse(bytes))?;
        let permit = self.bytes.clone().try_acquire_many_owned(units).map_err(|_| self.refuse(bytes))?;
        match &mut self.held {
            Some(held) => held.merge(permit),
            None => self.held = Some(permit),
        }
        self.used = total;
        Ok(())
    }

    /// Bytes this request holds (what it reserved, rounded up to the accounting unit).
    pub fn reserved(&self) -> usize {
        self.held.as_ref().map_or(0, |p| p.num_permits() * UNIT)
    }

    fn refuse(&self, bytes: usize) -> ApiError {
        ApiError::Overloaded(format!(
            "write requests in flight already hold most of the {} MiB budget (--max-inflight-bytes); this one needs {} KiB more; retry later",
            self.max_bytes >> 20,
            bytes.div_ceil(UNIT)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_bytes_are_bounded_and_returned() {
        let a = Admission::new(2, 10 * UNIT);
        let mut t1 = a.admit().unwrap();
        let t2 = a.admit().unwrap();
        assert!(matches!(a.admit(), Err(ApiError::Overloaded(_))), "third request refused");
        t1.reserve(6 * UNIT).unwrap();
        t1.reserve(1).unwrap();
        assert_eq!(t1.reserved(), 7 * UNIT);
        let mut t2 = t2;
        let err = t2.reserve(4 * UNIT).unwrap_err();
        assert!(err.to_string().contains("--max-inflight-bytes"), "{err}");
        assert_eq!(a.bytes_in_use(), 7 * UNIT);
        drop(t1);
        assert_eq!(a.bytes_in_use(), 0);
        t2.reserve(10 * UNIT).unwrap();
        drop(t2);
        assert!(a.admit().is_ok());
    }

    #[test]
    fn small_reservations_add_up_to_bytes_not_units() {
        let a = Admission::new(1, 200 * UNIT);
        let mut t = a.admit().unwrap();
        for _ in 0..1000 {
            t.reserve(100).unwrap();
        }
        assert_eq!(t.reserved(), 100_000usize.div_ceil(UNIT) * UNIT);
        assert_eq!(a.bytes_in_use(), t.reserved());
        let err = t.reserve(200 * UNIT).unwrap_err();
        assert!(matches!(err, ApiError::Oversized(_)), "{err}");
        assert_eq!(a.bytes_in_use(), t.reserved(), "a refused reservation takes nothing");
    }

    #[test]
    fn requests_larger_than_the_budget_are_refused() {
        let a = Admission::new(1, UNIT);
        let mut t = a.admit().unwrap();
        assert!(matches!(t.reserve(usize::MAX), Err(ApiError::Oversized(_))));
        assert!(matches!(t.reserve(2 * UNIT), Err(ApiError::Oversized(_))));
        assert_eq!(a.bytes_in_use(), 0);
    }
}
