//! Bit streams, most significant bit first: the substrate of the Gorilla-style codecs
//! (`storage::chunk` for sealed chunks, `remote::xor` for Prometheus' XOR chunks in remote read).
//! Pure: no I/O.

/// Appends bits to a byte buffer; the last byte is padded with zero bits.
#[derive(Debug, Default)]
pub struct BitWriter {
    buf: Vec<u8>,
    /// Unused low bits in the last byte.
    free: u32,
}

impl BitWriter {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty stream with room for `bytes` bytes.
    pub fn with_capacity(bytes: usize) -> Self {
        Self { buf: Vec::with_capacity(bytes), free: 0 }
    }

    /// Writes one bit.
    pub fn write_bit(&mut self, bit: bool) {
        self.write(u64::from(bit), 1);
    }

    /// Writes the low `n` bits of `x` (`n <= 64`), most significant first.
    pub fn write(&mut self, x: u64, n: u32) {
        let mut n = n;
        while n > 0 {
            if self.free == 0 {
                self.buf.push(0);
                self.free = 8;
            }
            let take = n.min(self.free);
            let chunk = ((x >> (n - take)) & ((1u64 << take) - 1)) as u8;
            if let Some(last) = self.buf.last_mut() {
                *last |= chunk << (self.free - take);
            }
            self.free -= take;
            n -= take;
        }
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

/// The stream ended before the bits asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndOfBits;

/// Reads bits from a byte slice, most significant first.
#[derive(Debug)]
pub struct BitReader<'a> {
    buf: &'a [u8],
    /// Position in bits.
    pos: usize,
}

impl<'a> BitReader<'a> {
    /// A reader at the first bit of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Reads one bit.
    ///
    /// # Errors
    /// [`EndOfBits`] past the end.
    pub fn bit(&mut self) -> Result<bool, EndOfBits> {
        Ok(self.read(1)? == 1)
    }

    /// Reads `n <= 64` bits into the low bits of the result.
    ///
    /// # Errors
    /// [`EndOfBits`] past the end.
    pub fn read(&mut self, n: u32) -> Result<u64, EndOfBits> {
        let mut out = 0u64;
        let mut n = n;
        while n > 0 {
            let byte = *self.buf.get(self.pos / 8).ok_or(EndOfBits)?;
            let avail = 8 - (self.pos % 8) as u32;
            let take = n.min(avail);
            let chunk = (u64::from(byte) >> (avail - take)) & ((1u64 << take) - 1);
            out = out.checked_shl(take).unwrap_or(0) | chunk;
            self.pos += take as usize;
            n -= take;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fields_round_trip(fields in proptest::collection::vec((any::<u64>(), 0u32..=64), 0..64)) {
            let mut w = BitWriter::new();
            for &(v, n) in &fields {
                w.write(v, n);
            }
            let total: u32 = fields.iter().map(|f| f.1).sum();
            let bytes = w.into_bytes();
            prop_assert_eq!(bytes.len(), total.div_ceil(8) as usize);
            let mut r = BitReader::new(&bytes);
            for &(v, n) in &fields {
                let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                prop_assert_eq!(r.read(n).unwrap(), v & mask);
            }
            let padding = bytes.len() as u32 * 8 - total;
            prop_assert_eq!(r.read(padding).unwrap(), 0);
            prop_assert_eq!(r.bit(), Err(EndOfBits));
        }
    }

    #[test]
    fn most_significant_bit_first() {
        let mut w = BitWriter::new();
        w.write_bit(true);
        w.write(0b011, 3);
        w.write(0xABC, 12);
        assert_eq!(w.into_bytes(), vec![0b1011_1010, 0b1011_1100]);
    }
}
