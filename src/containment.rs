//! Containment of panics at a request boundary: a dependency that panics on some input (the
//! PromQL parser did, on out-of-range durations) must cost that request an error answer, never
//! the connection, the task or the process.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A panic caught while doing `what`, with the panic's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} failed: a panic was contained ({message})")]
pub struct Panicked {
    /// What was being done, e.g. "parsing the query".
    pub what: &'static str,
    /// The panic's message, when it carried a string.
    pub message: String,
}

/// Runs `f`, turning a panic into [`Panicked`]. `f` must leave nothing half-updated that the
/// caller reads afterwards (callers pass pure computations over their own inputs).
///
/// # Errors
/// [`Panicked`] when `f` panicked.
pub fn contain<T>(what: &'static str, f: impl FnOnce() -> T) -> Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| Panicked { what, message: message(payload.as_ref()) })
}

/// The message of a panic payload (`panic!` with a literal or a formatted string).
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_errors_with_their_message() {
        assert_eq!(contain("adding", || 1 + 1), Ok(2));
        let e = contain("parsing", || -> u8 { panic!("bad {}", 7) }).unwrap_err();
        assert_eq!(e.to_string(), "parsing failed: a panic was contained (bad 7)");
        let e = contain("decoding", || std::time::Duration::from_secs_f64(f64::NAN)).unwrap_err();
        assert!(e.message.contains("cannot convert float seconds to Duration"), "{}", e.message);
    }
}
