//! The limits one query evaluation runs under, as the computations that grow see them: its
//! sample limit and its memory budget ([`Budget`], which the evaluator keeps),
//! and the bytes a computation holds while it grows ([`GrowingHold`]).

use super::error::Result;

/// The limits of the query being evaluated.
pub(crate) trait Budget {
    /// Fails when loaded samples plus `extra` intermediate points exceed the limit.
    fn check_samples(&self, extra: usize) -> Result<()>;

    /// Counts `bytes` more as held for the rest of the query (a cache entry, loaded series).
    ///
    /// # Errors
    /// [`EvalError::TooMuchMemory`](super::error::EvalError::TooMuchMemory) when the query then
    /// holds more than allowed.
    fn hold(&self, bytes: usize, what: &'static str) -> Result<()>;

    /// Counts `bytes` (counted by [`Budget::hold`] before) as no longer held.
    fn release(&self, bytes: usize);
}

/// Bytes a computation holds while it grows, counted against the query's budget as they are
/// added (so parallel parts of a range query see each other's growth) and released when it is
/// done: its result, if kept, is counted by its keeper.
pub(crate) struct GrowingHold<'b> {
    budget: &'b dyn Budget,
    what: &'static str,
    bytes: usize,
}

impl<'b> GrowingHold<'b> {
    pub fn new(budget: &'b dyn Budget, what: &'static str) -> Self {
        Self { budget, what, bytes: 0 }
    }

    /// Counts `bytes` more.
    ///
    /// # Errors
    /// [`EvalError::TooMuchMemory`](super::error::EvalError::TooMuchMemory) past the budget.
    pub fn add(&mut self, bytes: usize) -> Result<()> {
        self.bytes = self.bytes.saturating_add(bytes);
        self.budget.hold(bytes, self.what)
    }
}

impl Drop for GrowingHold<'_> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}
