//! Reading histogram chunks from untrusted bytes.

use super::state::{Mode, State};
use super::varbit::Bits;
use super::{unzigzag, DecodeError, MARKER};
use crate::histogram::types::{CounterResetHint, Histogram, Span};

/// All samples of a chunk.
///
/// # Errors
/// The first [`DecodeError`] met.
pub fn decode(src: &[u8]) -> Result<Vec<(i64, Histogram)>, DecodeError> {
    Samples::new(src)?.collect()
}

/// The number of samples the chunk's header declares (not checked against the body).
///
/// # Errors
/// [`DecodeError`] for a bad header.
pub fn sample_count(src: &[u8]) -> Result<usize, DecodeError> {
    Ok(Header::read(src)?.count)
}

struct Header<'a> {
    mode: Mode,
    count: usize,
    first_ts: i64,
    body: &'a [u8],
}

impl<'a> Header<'a> {
    fn read(src: &'a [u8]) -> Result<Self, DecodeError> {
        match src.first() {
            Some(&MARKER) => {}
            other => return Err(DecodeError::Marker(other.copied())),
        }
        let mode_byte = src.get(1).copied().ok_or(DecodeError::Truncated)?;
        let mode = Mode::from_byte(mode_byte).ok_or(DecodeError::Mode(mode_byte))?;
        let (count, rest) = crate::varint::read(src.get(2..).unwrap_or_default())?;
        let (first_ts, body) = crate::varint::read(rest)?;
        // Every sample takes at least one bit.
        if count == 0 || count > body.len() as u64 * 8 {
            return Err(DecodeError::SampleCount(count));
        }
        let count = usize::try_from(count).map_err(|_| DecodeError::SampleCount(count))?;
        Ok(Self { mode, count, first_ts: unzigzag(first_ts), body })
    }
}

/// The samples of a chunk, one at a time; after an error, nothing more.
pub struct Samples<'a> {
    bits: Bits<'a>,
    st: State,
    left: usize,
    index: usize,
    ts: i64,
    delta: i64,
}

impl<'a> Samples<'a> {
    /// Reads the header of `src`.
    ///
    /// # Errors
    /// [`DecodeError`] for a bad header.
    pub fn new(src: &'a [u8]) -> Result<Self, DecodeError> {
        let h = Header::read(src)?;
        Ok(Self { bits: Bits::new(h.body), st: State::new(h.mode), left: h.count, index: 0, ts: h.first_ts, delta: 0 })
    }

    fn sample(&mut self) -> Result<(i64, Histogram), DecodeError> {
        self.read_meta()?;
        if self.index > 0 {
            let delta = self.delta.wrapping_add(self.bits.int()?);
            let ts = self.ts.wrapping_add(delta);
            if ts <= self.ts {
                return Err(DecodeError::NotAscending(self.index));
            }
            (self.ts, self.delta) = (ts, delta);
        }
        let st = &mut self.st;
        let mut h = Histogram {
            counter_reset_hint: st.hint,
            integer: st.integer,
            sum: self.bits.xor(&mut st.sum)?,
            ..st.layout.clone()
        };
        let n_positive = st.layout.positive_spans.iter().map(|s| s.length as usize).sum::<usize>();
        let mut counts = Vec::with_capacity(st.slots.len());
        if st.mode == Mode::Float {
            h.count = self.bits.xor(&mut st.count)?;
            h.zero_count = self.bits.xor(&mut st.zero)?;
            for slot in &mut st.slots {
                counts.push(self.bits.xor(&mut slot.xor)?);
            }
        } else {
            let p = st.mode.predict();
            let zero = st.zero_int.read(&mut self.bits, p)?;
            let mut total = zero;
            for slot in &mut st.slots {
                let c = slot.int.read(&mut self.bits, p)?;
                total = total.wrapping_add(c);
                counts.push(c as f64);
            }
            let residual = st.residual.wrapping_add(self.bits.int()?);
            st.residual = residual;
            h.zero_count = zero as f64;
            h.count = total.wrapping_add(residual) as f64;
        }
        h.negative_buckets = counts.split_off(n_positive.min(counts.len()));
        h.positive_buckets = counts;
        Ok((self.ts, h))
    }

    fn read_meta(&mut self) -> Result<(), DecodeError> {
        if !self.bits.bit()? {
            return Ok(());
        }
        let code = self.bits.read(2)? as u8;
        self.st.hint = CounterResetHint::from_code(code).unwrap_or_default();
        self.st.integer = self.bits.bit()?;
        if self.bits.bit()? {
            let layout = self.read_layout()?;
            self.st.set_layout(&layout);
        }
        Ok(())
    }

    fn read_layout(&mut self) -> Result<Histogram, DecodeError> {
        let prev = &self.st.layout;
        let mut h = Histogram {
            schema: i32::try_from(self.bits.int()?).map_err(|_| DecodeError::OutOfRange("schema"))?,
            zero_threshold: prev.zero_threshold,
            ..Histogram::default()
        };
        if self.bits.bit()? {
            h.zero_threshold = f64::from_bits(self.bits.read(64)?);
        }
        h.positive_spans = self.read_spans()?;
        h.negative_spans = self.read_spans()?;
        let buckets: u64 = h.positive_spans.iter().chain(&h.negative_spans).map(|s| u64::from(s.length)).sum();
        // Each bucket takes at least a bit in this very sample.
        if buckets > self.bits.left() {
            return Err(DecodeError::LayoutTooLarge);
        }
        h.custom_values = if self.bits.bit()? {
            let n = self.length(64)?;
            (0..n).map(|_| self.bits.read(64).map(f64::from_bits)).collect::<Result<_, _>>()?
        } else {
            self.st.layout.custom_values.clone()
        };
        Ok(h)
    }

    fn read_spans(&mut self) -> Result<Vec<Span>, DecodeError> {
        let n = self.length(2)?;
        let mut spans = Vec::with_capacity(n);
        for _ in 0..n {
            let offset = i32::try_from(self.bits.int()?).map_err(|_| DecodeError::OutOfRange("span offset"))?;
            let length = u32::try_from(self.bits.int()?).map_err(|_| DecodeError::OutOfRange("span length"))?;
            spans.push(Span { offset, length });
        }
        Ok(spans)
    }

    /// A list length whose items take at least `min_bits` each.
    fn length(&mut self, min_bits: u64) -> Result<usize, DecodeError> {
        let n = u64::try_from(self.bits.int()?).map_err(|_| DecodeError::OutOfRange("length"))?;
        if n > self.bits.left() / min_bits {
            return Err(DecodeError::LayoutTooLarge);
        }
        usize::try_from(n).map_err(|_| DecodeError::LayoutTooLarge)
    }

    /// After the last sample: at most 7 padding bits, all zero.
    fn finish(&mut self) -> Result<(), DecodeError> {
        let left = self.bits.left();
        if left >= 8 || self.bits.read(left as u32)? != 0 {
            return Err(DecodeError::TrailingData);
        }
        Ok(())
    }
}

impl Iterator for Samples<'_> {
    type Item = Result<(i64, Histogram), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut out = self.sample();
        self.index += 1;
        if out.is_ok() && self.left == 0 {
            out = self.finish().and(out);
        }
        if out.is_err() {
            self.left = 0;
        }
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}
