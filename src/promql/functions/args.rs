//! The evaluated arguments of one function call, taken by position and type.

use crate::promql::error::{EvalError, Result};
use crate::promql::value::{Elem, StepValue};

/// A call's argument values, in order; each is taken once.
pub(crate) struct Args {
    values: Vec<Option<StepValue>>,
}

impl Args {
    pub(crate) fn new(values: Vec<StepValue>) -> Self {
        Self { values: values.into_iter().map(Some).collect() }
    }

    /// How many arguments the call has.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn take(&mut self, i: usize) -> Result<StepValue> {
        self.values
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| EvalError::bad(format!("missing argument {}", i + 1)))
    }

    /// Argument `i`, an instant vector.
    pub(crate) fn vector(&mut self, i: usize) -> Result<Vec<Elem>> {
        match self.take(i)? {
            StepValue::Vector(v) => Ok(v),
            other => Err(EvalError::bad(format!("expected instant vector, got {}", other.type_name()))),
        }
    }

    /// Argument `i`, a scalar.
    pub(crate) fn scalar(&mut self, i: usize) -> Result<f64> {
        match self.take(i)? {
            StepValue::Scalar(v) => Ok(v),
            other => Err(EvalError::bad(format!("expected scalar, got {}", other.type_name()))),
        }
    }

    /// Argument `i`, a string.
    pub(crate) fn string(&mut self, i: usize) -> Result<String> {
        match self.take(i)? {
            StepValue::String(v) => Ok(v),
            other => Err(EvalError::bad(format!("expected string, got {}", other.type_name()))),
        }
    }
}
