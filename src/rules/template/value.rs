//! The values a template computes with: the Go types Prometheus' template data and functions
//! produce, with their Go type names (for error messages and `%T`) and truth.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::gotime::GoTime;

/// A string-keyed map of strings (`map[string]string`).
pub(super) type StrMap = Rc<BTreeMap<String, String>>;

/// One sample of a `query` answer (`*template.sample`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub(super) labels: StrMap,
    pub(super) value: f64,
}

/// The alert's template data (Prometheus' anonymous struct).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Data {
    pub(super) labels: StrMap,
    pub(super) external_labels: StrMap,
    pub(super) external_url: Rc<str>,
    pub(super) value: f64,
}

/// Go's type name of the alert data struct.
pub(super) const DATA_TYPE: &str =
    "struct { Labels map[string]string; ExternalLabels map[string]string; ExternalURL string; Value interface {} }";

/// A value in a template.
#[derive(Debug, Clone)]
pub(super) enum Value {
    /// No value: a nil interface, a missing field of nil data (prints `<no value>`).
    Nil,
    /// `bool`
    Bool(bool),
    /// `int` (also the int64 results of methods such as `UnixMilli`).
    Int(i64),
    /// `float64`
    Float(f64),
    /// `complex128`
    Complex(f64, f64),
    /// `string`
    Str(Rc<str>),
    /// `html/template.HTML` (from `safeHtml`).
    Html(Rc<str>),
    /// `map[string]string`
    StrMap(StrMap),
    /// `map[string]interface {}` (from `args`).
    AnyMap(Rc<BTreeMap<String, Value>>),
    /// `template.queryResult` (a list of samples).
    Samples(Rc<[Rc<Sample>]>),
    /// `*template.sample`, `None` a nil pointer.
    Sample(Option<Rc<Sample>>),
    /// `time.Time`, or `*time.Time` when the flag is set.
    Time(GoTime, bool),
    /// `time.Duration` in nanoseconds, or `*time.Duration` when the flag is set.
    Duration(i64, bool),
    /// The alert's data.
    Data(Rc<Data>),
}

impl Value {
    /// A string value.
    pub(super) fn str(s: impl Into<Rc<str>>) -> Value {
        Value::Str(s.into())
    }

    /// Go's name of the value's dynamic type (`%T`).
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Complex(..) => "complex128",
            Value::Str(_) => "string",
            Value::Html(_) => "template.HTML",
            Value::StrMap(_) => "map[string]string",
            Value::AnyMap(_) => "map[string]interface {}",
            Value::Samples(_) => "template.queryResult",
            Value::Sample(_) => "*template.sample",
            Value::Time(_, true) => "*time.Time",
            Value::Time(_, false) => "time.Time",
            Value::Duration(_, true) => "*time.Duration",
            Value::Duration(_, false) => "time.Duration",
            Value::Data(_) => DATA_TYPE,
        }
    }

    /// Go's `isTrue`: the zero value of a type, a nil pointer and an empty collection are false.
    pub(super) fn truth(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Complex(r, i) => *r != 0.0 || *i != 0.0,
            Value::Str(s) | Value::Html(s) => !s.is_empty(),
            Value::StrMap(m) => !m.is_empty(),
            Value::AnyMap(m) => !m.is_empty(),
            Value::Samples(s) => !s.is_empty(),
            Value::Sample(s) => s.is_some(),
            Value::Duration(d, ptr) => *ptr || *d != 0,
            Value::Time(..) | Value::Data(_) => true,
        }
    }

    /// Go's `indirect`: the value a non-nil pointer points to.
    pub(super) fn indirect(self) -> Value {
        match self {
            Value::Time(t, true) => Value::Time(t, false),
            Value::Duration(d, true) => Value::Duration(d, false),
            v => v,
        }
    }

    /// The text of a string-kinded value (`string`, `template.HTML`).
    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Html(s) => Some(s),
            _ => None,
        }
    }
}

/// A function or method parameter's Go type, as arguments are checked and converted against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    /// `interface {}` or `reflect.Value`: anything.
    Any,
    /// `string`
    Str,
    /// `template.queryResult`
    QueryResult,
    /// `*template.sample`
    Sample,
    /// `time.Duration`
    Duration,
    /// `time.Time`
    Time,
}

impl Ty {
    /// Go's name of the type.
    pub(super) fn name(self) -> &'static str {
        match self {
            Ty::Any => "interface {}",
            Ty::Str => "string",
            Ty::QueryResult => "template.queryResult",
            Ty::Sample => "*template.sample",
            Ty::Duration => "time.Duration",
            Ty::Time => "time.Time",
        }
    }

    /// The zero value of a type that can be nil.
    pub(super) fn nil_value(self) -> Option<Value> {
        match self {
            Ty::Any => Some(Value::Nil),
            Ty::QueryResult => Some(Value::Samples(Rc::from(Vec::new()))),
            Ty::Sample => Some(Value::Sample(None)),
            Ty::Str | Ty::Duration | Ty::Time => None,
        }
    }
}
