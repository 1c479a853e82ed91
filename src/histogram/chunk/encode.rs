//! Writing histogram chunks.

use std::borrow::Borrow;

use super::state::{same_bits, Mode, State};
use super::varbit::{put_int, put_xor};
use super::{zigzag, EncodeError, MARKER};
use crate::bits::BitWriter;
use crate::histogram::types::{Histogram, Span};

/// Appends the chunk of `samples` (strictly ascending timestamps, at least one) to `dst`.
/// Integer modes are used when every count of every sample is an integer (as `i64`, bit for bit),
/// the smaller of the two predictions; the float mode otherwise.
///
/// # Errors
/// [`EncodeError`] for no samples, timestamps out of order, or spans that do not fit the counts;
/// `dst` is then unchanged.
pub fn encode<H: Borrow<Histogram>>(samples: &[(i64, H)], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
    encode_with(samples, dst, &[Mode::IntPrevious, Mode::IntMean])
}

/// [`encode`] trying one integer prediction instead of two (half the work, a few percent more
/// bytes): for the write-ahead log, whose rows are read back once, at a restart.
///
/// # Errors
/// As [`encode`].
pub fn encode_fast<H: Borrow<Histogram>>(samples: &[(i64, H)], dst: &mut Vec<u8>) -> Result<(), EncodeError> {
    encode_with(samples, dst, &[Mode::IntPrevious])
}

fn encode_with<H: Borrow<Histogram>>(
    samples: &[(i64, H)],
    dst: &mut Vec<u8>,
    integer_modes: &[Mode],
) -> Result<(), EncodeError> {
    check(samples)?;
    let modes: &[Mode] = if samples.iter().all(|(_, h)| integral(h.borrow())) { integer_modes } else { &[Mode::Float] };
    let mut best: Option<(Mode, Vec<u8>)> = None;
    for &mode in modes {
        let bits = encode_bits(samples, mode);
        if best.as_ref().is_none_or(|(_, b)| bits.len() < b.len()) {
            best = Some((mode, bits));
        }
    }
    let Some(((first, _), (mode, bits))) = samples.first().zip(best) else {
        return Err(EncodeError::Empty);
    };
    dst.push(MARKER);
    dst.push(mode as u8);
    crate::varint::put(dst, samples.len() as u64);
    crate::varint::put(dst, zigzag(*first));
    dst.extend_from_slice(&bits);
    Ok(())
}

fn check<H: Borrow<Histogram>>(samples: &[(i64, H)]) -> Result<(), EncodeError> {
    if samples.is_empty() {
        return Err(EncodeError::Empty);
    }
    let covered = |spans: &[Span]| spans.iter().map(|s| u64::from(s.length)).sum::<u64>();
    let mut prev = None;
    for (index, (timestamp, h)) in samples.iter().enumerate() {
        let h = h.borrow();
        if prev.is_some_and(|p| *timestamp <= p) {
            return Err(EncodeError::NotAscending { index, timestamp: *timestamp });
        }
        prev = Some(*timestamp);
        if covered(&h.positive_spans) != h.positive_buckets.len() as u64
            || covered(&h.negative_spans) != h.negative_buckets.len() as u64
        {
            return Err(EncodeError::SpansBucketsMismatch { index });
        }
    }
    Ok(())
}

/// `v` as an `i64` that converts back to the same bits (no NaN, infinity, fraction or -0.0).
fn exact(v: f64) -> Option<i64> {
    let i = v as i64;
    ((i as f64).to_bits() == v.to_bits()).then_some(i)
}

fn integral(h: &Histogram) -> bool {
    [h.count, h.zero_count].iter().chain(&h.positive_buckets).chain(&h.negative_buckets).all(|&v| exact(v).is_some())
}

/// The bit stream of all samples in `mode`.
pub(super) fn encode_bits<H: Borrow<Histogram>>(samples: &[(i64, H)], mode: Mode) -> Vec<u8> {
    let mut w = BitWriter::with_capacity(samples.len() * 16);
    let mut st = State::new(mode);
    let (mut prev_ts, mut prev_delta) = (samples.first().map_or(0, |s| s.0), 0i64);
    for (i, (ts, h)) in samples.iter().enumerate() {
        let h = h.borrow();
        write_meta(&mut w, &mut st, h);
        if i > 0 {
            let delta = ts.wrapping_sub(prev_ts);
            put_int(&mut w, delta.wrapping_sub(prev_delta));
            (prev_ts, prev_delta) = (*ts, delta);
        }
        put_xor(&mut w, &mut st.sum, h.sum);
        let buckets = h.positive_buckets.iter().chain(&h.negative_buckets);
        if mode == Mode::Float {
            put_xor(&mut w, &mut st.count, h.count);
            put_xor(&mut w, &mut st.zero, h.zero_count);
            for (slot, &c) in st.slots.iter_mut().zip(buckets) {
                put_xor(&mut w, &mut slot.xor, c);
            }
        } else {
            // Every value is exact here: `integral` chose this mode.
            let p = mode.predict();
            let zero = exact(h.zero_count).unwrap_or_default();
            st.zero_int.put(&mut w, p, zero);
            let mut residual = exact(h.count).unwrap_or_default().wrapping_sub(zero);
            for (slot, &c) in st.slots.iter_mut().zip(buckets) {
                let c = exact(c).unwrap_or_default();
                residual = residual.wrapping_sub(c);
                slot.int.put(&mut w, p, c);
            }
            put_int(&mut w, residual.wrapping_sub(st.residual));
            st.residual = residual;
        }
    }
    w.into_bytes()
}

/// The change bit, and after a change the hint, the integer flag and the layout if it changed.
fn write_meta(w: &mut BitWriter, st: &mut State, h: &Histogram) {
    let new_layout = !st.same_layout(h);
    let changed = new_layout || h.counter_reset_hint != st.hint || h.integer != st.integer;
    w.write_bit(changed);
    if !changed {
        return;
    }
    w.write(u64::from(h.counter_reset_hint.code()), 2);
    w.write_bit(h.integer);
    w.write_bit(new_layout);
    if new_layout {
        write_layout(w, &st.layout, h);
        st.set_layout(h);
    }
    st.hint = h.counter_reset_hint;
    st.integer = h.integer;
}

fn write_layout(w: &mut BitWriter, prev: &Histogram, h: &Histogram) {
    put_int(w, i64::from(h.schema));
    let new_threshold = prev.zero_threshold.to_bits() != h.zero_threshold.to_bits();
    w.write_bit(new_threshold);
    if new_threshold {
        w.write(h.zero_threshold.to_bits(), 64);
    }
    for spans in [&h.positive_spans, &h.negative_spans] {
        put_int(w, spans.len() as i64);
        for s in spans {
            put_int(w, i64::from(s.offset));
            put_int(w, i64::from(s.length));
        }
    }
    let new_bounds = !same_bits(&prev.custom_values, &h.custom_values);
    w.write_bit(new_bounds);
    if new_bounds {
        put_int(w, h.custom_values.len() as i64);
        for v in &h.custom_values {
            w.write(v.to_bits(), 64);
        }
    }
}
