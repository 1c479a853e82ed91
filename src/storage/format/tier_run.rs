//! The tier-run codec: one series' [`FloatPoint`]s of one tier (one interval) in one window,
//! as columns under zstd. Pure: no I/O. Byte layout: `docs/format.md`, *Tier runs*.
//!
//! Each point is stored with the end of its interval; times inside a point are offsets back
//! from that end, each as its difference from the point before's (equal for regular scrapes);
//! points whose values are short decimals store mantissas and exact integer moments, others
//! their floats XORed with the same field of the point before and split into byte planes;
//! the extremes refer to the first, last or second-to-last sample when they are one of those
//! (a counter's minimum is its first sample).
//!
//! Invariants: points are in strictly ascending interval order, each end a multiple of the
//! interval, every sample of a point inside `(end - interval, end]`. Every field round-trips
//! to the bit, except that a point in decimal form decodes with its sum, `M2` and co-moment
//! rebuilt from its exact moments ([`FloatPoint::from_exact`]) and a point in float form
//! without exact moments.

use crate::decimal;
use crate::sample::Sample;
use crate::tier::{Exact, FloatPoint};
use crate::varint;

/// Format version of tier runs.
pub const FORMAT_VERSION: u8 = 2;
/// zstd level of tier runs.
pub const ZSTD_LEVEL: i32 = 3;
/// Most points a run may claim (a year of 1-minute points; bounds allocation when decoding).
pub const MAX_POINTS: u64 = 1 << 20;
/// More body bytes than a point can take: flags and scale bytes, 14 wide varints of at most
/// 19 bytes, 6 varints of at most 10 and 10 floats (408; the column lengths come on top, once
/// per run).
const MAX_POINT_BYTES: u64 = 420;
/// Byte columns of a version 2 body (version 1 has 13).
const BODY_COLUMNS: u64 = 21;

/// Why a tier run could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TierRunError {
    /// The bytes end before the header or a column does.
    #[error("tier run is truncated")]
    Truncated,
    /// Unknown format version.
    #[error("unsupported tier run format version {0}")]
    Unsupported(u8),
    /// The header or a field claims something impossible.
    #[error("tier run is invalid: {0}")]
    Invalid(&'static str),
    /// zstd could not compress or decompress the body.
    #[error("tier run body does not (de)compress: {0}")]
    Zstd(String),
}

impl From<varint::VarintError> for TierRunError {
    fn from(_: varint::VarintError) -> Self {
        Self::Truncated
    }
}

/// Which sample of a point an extreme is (2 bits of the flags byte).
const AT_FIRST: u8 = 0;
const AT_LAST: u8 = 1;
const AT_BEFORE_LAST: u8 = 2;
const EXPLICIT: u8 = 3;

const ENDS_STALE: u8 = 1;
const CONSTANT: u8 = 1 << 1;
const MIN_SHIFT: u8 = 2;
const MAX_SHIFT: u8 = 4;
const HAS_RESETS: u8 = 1 << 6;
/// The point's values are short decimals: stored as mantissas, its moments as exact integers.
const DECIMAL: u8 = 1 << 7;

/// Appends the run of `points` (`(end_ms, point)`) of a tier of `interval_ms` to `dst`.
///
/// # Errors
/// [`TierRunError::Invalid`] for no points, more than [`MAX_POINTS`], an end that is not a
/// positive multiple of the interval, or ends not ascending.
pub fn encode(interval_ms: i64, points: &[(i64, FloatPoint)], dst: &mut Vec<u8>) -> Result<(), TierRunError> {
    let (Some(_), true) = (points.first(), interval_ms > 0) else {
        return Err(TierRunError::Invalid("a run needs points and a positive interval"));
    };
    if points.len() as u64 > MAX_POINTS {
        return Err(TierRunError::Invalid("too many points"));
    }
    encode_version(FORMAT_VERSION, interval_ms, points, dst)
}

/// [`encode`] in format `version` (1 or 2; 1 only for tests that version 1 still decodes).
fn encode_version(
    version: u8,
    interval_ms: i64,
    points: &[(i64, FloatPoint)],
    dst: &mut Vec<u8>,
) -> Result<(), TierRunError> {
    let Some(&(first_end, _)) = points.first() else {
        return Err(TierRunError::Invalid("a run needs points and a positive interval"));
    };
    let mut cols = Columns { version, ..Columns::default() };
    let mut prev_index = first_end / interval_ms;
    for (i, &(end, p)) in points.iter().enumerate() {
        if end <= 0 || end % interval_ms != 0 {
            return Err(TierRunError::Invalid("a point's end is not a positive multiple of the interval"));
        }
        if p.count > 0 && (p.first.timestamp_ms <= end - interval_ms || p.last.timestamp_ms > end) {
            return Err(TierRunError::Invalid("a point's samples are outside its interval"));
        }
        let index = end / interval_ms;
        if i > 0 {
            if index <= prev_index {
                return Err(TierRunError::Invalid("points are not in ascending order"));
            }
            varint::put(&mut cols.steps, (index - prev_index) as u64);
        }
        prev_index = index;
        cols.put_point(end, &p);
    }
    let body = cols.body();
    dst.push(version);
    varint::put(dst, interval_ms as u64);
    varint::put(dst, points.len() as u64);
    varint::put(dst, (first_end / interval_ms) as u64);
    varint::put(dst, body.len() as u64);
    let compressed = zstd::bulk::compress(&body, ZSTD_LEVEL).map_err(|e| TierRunError::Zstd(e.to_string()))?;
    dst.extend_from_slice(&compressed);
    Ok(())
}

/// Decodes a run: its interval (ms) and its points with their ends.
///
/// # Errors
/// [`TierRunError`] for bytes that are not a run this version wrote.
pub fn decode(src: &[u8]) -> Result<(i64, Vec<(i64, FloatPoint)>), TierRunError> {
    let mut out = Vec::new();
    let interval = decode_into(src, &mut out)?;
    Ok((interval, out))
}

/// What of each point a decode computes. Every decode gives each point's count, first, last
/// and second-to-last samples, extremes, flags and counter record; the others are left 0 (and
/// `exact` `None`) unless asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// `sum` and `sum_c`.
    pub sums: bool,
    /// Everything else: `m2`, `sxy`, the time sums and the exact moments.
    pub moments: bool,
}

impl Decoded {
    /// Every field.
    pub const ALL: Self = Self { sums: true, moments: true };

    /// What a merge of `fields` needs (see [`FloatPoint::absorb`]).
    pub fn of(fields: crate::tier::Fields) -> Self {
        use crate::tier::Fields;
        match fields {
            Fields::All => Self::ALL,
            Fields::Sums => Self { sums: true, moments: false },
            Fields::Ends | Fields::Extremes | Fields::Counter => Self { sums: false, moments: false },
        }
    }
}

/// [`decode`] into `out`, which is cleared first (and left empty on an error): returns the
/// interval. Reuses `out`'s allocation and the thread's decoding buffers.
///
/// # Errors
/// As [`decode`].
pub fn decode_into(src: &[u8], out: &mut Vec<(i64, FloatPoint)>) -> Result<i64, TierRunError> {
    decode_some_into(src, out, Decoded::ALL)
}

/// [`decode_into`] computing only `what` of each point (the rest 0, see [`Decoded`]): the
/// columns of the fields not asked for are not read (in a version 1 run, whose moments share
/// one column, every field is).
///
/// # Errors
/// As [`decode`].
pub fn decode_some_into(src: &[u8], out: &mut Vec<(i64, FloatPoint)>, what: Decoded) -> Result<i64, TierRunError> {
    out.clear();
    decode_some_append(src, out, what)
}

/// [`decode_some_into`] appending to `out` (left as it was on an error).
///
/// # Errors
/// As [`decode`].
pub fn decode_some_append(src: &[u8], out: &mut Vec<(i64, FloatPoint)>, what: Decoded) -> Result<i64, TierRunError> {
    let base = out.len();
    let h = Header::read(src)?;
    let result = SCRATCH.with(|cell| {
        let mut guard = cell.borrow_mut();
        let s = &mut *guard;
        s.decompress(h.payload, h.body_len)?;
        let what = if h.version >= 2 { what } else { Decoded::ALL };
        let result = read_body(&s.body, &h, (&mut s.counts, &mut s.words), out, what);
        s.trim();
        result
    });
    if result.is_err() {
        out.truncate(base);
    }
    result.map(|()| h.interval)
}

/// [`TierRunError::Invalid`], out of the way of the paths that do not fail.
#[cold]
fn invalid(what: &'static str) -> TierRunError {
    TierRunError::Invalid(what)
}

#[cold]
fn truncated() -> TierRunError {
    TierRunError::Truncated
}

/// The body columns of a run, for size breakdowns (`saltdb-bench size --tiers`): each
/// column's name, its bytes before compression, and its bytes compressed alone at the run's
/// zstd level.
///
/// # Errors
/// As [`decode`].
#[doc(hidden)]
pub fn column_sizes(src: &[u8]) -> Result<Vec<(&'static str, usize, usize)>, TierRunError> {
    let h = Header::read(src)?;
    let body = zstd::bulk::decompress(h.payload, h.body_len).map_err(|e| TierRunError::Zstd(e.to_string()))?;
    let mut rest = body.as_slice();
    let mut out = Vec::new();
    let alone =
        |col: &[u8]| if col.is_empty() { 0 } else { zstd::bulk::compress(col, ZSTD_LEVEL).map_or(0, |c| c.len()) };
    let names: &[&'static str] = if h.version >= 2 { &V2_COLUMNS } else { &V1_COLUMNS };
    for &name in names {
        let (col, after) = column(rest)?;
        out.push((name, col.len(), alone(col)));
        rest = after;
    }
    let w = rest.len() / 8;
    for (i, plane) in rest.chunks(w.max(1)).enumerate() {
        out.push((PLANES.get(i).copied().unwrap_or("plane"), plane.len(), alone(plane)));
    }
    Ok(out)
}

/// Names of version 1's byte columns, in body order.
const V1_COLUMNS: [&str; 13] = [
    "steps",
    "counts",
    "flags",
    "t first",
    "t last",
    "t before last",
    "t spread",
    "t squares",
    "t extremes",
    "tallies",
    "scales",
    "mantissas",
    "moments",
];
/// Names of version 2's byte columns, in body order.
const V2_COLUMNS: [&str; 21] = [
    "steps",
    "counts",
    "flags",
    "t first",
    "t last",
    "t before last",
    "t spread",
    "t squares",
    "t squares low",
    "t extremes",
    "resets",
    "changes",
    "scales",
    "m first",
    "m last",
    "m before last",
    "m min",
    "m max",
    "s1",
    "s2",
    "sxy",
];
const PLANES: [&str; 8] = [
    "float byte 7",
    "float byte 6",
    "float byte 5",
    "float byte 4",
    "float byte 3",
    "float byte 2",
    "float byte 1",
    "float byte 0",
];

/// What a run's header says.
struct Header<'a> {
    version: u8,
    interval: i64,
    n: usize,
    first_index: i64,
    body_len: usize,
    payload: &'a [u8],
}

impl<'a> Header<'a> {
    fn read(src: &'a [u8]) -> Result<Self, TierRunError> {
        let (&version, rest) = src.split_first().ok_or_else(truncated)?;
        if version != 1 && version != 2 {
            return Err(TierRunError::Unsupported(version));
        }
        let (interval, rest) = varint::read(rest)?;
        let (n, rest) = varint::read(rest)?;
        let (first_index, rest) = varint::read(rest)?;
        let (body_len, payload) = varint::read(rest)?;
        let interval = i64::try_from(interval).ok().filter(|&i| i > 0).ok_or_else(|| invalid("interval"))?;
        if n == 0 || n > MAX_POINTS {
            return Err(invalid("point count"));
        }
        if body_len > n * MAX_POINT_BYTES + BODY_COLUMNS * 10 {
            return Err(invalid("body length"));
        }
        let first_index = i64::try_from(first_index).map_err(|_| TierRunError::Invalid("first interval"))?;
        // Both fit: `n <= MAX_POINTS`, and the body length is bounded by it.
        Ok(Self { version, interval, n: n as usize, first_index, body_len: body_len as usize, payload })
    }
}

thread_local! {
    /// One zstd decompression context and one set of decoding buffers per thread: creating a
    /// context costs more than decoding a small run.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Buffers kept from one decode to the next.
#[derive(Default)]
struct Scratch {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    /// The decompressed body.
    body: Vec<u8>,
    /// Sample count of every point.
    counts: Vec<u64>,
    /// The float words, every chain's XOR undone.
    words: Vec<u64>,
}

/// Buffers above this many bytes are released after a decode (a huge run keeps no memory).
const SCRATCH_KEPT: usize = 1 << 22;

impl Scratch {
    /// Decompresses a body of `len` bytes into [`Scratch::body`].
    fn decompress(&mut self, payload: &[u8], len: usize) -> Result<(), TierRunError> {
        let dec = match self.zstd.as_mut() {
            Some(d) => d,
            None => self.zstd.insert(zstd::bulk::Decompressor::new().map_err(|e| TierRunError::Zstd(e.to_string()))?),
        };
        // The frame states its content size (the encoder writes it): a header whose body length
        // disagrees is corrupt, refused before up to `n * MAX_POINT_BYTES` bytes are reserved
        // for a payload of a few bytes.
        match zstd::zstd_safe::get_frame_content_size(payload) {
            Ok(Some(size)) if size == len as u64 => {}
            Ok(None) if len <= SCRATCH_KEPT => {}
            _ => return Err(invalid("body length")),
        }
        self.body.clear();
        self.body.reserve(len);
        dec.decompress_to_buffer(payload, &mut self.body).map_err(|e| TierRunError::Zstd(e.to_string()))?;
        if self.body.len() != len {
            return Err(invalid("body length"));
        }
        Ok(())
    }

    fn trim(&mut self) {
        if self.body.capacity() > SCRATCH_KEPT {
            self.body = Vec::new();
        }
        if self.counts.capacity() * 8 > SCRATCH_KEPT {
            self.counts = Vec::new();
        }
        if self.words.capacity() * 8 > SCRATCH_KEPT {
            self.words = Vec::new();
        }
    }
}

/// Reads an unsigned varint off the front of `src` (one byte without a call).
#[inline(always)]
fn read_u64(src: &mut &[u8]) -> Result<u64, TierRunError> {
    if let Some((&b, rest)) = src.split_first() {
        if b < 0x80 {
            *src = rest;
            return Ok(u64::from(b));
        }
    }
    let (v, rest) = varint::read(src)?;
    *src = rest;
    Ok(v)
}

/// [`read_wide`], in 64-bit arithmetic for the varints of at most 9 bytes.
#[inline(always)]
fn read_wide_fast(src: &mut &[u8]) -> Result<i128, TierRunError> {
    let mut u = 0u64;
    for (i, &b) in src.iter().enumerate().take(9) {
        u |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *src = src.get(i + 1..).unwrap_or_default();
            return Ok(i128::from(u >> 1) ^ -i128::from(u & 1));
        }
    }
    read_wide(src)
}

/// The line's constants for one sample count (see [`line_moments`]), in 64 bits when they fit.
#[derive(Clone, Copy)]
struct Line {
    n: u64,
    /// `k = n - 1`, `Σ i` and `Σ i²` over `i = 0..=k` (saturating).
    k: i128,
    k1: i128,
    k2: i128,
    /// `Q / k²` (`Q = k n (2k + 1) / 6`, `k = n - 1 >= 1`) as a fraction in lowest terms, when
    /// `Q` and `k²` fit: the same quotient, with smaller products.
    narrow: Option<(i64, Divisor)>,
}

impl Line {
    fn new(n: u64) -> Self {
        let narrow = || -> Option<(i64, Divisor)> {
            let n = i64::try_from(n).ok()?;
            let k = n - 1;
            if k < 1 {
                return None;
            }
            let (squares, kk) = (k.checked_mul(n)?.checked_mul(2 * k + 1)? / 6, k.checked_mul(k)?);
            let g = gcd(squares, kk);
            Some((squares / g, Divisor::new(kk / g)))
        };
        let k = i128::from(n) - 1;
        let k1 = quotient(k.saturating_mul(k + 1), 2);
        let k2 = quotient(k.saturating_mul(k + 1).saturating_mul(2 * k + 1), 6);
        Self { n, k, k1, k2, narrow: narrow() }
    }

    /// Version 2's model of `Σ (t - t_first)²` (`x_sq_ms`) given the span of the times and
    /// `sum_t = Σ (t - t_first)`: with the step `h = span / k` rounded, the times are
    /// `t_first + i h + e_i` and `x_sq_ms = h² Σ i² + 2h Σ i e_i + Σ e_i²`. The rest above
    /// `base = h² Σ i²` is stored as its quotient by `den = 2h` (`Σ i e_i`: stored against
    /// `high = (k + 1) Σ e_i / 2`, which it is when the times are off by the same amount) and its
    /// remainder (`Σ e_i²`, small). Saturating arithmetic, the same on both sides.
    fn squares(&self, span: i128, sum_t: i128) -> Squares {
        let k = self.k;
        if k < 1 {
            return Squares { base: 0, den: 1, high: 0 };
        }
        let h = div_floor(span.saturating_mul(2).saturating_add(k), k.saturating_mul(2));
        let base = mul_sat(mul_sat(h, h), self.k2);
        let den = if h >= 1 { h.saturating_mul(2) } else { 1 };
        let sum_e = sum_t.saturating_sub(mul_sat(h, self.k1));
        Squares { base, den, high: quotient(mul_sat(sum_e, k + 1), 2) }
    }

    /// Version 2's prediction of a decimal point's co-moment, given the residual `r1` of its
    /// `s1` from the line. With the values `m_i - m_first = i rise / k + d_i` and the times
    /// `t_i - t_first = i span / k + e_i`, `s1 = Σ i rise / k + Σ d_i` and the co-moment is
    /// `Σ (i span / k)(i rise / k) + (span / k) Σ i d_i + Σ e_i (m_i - m_first)`; `Σ i d_i` is
    /// about `k Σ d_i / 2 = k r1 / 2` (a random walk's deviations from the line between its
    /// ends are symmetric), so the co-moment is predicted as its line value plus `span r1 / 2`.
    fn sxy(&self, rise: i128, span: i128, r1: i128) -> i128 {
        self.moments(span, rise).wrapping_add(quotient(mul_sat(span, r1), 2))
    }

    /// Version 2's prediction of a decimal point's `s2`, given `r1` and the co-moment's residual
    /// `rxy` from [`Line::sxy`]: `s2 = Σ (i rise / k)² + (2 rise / k) Σ i d_i + Σ d_i²`, whose
    /// middle term is about `rise r1` plus `2 rise / span` times what `rxy` is made of.
    fn s2(&self, rise: i128, span: i128, r1: i128, rxy: i128) -> i128 {
        let skew = if span > 0 { quotient(mul_sat(mul_sat(rise, 2), rxy), span) } else { 0 };
        self.moments(rise, rise).wrapping_add(mul_sat(rise, r1)).wrapping_add(skew)
    }

    /// [`line_moments`] for this count.
    #[inline(always)]
    fn moments(&self, a: i128, b: i128) -> i128 {
        if let (Some((squares, kk)), Ok(a), Ok(b)) = (self.narrow, i64::try_from(a), i64::try_from(b)) {
            if let Some(ab) = a.checked_mul(b) {
                // `a b Q / k²` is below 2^126 here, so the saturating arithmetic does not
                // saturate: the quotient of the same fraction in lowest terms.
                return match ab.checked_mul(squares) {
                    Some(v) => i128::from(kk.quotient(v)),
                    None => i128::from(ab) * i128::from(squares) / i128::from(kk.d),
                };
            }
        }
        line_moments(i128::from(self.n), a, b)
    }
}

/// [`Line::squares`]: what `x_sq_ms` is stored against.
struct Squares {
    base: i128,
    den: i128,
    high: i128,
}

/// `a * b`, saturating; one multiplication when both fit 64 bits.
#[inline(always)]
fn mul_sat(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) => i128::from(a) * i128::from(b),
        _ => a.saturating_mul(b),
    }
}

/// `a / b` rounded down (`b > 0`), in 64 bits when both fit.
#[inline(always)]
fn div_floor(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b > 0 => i128::from(a.div_euclid(b)),
        _ => a.div_euclid(b.max(1)),
    }
}

/// Lines kept while a run decodes, by count modulo this.
const LINES: usize = 8;

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// Division by a positive `d` fixed for many numerators: through its reciprocal, then
/// corrected to the quotient `/` gives (towards zero).
#[derive(Clone, Copy)]
struct Divisor {
    d: i64,
    inverse: f64,
}

impl Divisor {
    fn new(d: i64) -> Self {
        let d = d.max(1);
        Self { d, inverse: 1.0 / d as f64 }
    }

    #[inline(always)]
    fn quotient(self, v: i64) -> i64 {
        // Off by a few units at most (below 2^63, the float's error is below 2^11 over `d`).
        let mut q = (v as f64 * self.inverse) as i64;
        let Some(mut r) = q.checked_mul(self.d).and_then(|qd| v.checked_sub(qd)) else { return v / self.d };
        for _ in 0..4 {
            if (v >= 0 && r < 0) || (v < 0 && r > 0) {
                q -= v.signum();
                r += v.signum() * self.d;
            } else if r.unsigned_abs() >= self.d.unsigned_abs() {
                q += v.signum();
                r -= v.signum() * self.d;
            } else {
                return q;
            }
        }
        v / self.d
    }
}

/// `n * v / 2` as [`line_spread`] and [`line_s1`] compute it (`n >= 2` for the latter).
#[inline(always)]
fn half_product(n: u64, v: i128) -> i128 {
    if let (Ok(n), Ok(v)) = (i64::try_from(n), i64::try_from(v)) {
        if let Some(p) = n.checked_mul(v) {
            return i128::from(p / 2);
        }
    }
    quotient(i128::from(n).saturating_mul(v), 2)
}

/// The words of float field `field`: the next one of its chain.
#[inline(always)]
fn next_word(words: &[u64], at: &mut [usize; FLOAT_FIELDS], field: usize) -> Result<f64, TierRunError> {
    let i = at.get_mut(field).ok_or_else(|| invalid("float field"))?;
    let w = words.get(*i).ok_or_else(|| invalid("float column size"))?;
    *i += 1;
    Ok(f64::from_bits(*w))
}

/// A time field stored as its difference from the point before's: the new value of `prev`.
#[inline(always)]
fn next_relative(col: &mut &[u8], prev: &mut i128) -> Result<i128, TierRunError> {
    *prev = prev.wrapping_add(read_wide_fast(col)?);
    Ok(*prev)
}

/// A sample time stored offset `back` from `end`.
#[inline(always)]
fn back_from(end: i64, back: i128) -> Result<i64, TierRunError> {
    i128::from(end).checked_sub(back).and_then(|t| i64::try_from(t).ok()).ok_or_else(|| invalid("time offset"))
}

/// The body of a version 1 run into `out`: the byte columns one point after another, the float
/// words first transposed and un-XORed whole.
fn read_body(
    body: &[u8],
    h: &Header<'_>,
    (counts, words): (&mut Vec<u64>, &mut Vec<u64>),
    out: &mut Vec<(i64, FloatPoint)>,
    what: Decoded,
) -> Result<(), TierRunError> {
    let n = h.n;
    let (mut steps, rest) = column(body)?;
    let (counts_col, rest) = column(rest)?;
    let (flags, rest) = column(rest)?;
    let v2 = h.version >= 2;
    // Version 1 keeps the explicit times before the time squares' low part (which it has
    // not), the tallies, mantissas and moments each in one column.
    let mut times: [&[u8]; TIME_COLUMNS] = [&[]; TIME_COLUMNS];
    let mut rest = rest;
    let time_order: &[usize] = if v2 {
        &[T_FIRST, T_LAST, T_BEFORE_LAST, T_SPREAD, T_SQUARES, T_SQUARES_LOW, T_EXPLICIT]
    } else {
        &[T_FIRST, T_LAST, T_BEFORE_LAST, T_SPREAD, T_SQUARES, T_EXPLICIT]
    };
    for &slot in time_order {
        let (col, after) = column(rest)?;
        if let Some(t) = times.get_mut(slot) {
            *t = col;
        }
        rest = after;
    }
    let [mut t_first, mut t_last, mut t_before_last, mut t_spread, mut t_squares, mut t_explicit, mut t_squares_low] =
        times;
    let mut tallies: [&[u8]; 2] = [&[]; 2];
    let mut mantissas: [&[u8]; 5] = [&[]; 5];
    let mut moments: [&[u8]; 3] = [&[]; 3];
    rest = columns_into(&mut tallies, rest, v2)?;
    let (mut scales, after) = column(rest)?;
    rest = columns_into(&mut mantissas, after, v2)?;
    rest = columns_into(&mut moments, rest, v2)?;
    let planes = rest;
    // Which column each mantissa role, moment and tally reads.
    let role = |i: usize| if v2 { i } else { 0 };
    if flags.len() != n || planes.len() % 8 != 0 {
        return Err(invalid("column sizes"));
    }
    counts.clear();
    counts.reserve(n);
    let mut col = counts_col;
    for _ in 0..n {
        counts.push(read_u64(&mut col)?);
    }
    if !col.is_empty() {
        return Err(invalid("bytes after the last point"));
    }
    // Words per field, from the counts and flags alone.
    let mut per_field = [0usize; FLOAT_FIELDS];
    for (&count, &f) in counts.iter().zip(flags) {
        if count == 0 {
            continue;
        }
        if f & DECIMAL == 0 {
            let explicit = |shift: u8| usize::from((f >> shift) & 3 == EXPLICIT);
            per_field[F_FIRST] += 1;
            per_field[F_LAST] += usize::from(count >= 2);
            per_field[F_BEFORE_LAST] += usize::from(count >= 3);
            per_field[F_MIN] += explicit(MIN_SHIFT);
            per_field[F_MAX] += explicit(MAX_SHIFT);
            per_field[F_SUM] += 1;
            per_field[F_SUM_C] += 1;
            per_field[F_M2] += 1;
            per_field[F_SXY] += 1;
        }
        per_field[F_RESET_SUM] += usize::from(f & HAS_RESETS != 0);
    }
    let w = planes.len() / 8;
    if per_field.iter().sum::<usize>() != w {
        return Err(invalid("float column size"));
    }
    words.clear();
    words.resize(w, 0);
    if w > 0 {
        for plane in planes.chunks_exact(w) {
            for (word, &b) in words.iter_mut().zip(plane) {
                *word = (*word << 8) | u64::from(b);
            }
        }
    }
    let mut at = [0usize; FLOAT_FIELDS];
    let mut start = 0;
    for (a, len) in at.iter_mut().zip(per_field) {
        *a = start;
        let mut prev = 0u64;
        for word in words.get_mut(start..start + len).unwrap_or_default() {
            prev ^= *word;
            *word = prev;
        }
        start += len;
    }
    let words = words.as_slice();

    out.reserve(n);
    let mut index = h.first_index;
    let mut prev_times = [0i128; 3];
    let mut prev_mantissa = 0i64;
    let mut lines = [Line::new(0); LINES];
    for (i, (&count, &flags)) in counts.iter().zip(flags).enumerate() {
        if i > 0 {
            let step = i64::try_from(read_u64(&mut steps)?).ok().filter(|&s| s > 0);
            let step = step.ok_or_else(|| invalid("interval step"))?;
            index = index.checked_add(step).ok_or_else(|| invalid("interval index"))?;
        }
        let end = index.checked_mul(h.interval).filter(|&e| e > 0).ok_or_else(|| invalid("interval end"))?;
        if count == 0 {
            if flags != ENDS_STALE {
                return Err(invalid("flags of an empty point"));
            }
            out.push((end, FloatPoint::stale_only()));
            continue;
        }
        // Counts differ by a sample or two from point to point where samples fall on
        // interval boundaries.
        let line = match lines.get_mut(count as usize % LINES) {
            Some(l) if l.n == count => *l,
            Some(l) => {
                *l = Line::new(count);
                *l
            }
            None => Line::new(count),
        };
        let (min_ref, max_ref) = ((flags >> MIN_SHIFT) & 3, (flags >> MAX_SHIFT) & 3);
        let [prev_first, prev_last, prev_before_last] = &mut prev_times;
        let first_ts = back_from(end, next_relative(&mut t_first, prev_first)?)?;
        let last_ts = if count >= 2 { back_from(end, next_relative(&mut t_last, prev_last)?)? } else { first_ts };
        let before_last_ts =
            if count >= 3 { back_from(end, next_relative(&mut t_before_last, prev_before_last)?)? } else { first_ts };
        let mut explicit_ts = || -> Result<i64, TierRunError> {
            let back = read_u64(&mut t_explicit)?;
            i64::try_from(back).ok().and_then(|b| end.checked_sub(b)).ok_or_else(|| invalid("time offset"))
        };
        let min_ts = if min_ref == EXPLICIT { explicit_ts()? } else { 0 };
        let max_ts = if max_ref == EXPLICIT { explicit_ts()? } else { 0 };
        let offsets = i128::from(end) * 2 - i128::from(first_ts) - i128::from(last_ts);
        let span = i128::from(last_ts) - i128::from(first_ts);
        let (x_sum_ms, x_sq_ms) = if what.moments {
            let spread = read_wide_fast(&mut t_spread)?.wrapping_add(half_product(count, offsets));
            let x_sq_ms = if v2 {
                let off_first = i128::from(end) - i128::from(first_ts);
                let m = line.squares(span, mul_sat(off_first, i128::from(count)).wrapping_sub(spread));
                let high = read_wide_fast(&mut t_squares)?.wrapping_add(m.high);
                let low = read_wide_fast(&mut t_squares_low)?;
                let low = (low << 1) ^ (low >> 127);
                high.wrapping_mul(m.den).wrapping_add(low).wrapping_add(m.base)
            } else {
                read_wide_fast(&mut t_squares)?.wrapping_add(line.moments(span, span))
            };
            let x_sum_ms =
                (i128::from(end) * i128::from(count)).checked_sub(spread).ok_or_else(|| invalid("timestamp sum"))?;
            (x_sum_ms, x_sq_ms)
        } else {
            (0, 0)
        };
        let resets = read_u64(tallies.get_mut(0).ok_or_else(truncated)?)?;
        let changes = read_u64(tallies.get_mut(role(1)).ok_or_else(truncated)?)?;
        if (flags & HAS_RESETS != 0) != (resets > 0) {
            return Err(invalid("reset flag"));
        }
        let reset_sum = if resets > 0 { next_word(words, &mut at, F_RESET_SUM)? } else { -0.0 };
        // The stored values: first, last, second-to-last, explicit minimum and maximum.
        let mut values = [0.0f64; 5];
        let mut stored = 0;
        let mut exact = None;
        // The exact first moment when only the sums are wanted: `(scale, s1)`.
        let mut sum_only: Option<(u8, i128)> = None;
        let mut first_m = 0i64;
        let (mut sum, mut sum_c, mut m2, mut sxy) = (0.0, 0.0, 0.0, 0.0);
        let wanted = [true, count >= 2, count >= 3, min_ref == EXPLICIT, max_ref == EXPLICIT];
        if flags & DECIMAL != 0 {
            let (&scale, rest) = scales.split_first().ok_or_else(truncated)?;
            scales = rest;
            let p10 = decimal::pow10(scale).ok_or_else(|| invalid("decimal scale"))?;
            let mut base = prev_mantissa;
            let mut ms = [0i64; 5];
            for (field, &want) in wanted.iter().enumerate() {
                if !want {
                    continue;
                }
                let col = mantissas.get_mut(role(field)).ok_or_else(truncated)?;
                let m = i128::from(base)
                    .checked_add(read_wide_fast(col)?)
                    .and_then(|m| i64::try_from(m).ok())
                    .ok_or_else(|| invalid("mantissa"))?;
                if let (Some(v), Some(slot)) = (values.get_mut(field), ms.get_mut(stored)) {
                    // Dividing by 1 changes nothing.
                    *v = if scale == 0 { m as f64 } else { m as f64 / p10 };
                    *slot = m;
                }
                if stored == 0 || stored == 1 {
                    base = m;
                }
                if stored == 1 || (stored == 0 && count == 1) {
                    prev_mantissa = m;
                }
                stored += 1;
            }
            first_m = ms[0];
            let rise = if count >= 2 { i128::from(ms[1]) - i128::from(ms[0]) } else { 0 };
            let [c1, c2, c3] = &mut moments;
            if !what.moments {
                if what.sums {
                    let r1 = read_wide_fast(c1)?;
                    sum_only = Some((scale, r1.wrapping_add(if count >= 2 { half_product(count, rise) } else { 0 })));
                }
                // Neither moment column is read (see the check after the loop).
            } else {
                let r1 = read_wide_fast(c1)?;
                let s1 = r1.wrapping_add(if count >= 2 { half_product(count, rise) } else { 0 });
                let (s2, sxy) = if v2 {
                    let rxy = read_wide_fast(c3)?;
                    let s2 = read_wide_fast(c2)?.wrapping_add(line.s2(rise, span, r1, rxy));
                    (s2, rxy.wrapping_add(line.sxy(rise, span, r1)))
                } else {
                    let s2 = read_wide_fast(c1)?.wrapping_add(line.moments(rise, rise));
                    (s2, read_wide_fast(c1)?.wrapping_add(line.moments(span, rise)))
                };
                exact = Some(Exact { scale, s1, s2, sxy });
            }
        } else {
            const FIELDS: [usize; 5] = [F_FIRST, F_LAST, F_BEFORE_LAST, F_MIN, F_MAX];
            for ((v, &want), field) in values.iter_mut().zip(&wanted).zip(FIELDS) {
                if want {
                    *v = next_word(words, &mut at, field)?;
                }
            }
            // Each field is a chain of its own: one not wanted is not read.
            if what.sums {
                sum = next_word(words, &mut at, F_SUM)?;
                sum_c = next_word(words, &mut at, F_SUM_C)?;
            }
            if what.moments {
                m2 = next_word(words, &mut at, F_M2)?;
                sxy = next_word(words, &mut at, F_SXY)?;
            }
        }
        let [first_v, last_v, before_last_v, min_v, max_v] = values;
        let first = Sample::new(first_ts, first_v);
        let last = if count >= 2 { Sample::new(last_ts, last_v) } else { first };
        let before_last = match count {
            0 | 1 => None,
            2 => Some(first),
            _ => Some(Sample::new(before_last_ts, before_last_v)),
        };
        let pick = |at: u8, ts: i64, v: f64| -> Result<(i64, f64), TierRunError> {
            let s = match at {
                AT_FIRST => first,
                AT_LAST => last,
                AT_BEFORE_LAST => before_last.ok_or_else(|| invalid("extreme reference"))?,
                _ => return Ok((ts, v)),
            };
            Ok((s.timestamp_ms, s.value))
        };
        let (min_ts, min) = pick(min_ref, min_ts, min_v)?;
        let (max_ts, max) = pick(max_ref, max_ts, max_v)?;
        let p = FloatPoint {
            count,
            first,
            last,
            before_last,
            ends_stale: flags & ENDS_STALE != 0,
            sum,
            sum_c,
            min,
            min_ts,
            max,
            max_ts,
            m2,
            x_sum_ms,
            x_sq_ms,
            sxy,
            constant: flags & CONSTANT != 0,
            resets,
            reset_sum,
            changes,
            exact,
        };
        // Completed where it is stored (a point is about 250 bytes).
        out.push((end, p));
        let p = out.last_mut().map(|(_, p)| p).ok_or_else(truncated)?;
        let done = match exact {
            None => match sum_only {
                None => Some(()),
                Some((scale, s1)) => p.first_mantissa(first_m, scale).and_then(|m0| p.set_exact_sum(m0, s1, scale)),
            },
            Some(e) => p.first_mantissa(first_m, e.scale).and_then(|m0| p.set_from_exact_about(m0)),
        };
        done.ok_or_else(|| invalid("exact moments"))?;
    }
    let rest = [steps, scales, t_first, t_last, t_before_last, t_explicit];
    // Columns of fields not decoded are left unread.
    let [m1, m2_col, m3] = moments;
    let time_moments = [t_spread, t_squares, t_squares_low];
    let moment_cols = [(m1, what.sums || what.moments), (m2_col, what.moments), (m3, what.moments)];
    let read_moments = moment_cols.iter().filter(|(_, read)| *read).map(|(c, _)| c);
    let read_times = time_moments.iter().filter(|_| what.moments);
    let all = rest.iter().chain(&tallies).chain(&mantissas).chain(read_moments).chain(read_times);
    if !all.into_iter().all(|c| c.is_empty()) {
        return Err(invalid("bytes after the last point"));
    }
    Ok(())
}

/// The columns of a run's body while it is written.
#[derive(Default)]
struct Columns {
    /// The format version written (1 only in tests).
    version: u8,
    /// Interval steps between points (varints, from the second point on).
    steps: Vec<u8>,
    /// Per point: sample count (varint).
    counts: Vec<u8>,
    /// Per point: flags byte.
    flags: Vec<u8>,
    /// Times, one column per field: the five of `prev_times` (wide varints of differences),
    /// then the explicit extremes' offsets back from the end (varints), then (version 2) the
    /// low part of the time squares.
    times: [Vec<u8>; TIME_COLUMNS],
    /// Resets and changes (varints): both in the first column in version 1.
    tallies: [Vec<u8>; 2],
    /// Per decimal point: its scale (one byte).
    scales: Vec<u8>,
    /// Per decimal point: mantissas of its stored samples, each as a zigzag varint of its
    /// difference from another (see [`Columns::put_point`]); version 2 keeps one column per
    /// role (first, last, second-to-last, minimum, maximum), version 1 one for all.
    mantissas: [Vec<u8>; 5],
    /// Per decimal point: its exact moments (zigzag varints of up to 128 bits), one column
    /// each in version 2, one for the three in version 1.
    moments: [Vec<u8>; 3],
    /// Mantissa of the last sample of the decimal point before.
    prev_mantissa: i64,
    /// The point before's offsets of its first, last and second-to-last samples, its
    /// timestamp spread and its `x_sq_ms`: each stored as the difference from these; in
    /// version 2 the last slot holds the low part of the time squares instead.
    prev_times: [i128; TIME_COLUMNS],
    /// Float fields, each XORed with the same field of the point before: one chain per field.
    floats: [Vec<u64>; FLOAT_FIELDS],
    prev: [u64; FLOAT_FIELDS],
}

/// Appends `v` zigzag-encoded as an unsigned LEB128 varint of up to 19 bytes.
fn put_wide(dst: &mut Vec<u8>, v: i128) {
    let mut u = ((v << 1) ^ (v >> 127)) as u128;
    while u >= 0x80 {
        dst.push((u as u8) | 0x80);
        u >>= 7;
    }
    dst.push(u as u8);
}

/// Reads what [`put_wide`] wrote from the start of `src`.
fn read_wide(src: &mut &[u8]) -> Result<i128, TierRunError> {
    let mut u = 0u128;
    for (i, &b) in src.iter().enumerate().take(19) {
        let shift = 7 * i as u32;
        let group = u128::from(b & 0x7f);
        if shift == 126 && group > 3 {
            return Err(invalid("wide varint out of range"));
        }
        u |= group << shift;
        if b < 0x80 {
            *src = src.get(i + 1..).unwrap_or_default();
            return Ok(((u >> 1) as i128) ^ -((u & 1) as i128));
        }
    }
    Err(TierRunError::Truncated)
}

/// How a decimal point is stored: its scale and the mantissas of its first, last,
/// second-to-last and explicit extreme values (those it stores, in that order).
struct DecimalForm {
    scale: u8,
    mantissas: Vec<i64>,
}

/// The decimal form of `p` with extremes referenced as `min_ref`, `max_ref`, when `p` has
/// exact moments, every stored value is a mantissa at their scale, and the moments rebuild.
fn decimal_form(p: &FloatPoint, (min_ref, max_ref): (u8, u8)) -> Option<DecimalForm> {
    let e = p.exact?;
    p.from_exact()?;
    let mut values = vec![p.first.value];
    if p.count >= 2 {
        values.push(p.last.value);
    }
    if p.count >= 3 {
        values.push(p.before_last?.value);
    }
    if min_ref == EXPLICIT {
        values.push(p.min);
    }
    if max_ref == EXPLICIT {
        values.push(p.max);
    }
    let mantissas = values.into_iter().map(|v| decimal::mantissa(v, e.scale)).collect::<Option<Vec<i64>>>()?;
    Some(DecimalForm { scale: e.scale, mantissas })
}

/// The float fields, in column order.
const FLOAT_FIELDS: usize = 10;
const F_FIRST: usize = 0;
const F_LAST: usize = 1;
const F_BEFORE_LAST: usize = 2;
const F_MIN: usize = 3;
const F_MAX: usize = 4;
const F_SUM: usize = 5;
const F_SUM_C: usize = 6;
const F_M2: usize = 7;
const F_SXY: usize = 8;
const F_RESET_SUM: usize = 9;

/// Time fields stored relative to the point before's (slots of `prev_times`).
const T_FIRST: usize = 0;
const T_LAST: usize = 1;
const T_BEFORE_LAST: usize = 2;
const T_SPREAD: usize = 3;
const T_SQUARES: usize = 4;
/// The column of explicit extremes' times.
const T_EXPLICIT: usize = 5;
/// Version 2: the low part of the time squares.
const T_SQUARES_LOW: usize = 6;
const TIME_COLUMNS: usize = 7;

/// Which of the point's first, last and second-to-last samples is the extreme at `ts` with
/// value `v`, if one is (same time, same bits).
fn reference(p: &FloatPoint, ts: i64, v: f64) -> u8 {
    let is = |s: Sample| s.timestamp_ms == ts && s.value.to_bits() == v.to_bits();
    if is(p.first) {
        AT_FIRST
    } else if is(p.last) {
        AT_LAST
    } else if p.before_last.is_some_and(is) {
        AT_BEFORE_LAST
    } else {
        EXPLICIT
    }
}

impl Columns {
    fn float(&mut self, field: usize, v: f64) {
        let (Some(col), Some(prev)) = (self.floats.get_mut(field), self.prev.get_mut(field)) else { return };
        col.push(v.to_bits() ^ *prev);
        *prev = v.to_bits();
    }

    /// Stores `v` of time field `slot` as its difference from `guess`.
    fn residual(&mut self, slot: usize, v: i128, guess: i128) {
        if let Some(col) = self.times.get_mut(slot) {
            put_wide(col, v.wrapping_sub(guess));
        }
    }

    /// Stores `v` of time field `slot` as its difference from the point before's.
    fn relative(&mut self, slot: usize, v: i128) {
        let Some(prev) = self.prev_times.get_mut(slot) else { return };
        let Some(col) = self.times.get_mut(slot) else { return };
        put_wide(col, v.wrapping_sub(*prev));
        *prev = v;
    }

    fn offset(&mut self, end: i64, ts: i64) {
        if let Some(col) = self.times.get_mut(T_EXPLICIT) {
            varint::put(col, end.abs_diff(ts));
        }
    }

    fn put_point(&mut self, end: i64, p: &FloatPoint) {
        let v2 = self.version >= 2;
        varint::put(&mut self.counts, p.count);
        if p.count == 0 {
            self.flags.push(ENDS_STALE);
            return;
        }
        let refs = (reference(p, p.min_ts, p.min), reference(p, p.max_ts, p.max));
        let decimal = decimal_form(p, refs);
        let mut flags = (refs.0 << MIN_SHIFT) | (refs.1 << MAX_SHIFT);
        flags |= if p.ends_stale { ENDS_STALE } else { 0 };
        flags |= if p.constant { CONSTANT } else { 0 };
        flags |= if p.resets > 0 { HAS_RESETS } else { 0 };
        flags |= if decimal.is_some() { DECIMAL } else { 0 };
        self.flags.push(flags);
        self.relative(T_FIRST, i128::from(end) - i128::from(p.first.timestamp_ms));
        if p.count >= 2 {
            self.relative(T_LAST, i128::from(end) - i128::from(p.last.timestamp_ms));
        }
        if let (Some(b), true) = (p.before_last, p.count >= 3) {
            self.relative(T_BEFORE_LAST, i128::from(end) - i128::from(b.timestamp_ms));
        }
        if refs.0 == EXPLICIT {
            self.offset(end, p.min_ts);
        }
        if refs.1 == EXPLICIT {
            self.offset(end, p.max_ts);
        }
        // `count * end - Σ ts`: the same number at every point of a regular scrape.
        let n = i128::from(p.count);
        let line = Line::new(p.count);
        let off_first = i128::from(end) - i128::from(p.first.timestamp_ms);
        let offsets = off_first + i128::from(end - p.last.timestamp_ms);
        let span = i128::from(p.last.timestamp_ms) - i128::from(p.first.timestamp_ms);
        let spread = i128::from(end) * n - p.x_sum_ms;
        self.residual(T_SPREAD, spread, line_spread(n, offsets));
        if v2 {
            let m = line.squares(span, mul_sat(off_first, n).wrapping_sub(spread));
            let rest = p.x_sq_ms.wrapping_sub(m.base);
            let (high, low) = (rest.div_euclid(m.den), rest.rem_euclid(m.den));
            self.residual(T_SQUARES, high, m.high);
            // `low >= 0` as an unsigned varint: the number whose zigzag form it is.
            self.residual(T_SQUARES_LOW, (low >> 1) ^ -(low & 1), 0);
        } else {
            self.residual(T_SQUARES, p.x_sq_ms, line_moments(n, span, span));
        }
        let [resets, changes] = &mut self.tallies;
        varint::put(resets, p.resets);
        varint::put(if v2 { changes } else { resets }, p.changes);
        if p.resets > 0 {
            self.float(F_RESET_SUM, p.reset_sum);
        }
        match (decimal, p.exact) {
            (Some(form), Some(e)) => {
                self.scales.push(form.scale);
                // First from the previous point's last; then last from first, and the others
                // from last.
                let mut base = self.prev_mantissa;
                for (i, &m) in form.mantissas.iter().enumerate() {
                    let stored = stored_samples(p.count);
                    let role = match i {
                        _ if !v2 => 0,
                        i if i < stored => i,
                        // The explicit extremes, after the samples the point stores.
                        i if i == stored && refs.0 == EXPLICIT => 3,
                        _ => 4,
                    };
                    if let Some(col) = self.mantissas.get_mut(role) {
                        put_wide(col, i128::from(m) - i128::from(base));
                    }
                    if i == 0 {
                        base = m;
                    } else if i == 1 {
                        self.prev_mantissa = m;
                        base = m;
                    }
                }
                if p.count == 1 {
                    self.prev_mantissa = base;
                }
                let rise = match form.mantissas.as_slice() {
                    [first, last, ..] if p.count >= 2 => i128::from(*last) - i128::from(*first),
                    _ => 0,
                };
                let s1_line = line_s1(n, rise);
                let predicted = if v2 {
                    let r1 = e.s1.wrapping_sub(s1_line);
                    let sxy = line.sxy(rise, span, r1);
                    [s1_line, line.s2(rise, span, r1, e.sxy.wrapping_sub(sxy)), sxy]
                } else {
                    [s1_line, line_moments(n, rise, rise), line_moments(n, span, rise)]
                };
                for (i, (v, guess)) in [e.s1, e.s2, e.sxy].into_iter().zip(predicted).enumerate() {
                    if let Some(col) = self.moments.get_mut(if v2 { i } else { 0 }) {
                        put_wide(col, v.wrapping_sub(guess));
                    }
                }
            }
            _ => {
                self.float(F_FIRST, p.first.value);
                if p.count >= 2 {
                    self.float(F_LAST, p.last.value);
                }
                if let (Some(b), true) = (p.before_last, p.count >= 3) {
                    self.float(F_BEFORE_LAST, b.value);
                }
                if refs.0 == EXPLICIT {
                    self.float(F_MIN, p.min);
                }
                if refs.1 == EXPLICIT {
                    self.float(F_MAX, p.max);
                }
                self.float(F_SUM, p.sum);
                self.float(F_SUM_C, p.sum_c);
                self.float(F_M2, p.m2);
                self.float(F_SXY, p.sxy);
            }
        }
    }

    /// The body: the byte columns, each after its length, then the float chains as byte
    /// planes (the highest byte of every word first).
    fn body(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let [t0, t1, t2, t3, t4, t5, t6] = &self.times;
        let [resets, changes] = &self.tallies;
        let [m0, m1, m2, m3, m4] = &self.mantissas;
        let [s1, s2, sxy] = &self.moments;
        let v1 = [&self.steps, &self.counts, &self.flags, t0, t1, t2, t3, t4, t5, resets, &self.scales, m0, s1];
        let v2 = [
            &self.steps,
            &self.counts,
            &self.flags,
            t0,
            t1,
            t2,
            t3,
            t4,
            t6,
            t5,
            resets,
            changes,
            &self.scales,
            m0,
            m1,
            m2,
            m3,
            m4,
            s1,
            s2,
            sxy,
        ];
        let cols: &[&Vec<u8>] = if self.version >= 2 { &v2 } else { &v1 };
        for col in cols {
            varint::put(&mut body, col.len() as u64);
            body.extend_from_slice(col);
        }
        let words: Vec<u64> = self.floats.iter().flatten().copied().collect();
        for plane in (0..8).rev() {
            body.extend(words.iter().map(|w| (w >> (plane * 8)) as u8));
        }
        body
    }
}

/// How many of a point's first, last and second-to-last samples it stores.
fn stored_samples(count: u64) -> usize {
    count.min(3) as usize
}

/// Splits length-prefixed columns off `rest` into `cols` (version 2), or one into `cols[0]`
/// (version 1, where one column holds what version 2 splits): the bytes after them.
fn columns_into<'a>(cols: &mut [&'a [u8]], mut rest: &'a [u8], v2: bool) -> Result<&'a [u8], TierRunError> {
    for c in cols.iter_mut().take(if v2 { usize::MAX } else { 1 }) {
        (*c, rest) = column(rest)?;
    }
    Ok(rest)
}

/// Splits a length-prefixed column off `src`.
fn column(src: &[u8]) -> Result<(&[u8], &[u8]), TierRunError> {
    let (len, rest) = varint::read(src)?;
    let len = usize::try_from(len).map_err(|_| TierRunError::Truncated)?;
    if rest.len() < len {
        return Err(TierRunError::Truncated);
    }
    Ok(rest.split_at(len))
}

/// The predictions that moments are stored against: what they would be if a point's `n`
/// samples lay evenly spaced on the straight line from its first sample to its last (a
/// counter at a steady rate, scraped on time). Counters and regular scrapes then leave small
/// residuals; anything else costs no more than the moments themselves would. Integer
/// arithmetic, saturating, the same on both sides of the codec.
///
/// `Σ (i·a/k)(i·b/k)` over `i = 0..=k`, `k = n - 1`: the second moments (`x_sq_ms` with
/// `a = b = span`, `s2` with `a = b = rise`, `sxy` with `a = span`, `b = rise`).
fn line_moments(n: i128, a: i128, b: i128) -> i128 {
    let k = n - 1;
    if k < 1 {
        return 0;
    }
    // In 64 bits when nothing overflows there (the common case, and the same result).
    let narrow = || -> Option<i64> {
        let (k, n, a, b) =
            (i64::try_from(k).ok()?, i64::try_from(n).ok()?, i64::try_from(a).ok()?, i64::try_from(b).ok()?);
        let squares = k.checked_mul(n)?.checked_mul(2 * k + 1)? / 6;
        Some(a.checked_mul(b)?.checked_mul(squares)? / k.checked_mul(k)?)
    };
    if let Some(v) = narrow() {
        return i128::from(v);
    }
    let squares = quotient(k.saturating_mul(n).saturating_mul(2 * k + 1), 6);
    quotient(a.saturating_mul(b).saturating_mul(squares), k.saturating_mul(k))
}

/// `a / b` rounded towards zero (`b > 0`), in 64 bits when both fit: a 128-bit division
/// costs several times more, and decoding does a few per point.
fn quotient(a: i128, b: i128) -> i128 {
    match (i64::try_from(a), i64::try_from(b)) {
        (Ok(a), Ok(b)) if b > 0 => i128::from(a / b),
        _ => a / b.max(1),
    }
}

/// `Σ i·rise/k` over `i = 0..=k`: `s1` on the line.
fn line_s1(n: i128, rise: i128) -> i128 {
    if n < 2 {
        return 0;
    }
    quotient(rise.saturating_mul(n), 2)
}

/// `n·end - Σ t` on the line, from the first and last samples' offsets back from the end.
fn line_spread(n: i128, offsets: i128) -> i128 {
    quotient(n.saturating_mul(offsets), 2)
}

/// The decoder of format version 1 as it was before the columnar one: what [`decode`] must
/// still agree with.
#[cfg(test)]
mod reference {
    use super::*;

    /// Version 1's time columns.
    const V1_TIME_COLUMNS: usize = 6;

    /// Decodes a run: its interval (ms) and its points with their ends.
    ///
    /// # Errors
    /// [`TierRunError`] for bytes that are not a run this version wrote.
    pub fn decode(src: &[u8]) -> Result<(i64, Vec<(i64, FloatPoint)>), TierRunError> {
        let (&version, rest) = src.split_first().ok_or(TierRunError::Truncated)?;
        if version != 1 {
            return Err(TierRunError::Unsupported(version));
        }
        let (interval, rest) = varint::read(rest)?;
        let (n, rest) = varint::read(rest)?;
        let (first_index, rest) = varint::read(rest)?;
        let (body_len, payload) = varint::read(rest)?;
        let interval = i64::try_from(interval).ok().filter(|&i| i > 0).ok_or(TierRunError::Invalid("interval"))?;
        if n == 0 || n > MAX_POINTS {
            return Err(TierRunError::Invalid("point count"));
        }
        if body_len > n * MAX_POINT_BYTES + 13 * 10 {
            return Err(TierRunError::Invalid("body length"));
        }
        let body = decompress(payload, body_len as usize)?;
        if body.len() as u64 != body_len {
            return Err(TierRunError::Invalid("body length"));
        }
        let mut r = Reader::new(&body, n as usize)?;
        let mut index = i64::try_from(first_index).map_err(|_| TierRunError::Invalid("first interval"))?;
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            if i > 0 {
                let step = r.step()?;
                index = index.checked_add(step).ok_or(TierRunError::Invalid("interval index"))?;
            }
            let end = index.checked_mul(interval).filter(|&e| e > 0).ok_or(TierRunError::Invalid("interval end"))?;
            out.push((end, r.point(end)?));
        }
        if !r.is_exhausted() {
            return Err(TierRunError::Invalid("bytes after the last point"));
        }
        Ok((interval, out))
    }

    thread_local! {
        /// One zstd decompression context per thread: creating one costs more than decoding a
        /// small run.
        static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }

    /// Decompresses a body of `len` bytes with the thread's context.
    fn decompress(payload: &[u8], len: usize) -> Result<Vec<u8>, TierRunError> {
        DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            let dec = match slot.as_mut() {
                Some(d) => d,
                None => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| TierRunError::Zstd(e.to_string()))?),
            };
            dec.decompress(payload, len).map_err(|e| TierRunError::Zstd(e.to_string()))
        })
    }

    /// Reads a body's columns back, point by point.
    struct Reader<'a> {
        steps: &'a [u8],
        counts: &'a [u8],
        flags: &'a [u8],
        times: [&'a [u8]; V1_TIME_COLUMNS],
        tallies: &'a [u8],
        scales: &'a [u8],
        mantissas: &'a [u8],
        moments: &'a [u8],
        prev_mantissa: i64,
        prev_times: [i128; 5],
        /// Byte planes of the float words (highest byte first), `words` bytes each.
        planes: &'a [u8],
        words: usize,
        /// Words read so far, over every field's chain in field order: chain starts are known
        /// only once every point's flags are, so the float words are first sized by a dry pass.
        chain_start: [usize; FLOAT_FIELDS],
        chain_at: [usize; FLOAT_FIELDS],
        prev: [u64; FLOAT_FIELDS],
    }

    impl<'a> Reader<'a> {
        fn new(body: &'a [u8], n: usize) -> Result<Self, TierRunError> {
            let (steps, rest) = column(body)?;
            let (counts, rest) = column(rest)?;
            let (flags, rest) = column(rest)?;
            let mut times: [&[u8]; V1_TIME_COLUMNS] = [&[]; V1_TIME_COLUMNS];
            let mut rest = rest;
            for t in &mut times {
                (*t, rest) = column(rest)?;
            }
            let (tallies, rest) = column(rest)?;
            let (scales, rest) = column(rest)?;
            let (mantissas, rest) = column(rest)?;
            let (moments, planes) = column(rest)?;
            if flags.len() != n || planes.len() % 8 != 0 {
                return Err(TierRunError::Invalid("column sizes"));
            }
            // Words per field, from the counts and flags alone.
            let mut per_field = [0usize; FLOAT_FIELDS];
            let mut counts_left = counts;
            for &f in flags {
                let (count, rest) = varint::read(counts_left)?;
                counts_left = rest;
                for field in fields_of(count, f) {
                    if let Some(c) = per_field.get_mut(field) {
                        *c += 1;
                    }
                }
            }
            let words = planes.len() / 8;
            if per_field.iter().sum::<usize>() != words {
                return Err(TierRunError::Invalid("float column size"));
            }
            let mut chain_start = [0usize; FLOAT_FIELDS];
            let mut at = 0;
            for (start, len) in chain_start.iter_mut().zip(per_field) {
                *start = at;
                at += len;
            }
            Ok(Self {
                steps,
                counts,
                flags,
                times,
                tallies,
                scales,
                mantissas,
                moments,
                prev_mantissa: 0,
                prev_times: [0; 5],
                planes,
                words,
                chain_start,
                chain_at: [0; FLOAT_FIELDS],
                prev: [0; FLOAT_FIELDS],
            })
        }

        fn is_exhausted(&self) -> bool {
            [self.steps, self.counts, self.tallies, self.scales, self.mantissas, self.moments]
                .iter()
                .chain(self.times.iter())
                .all(|c| c.is_empty())
        }

        fn step(&mut self) -> Result<i64, TierRunError> {
            let (v, rest) = varint::read(self.steps)?;
            self.steps = rest;
            i64::try_from(v).ok().filter(|&s| s > 0).ok_or(TierRunError::Invalid("interval step"))
        }

        fn varint(src: &mut &'a [u8]) -> Result<u64, TierRunError> {
            let (v, rest) = varint::read(src)?;
            *src = rest;
            Ok(v)
        }

        /// Time field `slot`, stored as its difference from `guess`.
        fn residual(&mut self, slot: usize, guess: i128) -> Result<i128, TierRunError> {
            let col = self.times.get_mut(slot).ok_or(TierRunError::Invalid("time field"))?;
            Ok(read_wide(col)?.wrapping_add(guess))
        }

        /// Time field `slot`, stored as its difference from the point before's.
        fn relative(&mut self, slot: usize) -> Result<i128, TierRunError> {
            let col = self.times.get_mut(slot).ok_or(TierRunError::Invalid("time field"))?;
            let delta = read_wide(col)?;
            let prev = self.prev_times.get_mut(slot).ok_or(TierRunError::Invalid("time field"))?;
            *prev = prev.wrapping_add(delta);
            Ok(*prev)
        }

        /// A sample time stored as [`Reader::relative`] offset back from `end`.
        fn relative_time(&mut self, slot: usize, end: i64) -> Result<i64, TierRunError> {
            let back = self.relative(slot)?;
            i128::from(end)
                .checked_sub(back)
                .and_then(|t| i64::try_from(t).ok())
                .ok_or(TierRunError::Invalid("time offset"))
        }

        fn time(&mut self, end: i64) -> Result<i64, TierRunError> {
            let col = self.times.get_mut(T_EXPLICIT).ok_or(TierRunError::Invalid("time field"))?;
            let back = Self::varint(col)?;
            i64::try_from(back).ok().and_then(|b| end.checked_sub(b)).ok_or(TierRunError::Invalid("time offset"))
        }

        fn float(&mut self, field: usize) -> Result<f64, TierRunError> {
            let (Some(start), Some(at), Some(prev)) =
                (self.chain_start.get(field), self.chain_at.get_mut(field), self.prev.get_mut(field))
            else {
                return Err(TierRunError::Invalid("float field"));
            };
            let i = start + *at;
            *at += 1;
            let mut word = 0u64;
            for plane in 0..8 {
                let byte = self.planes.get(plane * self.words + i).ok_or(TierRunError::Truncated)?;
                word = (word << 8) | u64::from(*byte);
            }
            *prev ^= word;
            Ok(f64::from_bits(*prev))
        }

        fn point(&mut self, end: i64) -> Result<FloatPoint, TierRunError> {
            let count = Self::varint(&mut self.counts)?;
            let (&flags, rest) = self.flags.split_first().ok_or(TierRunError::Truncated)?;
            self.flags = rest;
            let mut p = FloatPoint::stale_only();
            if count == 0 {
                return if flags == ENDS_STALE { Ok(p) } else { Err(TierRunError::Invalid("flags of an empty point")) };
            }
            let (min_ref, max_ref) = ((flags >> MIN_SHIFT) & 3, (flags >> MAX_SHIFT) & 3);
            p.count = count;
            p.ends_stale = flags & ENDS_STALE != 0;
            p.constant = flags & CONSTANT != 0;
            // Times first (every point stores them alike), values after.
            let first_ts = self.relative_time(T_FIRST, end)?;
            let last_ts = if count >= 2 { self.relative_time(T_LAST, end)? } else { first_ts };
            let before_last_ts = if count >= 3 { Some(self.relative_time(T_BEFORE_LAST, end)?) } else { None };
            let min_ts = if min_ref == EXPLICIT { Some(self.time(end)?) } else { None };
            let max_ts = if max_ref == EXPLICIT { Some(self.time(end)?) } else { None };
            let n = i128::from(count);
            let offsets = i128::from(end) * 2 - i128::from(first_ts) - i128::from(last_ts);
            let span = i128::from(last_ts) - i128::from(first_ts);
            let spread = self.residual(T_SPREAD, line_spread(n, offsets))?;
            p.x_sq_ms = self.residual(T_SQUARES, line_moments(n, span, span))?;
            p.x_sum_ms = i128::from(end)
                .checked_mul(i128::from(count))
                .and_then(|e| e.checked_sub(spread))
                .ok_or(TierRunError::Invalid("timestamp sum"))?;
            p.resets = Self::varint(&mut self.tallies)?;
            p.changes = Self::varint(&mut self.tallies)?;
            if (flags & HAS_RESETS != 0) != (p.resets > 0) {
                return Err(TierRunError::Invalid("reset flag"));
            }
            p.reset_sum = if p.resets > 0 { self.float(F_RESET_SUM)? } else { -0.0 };
            let values = if flags & DECIMAL != 0 {
                self.decimal_values(&mut p, (count, min_ref, max_ref), span)?
            } else {
                let mut v: Values = smallvec::smallvec![self.float(F_FIRST)?];
                if count >= 2 {
                    v.push(self.float(F_LAST)?);
                }
                if count >= 3 {
                    v.push(self.float(F_BEFORE_LAST)?);
                }
                if min_ref == EXPLICIT {
                    v.push(self.float(F_MIN)?);
                }
                if max_ref == EXPLICIT {
                    v.push(self.float(F_MAX)?);
                }
                p.sum = self.float(F_SUM)?;
                p.sum_c = self.float(F_SUM_C)?;
                p.m2 = self.float(F_M2)?;
                p.sxy = self.float(F_SXY)?;
                v
            };
            let mut values = values.into_iter();
            let mut next = || values.next().ok_or(TierRunError::Invalid("values"));
            p.first = Sample::new(first_ts, next()?);
            p.last = p.first;
            if count >= 2 {
                p.last = Sample::new(last_ts, next()?);
                p.before_last = Some(p.first);
            }
            if let Some(ts) = before_last_ts {
                p.before_last = Some(Sample::new(ts, next()?));
            }
            (p.min_ts, p.min) = match min_ts {
                Some(ts) => (ts, next()?),
                None => referenced(&p, min_ref)?,
            };
            (p.max_ts, p.max) = match max_ts {
                Some(ts) => (ts, next()?),
                None => referenced(&p, max_ref)?,
            };
            if flags & DECIMAL != 0 {
                p = p.from_exact().ok_or(TierRunError::Invalid("exact moments"))?;
            }
            Ok(p)
        }

        /// The values of a decimal point (as [`decimal_form`] lists them), its exact moments set
        /// in `p`; `span` is its last sample's time minus its first's.
        fn decimal_values(
            &mut self,
            p: &mut FloatPoint,
            (count, min_ref, max_ref): (u64, u8, u8),
            span: i128,
        ) -> Result<Values, TierRunError> {
            let (&scale, rest) = self.scales.split_first().ok_or(TierRunError::Truncated)?;
            self.scales = rest;
            let stored = 1
                + usize::from(count >= 2)
                + usize::from(count >= 3)
                + usize::from(min_ref == EXPLICIT)
                + usize::from(max_ref == EXPLICIT);
            let mut base = self.prev_mantissa;
            let mut values = Values::new();
            let mut values_m = smallvec::SmallVec::<[i64; 5]>::new();
            for i in 0..stored {
                let m = i128::from(base)
                    .checked_add(read_wide(&mut self.mantissas)?)
                    .and_then(|m| i64::try_from(m).ok())
                    .ok_or(TierRunError::Invalid("mantissa"))?;
                values.push(decimal::value(m, scale).ok_or(TierRunError::Invalid("decimal scale"))?);
                values_m.push(m);
                if i == 0 || i == 1 {
                    base = m;
                }
                if i == 1 || (i == 0 && count == 1) {
                    self.prev_mantissa = m;
                }
            }
            let rise = match values_m.as_slice() {
                [first, last, ..] if count >= 2 => i128::from(*last) - i128::from(*first),
                _ => 0,
            };
            let n = i128::from(count);
            let mut moment = |guess: i128| read_wide(&mut self.moments).map(|r| r.wrapping_add(guess));
            p.exact = Some(Exact {
                scale,
                s1: moment(line_s1(n, rise))?,
                s2: moment(line_moments(n, rise, rise))?,
                sxy: moment(line_moments(n, span, rise))?,
            });
            Ok(values)
        }
    }

    /// The values a point stores (at most five: first, last, second-to-last, minimum, maximum),
    /// kept off the heap while a point is decoded.
    type Values = smallvec::SmallVec<[f64; 5]>;

    /// The time and value of the sample an extreme refers to.
    fn referenced(p: &FloatPoint, at: u8) -> Result<(i64, f64), TierRunError> {
        let s = match at {
            AT_FIRST => p.first,
            AT_LAST => p.last,
            AT_BEFORE_LAST => p.before_last.ok_or(TierRunError::Invalid("extreme reference"))?,
            _ => return Err(TierRunError::Invalid("extreme reference")),
        };
        Ok((s.timestamp_ms, s.value))
    }

    /// The float fields a point of `count` samples with `flags` stores, in the order written.
    fn fields_of(count: u64, flags: u8) -> impl Iterator<Item = usize> {
        let (one, two, three) = (count >= 1, count >= 2, count >= 3);
        let floats = one && flags & DECIMAL == 0;
        [
            (F_FIRST, floats),
            (F_LAST, floats && two),
            (F_BEFORE_LAST, floats && three),
            (F_MIN, floats && (flags >> MIN_SHIFT) & 3 == EXPLICIT),
            (F_MAX, floats && (flags >> MAX_SHIFT) & 3 == EXPLICIT),
            (F_SUM, floats),
            (F_SUM_C, floats),
            (F_M2, floats),
            (F_SXY, floats),
            (F_RESET_SUM, one && flags & HAS_RESETS != 0),
        ]
        .into_iter()
        .filter_map(|(field, stored)| stored.then_some(field))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sample::STALE_NAN_BITS;

    /// Points of random samples (signed zeros, NaN, ±Inf, staleness markers) in random
    /// intervals of `interval`.
    /// Generated intervals: how many intervals after the previous one, and samples as
    /// `(offset back from the end, value kind, number)`.
    type Picks = [(i64, Vec<(i64, u8, i16)>)];

    /// An interval and a run of its points (at least one), from random picks.
    fn arb_run() -> impl Strategy<Value = (i64, Vec<(i64, FloatPoint)>)> {
        let picks = prop::collection::vec(
            (1i64..5, prop::collection::vec((0i64..3_600_000, any::<u8>(), any::<i16>()), 1..30)),
            1..40,
        );
        (prop::sample::select(vec![1_000i64, 300_000, 3_600_000]), picks)
            .prop_map(|(interval, picks)| (interval, run(interval, &picks)))
            .prop_filter("a run holds a point", |(_, points)| !points.is_empty())
    }

    fn run(interval: i64, picks: &Picks) -> Vec<(i64, FloatPoint)> {
        let mut index = 1i64;
        let mut out = Vec::new();
        for (skip, samples) in picks {
            index += skip;
            let end = index * interval;
            let mut raw: Vec<Sample> = samples
                .iter()
                .map(|&(at, kind, n)| {
                    let v = match kind % 10 {
                        0 => f64::from_bits(STALE_NAN_BITS),
                        1 => f64::NAN,
                        2 => f64::INFINITY,
                        3 => -0.0,
                        4 => f64::from(n) / 3.0,
                        5 | 6 => f64::from(n) / 100.0,
                        _ => f64::from(n % 9),
                    };
                    Sample::new(end - at.rem_euclid(interval), v)
                })
                .collect();
            raw.sort_by_key(|s| s.timestamp_ms);
            raw.dedup_by_key(|s| s.timestamp_ms);
            if let Some(p) = FloatPoint::of(&raw) {
                out.push((end, p));
            }
        }
        out
    }

    /// What a run keeps of `points`: each one, with its moments rebuilt from the exact ones
    /// where it is stored in decimal form, and without exact moments where it is not.
    fn stored(points: &[(i64, FloatPoint)]) -> Vec<(i64, FloatPoint)> {
        points
            .iter()
            .map(|&(e, p)| {
                let refs = (reference(&p, p.min_ts, p.min), reference(&p, p.max_ts, p.max));
                match decimal_form(&p, refs) {
                    Some(_) => (e, p.from_exact().unwrap()),
                    None => (e, FloatPoint { exact: None, ..p }),
                }
            })
            .collect()
    }

    fn bits(points: &[(i64, FloatPoint)]) -> String {
        // Debug output prints every field; NaN payloads are compared through `to_bits` below.
        points
            .iter()
            .map(|(e, p)| {
                let floats = [p.first.value, p.last.value, p.min, p.max, p.sum, p.sum_c, p.m2, p.sxy, p.reset_sum]
                    .map(f64::to_bits);
                format!("{e} {p:?} {floats:?} {:?}", p.before_last.map(|s| s.value.to_bits()))
            })
            .collect()
    }

    proptest! {
        #[test]
        fn every_field_round_trips_to_the_bit(
            (interval, points) in arb_run(),
        ) {
            let mut bytes = Vec::new();
            encode(interval, &points, &mut bytes).unwrap();
            let (got_interval, got) = decode(&bytes).unwrap();
            prop_assert_eq!(got_interval, interval);
            prop_assert_eq!(bits(&got), bits(&stored(&points)));
        }

        #[test]
        fn the_columnar_decoder_agrees_with_the_reference_one(
            (interval, points) in arb_run(),
            flip in any::<(prop::sample::Index, u8)>(),
        ) {
            let mut bytes = Vec::new();
            encode_version(1, interval, &points, &mut bytes).unwrap();
            let mut out = vec![(1, FloatPoint::stale_only())];
            prop_assert_eq!(decode_into(&bytes, &mut out), Ok(interval));
            let (_, want) = reference::decode(&bytes).unwrap();
            prop_assert_eq!(bits(&out), bits(&want));
            prop_assert_eq!(bits(&out), bits(&stored(&points)));
            // Damaged: both refuse it, or both read the same points.
            let at = flip.0.index(bytes.len());
            bytes[at] ^= flip.1.max(1);
            match (decode(&bytes), reference::decode(&bytes)) {
                (Ok((i, got)), Ok((j, want))) => {
                    prop_assert_eq!(i, j);
                    prop_assert_eq!(bits(&got), bits(&want));
                }
                (got, want) => prop_assert_eq!(got.is_ok(), want.is_ok(), "{:?} {:?}", got.err(), want.err()),
            }
        }

        /// A decode of only some fields gives those (and what every decode gives) bit for bit
        /// as the whole decode does.
        #[test]
        fn decoding_some_fields_gives_them_as_the_whole_decode(
            (interval, points) in arb_run(),
        ) {
            let mut bytes = Vec::new();
            encode(interval, &points, &mut bytes).unwrap();
            let (_, whole) = decode(&bytes).unwrap();
            let kept = |p: &FloatPoint, what: Decoded| {
                let mut k = format!(
                    "{} {:?} {:?} {:?} {} {:?} {:?} {} {} {} {}",
                    p.count, p.first.timestamp_ms, p.last.timestamp_ms, p.before_last.map(|s| (s.timestamp_ms, s.value.to_bits())),
                    p.ends_stale, (p.min.to_bits(), p.min_ts), (p.max.to_bits(), p.max_ts), p.constant, p.resets,
                    p.reset_sum.to_bits(), p.changes,
                );
                k += &format!(" {} {}", p.first.value.to_bits(), p.last.value.to_bits());
                if what.sums {
                    k += &format!(" {} {}", p.sum.to_bits(), p.sum_c.to_bits());
                }
                k
            };
            for what in [Decoded { sums: false, moments: false }, Decoded { sums: true, moments: false }] {
                let mut out = Vec::new();
                prop_assert_eq!(decode_some_into(&bytes, &mut out, what), Ok(interval));
                prop_assert_eq!(out.len(), whole.len());
                for ((e, got), (f, want)) in out.iter().zip(&whole) {
                    prop_assert_eq!(e, f);
                    prop_assert_eq!(kept(got, what), kept(want, what));
                }
            }
        }

        #[test]
        fn both_versions_round_trip_the_same_points(
            (interval, points) in arb_run(),
        ) {
            let (mut v1, mut v2) = (Vec::new(), Vec::new());
            encode_version(1, interval, &points, &mut v1).unwrap();
            encode(interval, &points, &mut v2).unwrap();
            prop_assert_eq!((v1[0], v2[0]), (1, FORMAT_VERSION));
            let (a, b) = (decode(&v1).unwrap(), decode(&v2).unwrap());
            prop_assert_eq!(a.0, b.0);
            prop_assert_eq!(bits(&a.1), bits(&b.1));
        }

        #[test]
        fn a_header_whose_body_length_the_frame_does_not_state_is_refused(
            picks in prop::collection::vec((1i64..5, prop::collection::vec((0i64..300_000, any::<u8>(), any::<i16>()), 1..30)), 1..10),
            n in 1u64..=MAX_POINTS,
        ) {
            let points = run(300_000, &picks);
            prop_assume!(!points.is_empty());
            let mut bytes = Vec::new();
            encode(300_000, &points, &mut bytes).unwrap();
            // The same payload under a header claiming `n` points and the longest body they
            // allow (hundreds of MB for a corrupt count near the limit).
            let rest = &bytes[1..];
            let (interval, rest) = crate::varint::read(rest).unwrap();
            let (_, rest) = crate::varint::read(rest).unwrap();
            let (first, rest) = crate::varint::read(rest).unwrap();
            let (len, payload) = crate::varint::read(rest).unwrap();
            let claimed = n * MAX_POINT_BYTES + BODY_COLUMNS * 10;
            prop_assume!(claimed != len);
            let mut forged = vec![FORMAT_VERSION];
            for v in [interval, n, first, claimed] {
                crate::varint::put(&mut forged, v);
            }
            forged.extend_from_slice(payload);
            prop_assert_eq!(decode(&forged).err(), Some(TierRunError::Invalid("body length")));
        }

        #[test]
        fn damaged_bytes_are_an_error_not_a_panic(
            picks in prop::collection::vec((1i64..5, prop::collection::vec((0i64..300_000, any::<u8>(), any::<i16>()), 1..30)), 1..10),
            cut in any::<prop::sample::Index>(),
            flip in any::<(prop::sample::Index, u8)>(),
        ) {
            let points = run(300_000, &picks);
            prop_assume!(!points.is_empty());
            let mut bytes = Vec::new();
            encode(300_000, &points, &mut bytes).unwrap();
            let mut v1 = Vec::new();
            encode_version(1, 300_000, &points, &mut v1).unwrap();
            for bytes in [bytes, v1] {
                let _ = decode(&bytes[..cut.index(bytes.len())]);
                let mut flipped = bytes.clone();
                let at = flip.0.index(flipped.len());
                flipped[at] ^= flip.1.max(1);
                let _ = decode(&flipped);
            }
        }
    }

    #[test]
    fn encoding_refuses_what_a_run_cannot_hold() {
        let p = FloatPoint::of(&[Sample::new(250_000, 1.0)]).unwrap();
        let mut out = Vec::new();
        assert!(encode(300_000, &[], &mut out).is_err());
        assert!(encode(300_000, &[(299_999, p)], &mut out).is_err());
        assert!(encode(300_000, &[(600_000, p)], &mut out).is_err(), "sample outside the interval");
        assert!(encode(300_000, &[(300_000, p), (300_000, p)], &mut out).is_err());
        assert!(encode(300_000, &[(300_000, p)], &mut out).is_ok());
        assert_eq!(decode(&[9]), Err(TierRunError::Unsupported(9)));
    }

    /// A regular scrape's points differ only in their values: 5-minute points of a counter
    /// scraped every 15 s take a few bytes each.
    #[test]
    fn regular_points_are_small() {
        let points: Vec<(i64, FloatPoint)> = (1..=288)
            .map(|k| {
                let end = k * 300_000;
                let raw: Vec<Sample> =
                    (0..20).map(|i| Sample::new(end - 285_000 + i * 15_000, (k * 20 + i) as f64 * 3.0)).collect();
                (end, FloatPoint::of(&raw).unwrap())
            })
            .collect();
        let mut bytes = Vec::new();
        encode(300_000, &points, &mut bytes).unwrap();
        assert!(bytes.len() < 288 * 16, "{} bytes for 288 points", bytes.len());
    }

    /// Directories written before version 2 hold version 1 runs: the bytes version 1's encoder
    /// wrote for two points of a counter scraped every 15 s (one in decimal form, one not).
    #[test]
    fn version_1_bytes_still_decode() {
        let raw = |k: i64, v: &dyn Fn(i64) -> f64| -> Vec<Sample> {
            (0..20).map(|i| Sample::new(k * 300_000 - 285_003 + i * 15_000 + i % 3, v(i))).collect()
        };
        let points = vec![
            (300_000, FloatPoint::of(&raw(1, &|i| 100.0 + i as f64 * 2.5)).unwrap()),
            (600_000, FloatPoint::of(&raw(2, &|i| (i as f64).sqrt())).unwrap()),
        ];
        assert!(stored(&points)[0].1.exact.is_some() && stored(&points)[1].1.exact.is_none());
        let (interval, got) = decode(V1_BYTES).unwrap();
        assert_eq!(interval, 300_000);
        assert_eq!(bits(&got), bits(&stored(&points)));
    }

    /// Written by version 1's encoder as it was before version 2.
    const V1_BYTES: &[u8] = &[
        1, 224, 167, 18, 2, 1, 108, 40, 181, 47, 253, 32, 108, 97, 3, 0, 1, 1, 2, 20, 20, 2, 144, 16, 4, 150, 229, 34,
        0, 2, 4, 0, 4, 182, 234, 1, 0, 2, 17, 17, 8, 242, 224, 197, 1, 242, 224, 197, 1, 0, 4, 0, 19, 0, 19, 1, 1, 5,
        208, 15, 182, 7, 49, 4, 0, 0, 140, 21, 0, 64, 64, 64, 188, 64, 64, 0, 17, 16, 76, 253, 58, 158, 0, 111, 248,
        152, 0, 113, 0, 0, 131, 118, 207, 0, 119, 192, 0, 52, 204, 207, 0, 10, 198, 0, 100, 223, 88, 0, 185, 109, 0,
        77, 108, 245, 0, 133, 196, 0, 249, 217, 221, 0, 56, 193,
    ];
}
