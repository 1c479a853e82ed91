//! What a function needs from the query evaluating it, and nothing more: the annotations it
//! raises, the query's limits (see [`Budget`]) and its time range. The evaluator implements
//! [`Context`]; functions get their arguments as values and never see the expression tree.

use crate::promql::budget::Budget;
pub(crate) use crate::promql::positions::Spot;

/// The evaluating query, as functions see it.
pub(crate) trait Context: Budget {
    /// Raises a warning annotation about the node being evaluated, at `spot` of it (the
    /// evaluator turns that into a position in the query).
    fn warn_at(&self, spot: Spot, msg: String);

    /// Raises an info annotation, as [`Context::warn_at`].
    fn info_at(&self, spot: Spot, msg: String);

    /// Raises a warning annotation about the node's subject ([`Spot::Subject`]).
    fn warn(&self, msg: String) {
        self.warn_at(Spot::Subject, msg);
    }

    /// Raises an info annotation about the node's subject ([`Spot::Subject`]).
    fn info(&self, msg: String) {
        self.info_at(Spot::Subject, msg);
    }

    /// The query's start, in ms (`start()`, `range()`).
    fn start_ms(&self) -> i64;

    /// The query's end, in ms (equal to the start for instant queries).
    fn end_ms(&self) -> i64;

    /// The range query's step, in ms (0 for instant queries).
    fn interval_ms(&self) -> i64;
}

/// A [`Context`] without limits that records the annotations raised, to call functions
/// directly in tests.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Recorder {
    pub annotations: std::cell::RefCell<crate::promql::Annotations>,
}

#[cfg(test)]
impl Budget for Recorder {
    fn check_samples(&self, _extra: usize) -> crate::promql::error::Result<()> {
        Ok(())
    }

    fn hold(&self, _bytes: usize, _what: &'static str) -> crate::promql::error::Result<()> {
        Ok(())
    }

    fn release(&self, _bytes: usize) {}
}

#[cfg(test)]
impl Context for Recorder {
    fn warn_at(&self, _spot: Spot, msg: String) {
        self.annotations.borrow_mut().warn(msg);
    }

    fn info_at(&self, _spot: Spot, msg: String) {
        self.annotations.borrow_mut().info(msg);
    }

    fn start_ms(&self) -> i64 {
        0
    }

    fn end_ms(&self) -> i64 {
        0
    }

    fn interval_ms(&self) -> i64 {
        0
    }
}
