//! Go's `time.Time` (always UTC here) and `time.Duration`: `Format` with Go's reference-time
//! layouts, `String`, and the methods templates call on them (`(now | toTime).Format "2006"`,
//! `(toDuration 90).String`).

use std::fmt;

use super::value::{Ty, Value};

const NANOS: i64 = 1_000_000_000;

/// An instant in UTC: seconds since the Unix epoch and nanoseconds within the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct GoTime {
    secs: i64,
    nanos: i64,
}

/// The calendar fields of a time.
struct Civil {
    year: i64,
    month: usize,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    yday: i64,
    weekday: usize,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

impl GoTime {
    /// `time.Unix(secs, nanos).UTC()`, nanoseconds outside a second carried into the seconds.
    pub(super) fn unix(secs: i64, nanos: i64) -> GoTime {
        GoTime { secs: secs.saturating_add(nanos.div_euclid(NANOS)), nanos: nanos.rem_euclid(NANOS) }
    }

    fn civil(&self) -> Civil {
        let days = self.secs.div_euclid(86_400);
        let rem = self.secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month: (month - 1) as usize,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            yday: days - days_from_civil(year, 1, 1) + 1,
            weekday: (days + 4).rem_euclid(7) as usize,
        }
    }

    /// `t.Add(d)`.
    pub(super) fn add(self, d: i64) -> GoTime {
        GoTime::unix(self.secs.saturating_add(d / NANOS), self.nanos + d % NANOS)
    }

    /// `t.Sub(u)`, saturating like Go's.
    pub(super) fn sub(self, u: GoTime) -> i64 {
        let ns = (i128::from(self.secs) - i128::from(u.secs)) * i128::from(NANOS) + i128::from(self.nanos - u.nanos);
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// `t.UnixNano()` (wrapping outside 1678..2262 as Go's does).
    fn unix_nano(self) -> i64 {
        self.secs.wrapping_mul(NANOS).wrapping_add(self.nanos)
    }

    /// `t.Format(layout)`.
    pub(super) fn format(&self, layout: &str) -> String {
        let c = self.civil();
        let mut out = String::with_capacity(layout.len() + 10);
        let mut rest = layout;
        while !rest.is_empty() {
            let (prefix, std, suffix) = next_std_chunk(rest);
            out.push_str(prefix);
            rest = suffix;
            let Some(std) = std else { break };
            let pad = |out: &mut String, v: i64, w: usize| out.push_str(&format!("{v:0w$}"));
            match std {
                Std::Year => pad(&mut out, c.year.rem_euclid(100), 2),
                Std::LongYear => pad(&mut out, c.year, 4),
                Std::Month => out.push_str(&MONTHS[c.month][..3]),
                Std::LongMonth => out.push_str(MONTHS[c.month]),
                Std::NumMonth => pad(&mut out, c.month as i64 + 1, 0),
                Std::ZeroMonth => pad(&mut out, c.month as i64 + 1, 2),
                Std::WeekDay => out.push_str(&DAYS[c.weekday][..3]),
                Std::LongWeekDay => out.push_str(DAYS[c.weekday]),
                Std::Day => pad(&mut out, c.day, 0),
                Std::UnderDay => out.push_str(&format!("{:>2}", c.day)),
                Std::ZeroDay => pad(&mut out, c.day, 2),
                Std::UnderYearDay => out.push_str(&format!("{:>3}", c.yday)),
                Std::ZeroYearDay => pad(&mut out, c.yday, 3),
                Std::Hour => pad(&mut out, c.hour, 2),
                Std::Hour12 => pad(&mut out, if c.hour % 12 == 0 { 12 } else { c.hour % 12 }, 0),
                Std::ZeroHour12 => pad(&mut out, if c.hour % 12 == 0 { 12 } else { c.hour % 12 }, 2),
                Std::Minute => pad(&mut out, c.minute, 0),
                Std::ZeroMinute => pad(&mut out, c.minute, 2),
                Std::Second => pad(&mut out, c.second, 0),
                Std::ZeroSecond => pad(&mut out, c.second, 2),
                Std::Pm(upper) => out.push_str(match (c.hour >= 12, upper) {
                    (true, true) => "PM",
                    (false, true) => "AM",
                    (true, false) => "pm",
                    (false, false) => "am",
                }),
                Std::Tz => out.push_str("UTC"),
                Std::Iso8601 => out.push('Z'),
                Std::NumTz(zone) => out.push_str(zone),
                Std::Frac { sep, digits, trim } => {
                    let all = format!("{:09}", self.nanos);
                    let mut n = digits.min(9);
                    if trim {
                        n = all[..n].trim_end_matches('0').len();
                        if n == 0 {
                            continue;
                        }
                    }
                    out.push(sep);
                    out.push_str(&all[..n]);
                }
            }
        }
        out
    }
}

impl fmt::Display for GoTime {
    /// `t.String()` of a UTC time.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.format("2006-01-02 15:04:05.999999999 -0700 MST"))
    }
}

/// A layout element (Go's `std*` constants).
#[derive(Debug, Clone, Copy)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    Pm(bool),
    Tz,
    /// `Z07:00` and friends: `Z` in UTC.
    Iso8601,
    /// `-07:00` and friends: the zero offset in that form.
    NumTz(&'static str),
    Frac {
        sep: char,
        digits: usize,
        trim: bool,
    },
}

/// Go's `nextStdChunk`: the text before the first layout element, the element, the rest.
fn next_std_chunk(layout: &str) -> (&str, Option<Std>, &str) {
    let b = layout.as_bytes();
    let at = |i: usize, s: &str| layout.get(i..).is_some_and(|r| r.starts_with(s));
    let lower_next = |i: usize| b.get(i).is_some_and(u8::is_ascii_lowercase);
    for i in 0..b.len() {
        let hit = |std: Std, len: usize| (&layout[..i], Some(std), &layout[i + len..]);
        match b[i] {
            b'J' if at(i, "Jan") => {
                if at(i, "January") {
                    return hit(Std::LongMonth, 7);
                }
                if !lower_next(i + 3) {
                    return hit(Std::Month, 3);
                }
            }
            b'M' if at(i, "Mon") => {
                if at(i, "Monday") {
                    return hit(Std::LongWeekDay, 6);
                }
                if !lower_next(i + 3) {
                    return hit(Std::WeekDay, 3);
                }
            }
            b'M' if at(i, "MST") => return hit(Std::Tz, 3),
            b'0' => match b.get(i + 1) {
                Some(c @ b'1'..=b'6') => {
                    let std =
                        [Std::ZeroMonth, Std::ZeroDay, Std::ZeroHour12, Std::ZeroMinute, Std::ZeroSecond, Std::Year]
                            [usize::from(c - b'1')];
                    return hit(std, 2);
                }
                Some(b'0') if b.get(i + 2) == Some(&b'2') => return hit(Std::ZeroYearDay, 3),
                _ => {}
            },
            b'1' => return if b.get(i + 1) == Some(&b'5') { hit(Std::Hour, 2) } else { hit(Std::NumMonth, 1) },
            b'2' => return if at(i, "2006") { hit(Std::LongYear, 4) } else { hit(Std::Day, 1) },
            b'_' => {
                if b.get(i + 1) == Some(&b'2') {
                    if at(i + 1, "2006") {
                        return (&layout[..i + 1], Some(Std::LongYear), &layout[i + 5..]);
                    }
                    return hit(Std::UnderDay, 2);
                }
                if at(i, "__2") {
                    return hit(Std::UnderYearDay, 3);
                }
            }
            b'3' => return hit(Std::Hour12, 1),
            b'4' => return hit(Std::Minute, 1),
            b'5' => return hit(Std::Second, 1),
            b'P' if b.get(i + 1) == Some(&b'M') => return hit(Std::Pm(true), 2),
            b'p' if b.get(i + 1) == Some(&b'm') => return hit(Std::Pm(false), 2),
            b'-' | b'Z' => {
                let zones: [(&str, &'static str); 5] = [
                    ("070000", "+000000"),
                    ("07:00:00", "+00:00:00"),
                    ("0700", "+0000"),
                    ("07:00", "+00:00"),
                    ("07", "+00"),
                ];
                for (pat, zero) in zones {
                    if at(i + 1, pat) {
                        let std = if b[i] == b'Z' { Std::Iso8601 } else { Std::NumTz(zero) };
                        return hit(std, pat.len() + 1);
                    }
                }
            }
            b'.' | b',' if matches!(b.get(i + 1), Some(b'0' | b'9')) => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while b.get(j) == Some(&ch) {
                    j += 1;
                }
                if !b.get(j).is_some_and(u8::is_ascii_digit) {
                    let std = Std::Frac { sep: b[i] as char, digits: j - (i + 1), trim: ch == b'9' };
                    return hit(std, j - i);
                }
            }
            _ => {}
        }
    }
    (layout, None, "")
}

/// `time.Duration.String`: `1h2m3.5s`, `1.5ms`, `0s`.
pub(super) fn duration_string(d: i64) -> String {
    if d == 0 {
        return "0s".into();
    }
    let mut u = d.unsigned_abs();
    let sign = if d < 0 { "-" } else { "" };
    if u < NANOS as u64 {
        let (unit, prec) = match u {
            0..1_000 => ("ns", 0),
            1_000..1_000_000 => ("µs", 3),
            _ => ("ms", 6),
        };
        return format!("{sign}{}{unit}", frac(u, prec));
    }
    let secs = frac(u % 60_000_000_000, 9);
    u /= 60_000_000_000;
    if u == 0 {
        return format!("{sign}{secs}s");
    }
    let (mins, hours) = (u % 60, u / 60);
    if hours == 0 {
        return format!("{sign}{mins}m{secs}s");
    }
    format!("{sign}{hours}h{mins}m{secs}s")
}

/// `v / 10^prec` with the fraction's trailing zeros (and a bare point) dropped.
fn frac(v: u64, prec: u32) -> String {
    let p = 10u64.pow(prec);
    let (int, fr) = (v / p, v % p);
    if fr == 0 {
        return int.to_string();
    }
    let digits = format!("{fr:0w$}", w = prec as usize);
    format!("{int}.{}", digits.trim_end_matches('0'))
}

/// A method of `time.Time` or `time.Duration` that templates can call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    Format,
    Add,
    Sub,
    Before,
    After,
    Equal,
    Unix,
    UnixMilli,
    UnixMicro,
    UnixNano,
    Utc,
    String,
    Year,
    Day,
    Hour,
    Minute,
    Second,
    Nanosecond,
    YearDay,
    IsZero,
    Seconds,
    Minutes,
    Hours,
    Milliseconds,
    Microseconds,
    Nanoseconds,
    Abs,
}

impl Method {
    /// The method `name` of `receiver`, if it has one.
    pub(super) fn lookup(receiver: &Value, name: &str) -> Option<Method> {
        use Method::*;
        let m = match (receiver, name) {
            (Value::Time(..), "Format") => Format,
            (Value::Time(..), "Add") => Add,
            (Value::Time(..), "Sub") => Sub,
            (Value::Time(..), "Before") => Before,
            (Value::Time(..), "After") => After,
            (Value::Time(..), "Equal") => Equal,
            (Value::Time(..), "Unix") => Unix,
            (Value::Time(..), "UnixMilli") => UnixMilli,
            (Value::Time(..), "UnixMicro") => UnixMicro,
            (Value::Time(..), "UnixNano") => UnixNano,
            (Value::Time(..), "UTC" | "Local") => Utc,
            (Value::Time(..) | Value::Duration(..), "String") => String,
            (Value::Time(..), "Year") => Year,
            (Value::Time(..), "Day") => Day,
            (Value::Time(..), "Hour") => Hour,
            (Value::Time(..), "Minute") => Minute,
            (Value::Time(..), "Second") => Second,
            (Value::Time(..), "Nanosecond") => Nanosecond,
            (Value::Time(..), "YearDay") => YearDay,
            (Value::Time(..), "IsZero") => IsZero,
            (Value::Duration(..), "Seconds") => Seconds,
            (Value::Duration(..), "Minutes") => Minutes,
            (Value::Duration(..), "Hours") => Hours,
            (Value::Duration(..), "Milliseconds") => Milliseconds,
            (Value::Duration(..), "Microseconds") => Microseconds,
            (Value::Duration(..), "Nanoseconds") => Nanoseconds,
            (Value::Duration(..), "Abs") => Abs,
            _ => return None,
        };
        Some(m)
    }

    /// The method's parameters.
    pub(super) fn params(self) -> &'static [Ty] {
        match self {
            Method::Format => &[Ty::Str],
            Method::Add => &[Ty::Duration],
            Method::Sub | Method::Before | Method::After | Method::Equal => &[Ty::Time],
            _ => &[],
        }
    }

    /// Calls the method on `receiver` with `args` of the [`params`](Self::params) types.
    pub(super) fn call(self, receiver: &Value, args: &[Value]) -> Value {
        let t = match receiver {
            Value::Time(t, _) => *t,
            Value::Duration(d, _) => return self.call_duration(*d),
            _ => return Value::Nil,
        };
        let arg_time = || match args.first() {
            Some(Value::Time(u, _)) => *u,
            _ => t,
        };
        let c = t.civil();
        match self {
            Method::Format => Value::str(t.format(args.first().and_then(Value::as_str).unwrap_or(""))),
            Method::Add => {
                let d = match args.first() {
                    Some(Value::Duration(d, _)) => *d,
                    _ => 0,
                };
                Value::Time(t.add(d), false)
            }
            Method::Sub => Value::Duration(t.sub(arg_time()), false),
            Method::Before => Value::Bool(t < arg_time()),
            Method::After => Value::Bool(t > arg_time()),
            Method::Equal => Value::Bool(t == arg_time()),
            Method::Unix => Value::Int(t.secs),
            Method::UnixMilli => Value::Int(t.secs.wrapping_mul(1000).wrapping_add(t.nanos / 1_000_000)),
            Method::UnixMicro => Value::Int(t.secs.wrapping_mul(1_000_000).wrapping_add(t.nanos / 1000)),
            Method::UnixNano => Value::Int(t.unix_nano()),
            Method::Utc => Value::Time(t, false),
            Method::String => Value::str(t.to_string()),
            Method::Year => Value::Int(c.year),
            Method::Day => Value::Int(c.day),
            Method::Hour => Value::Int(c.hour),
            Method::Minute => Value::Int(c.minute),
            Method::Second => Value::Int(c.second),
            Method::Nanosecond => Value::Int(t.nanos),
            Method::YearDay => Value::Int(c.yday),
            Method::IsZero => Value::Bool(t == GoTime::unix(-62_135_596_800, 0)),
            _ => Value::Nil,
        }
    }

    fn call_duration(self, d: i64) -> Value {
        let float = |unit: i64| Value::Float((d / unit) as f64 + (d % unit) as f64 / unit as f64);
        match self {
            Method::String => Value::str(duration_string(d)),
            Method::Seconds => float(NANOS),
            Method::Minutes => float(60 * NANOS),
            Method::Hours => float(3600 * NANOS),
            Method::Milliseconds => Value::Int(d / 1_000_000),
            Method::Microseconds => Value::Int(d / 1000),
            Method::Nanoseconds => Value::Int(d),
            Method::Abs => Value::Duration(if d == i64::MIN { i64::MAX } else { d.abs() }, false),
            _ => Value::Nil,
        }
    }
}
