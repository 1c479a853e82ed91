//! ClickHouse's `RowBinary` format, the subset saltdb's tables use: little-endian fixed-width
//! integers, strings as a LEB128 length and bytes, arrays as a LEB128 count and elements. Pure:
//! encoding into a buffer and decoding from a slice, with every read bounds-checked (the bytes
//! come from the network).

/// Appends an unsigned LEB128 number.
pub fn put_len(dst: &mut Vec<u8>, mut n: u64) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            dst.push(byte);
            return;
        }
        dst.push(byte | 0x80);
    }
}

/// Appends a `String`.
pub fn put_str(dst: &mut Vec<u8>, s: &[u8]) {
    put_len(dst, s.len() as u64);
    dst.extend_from_slice(s);
}

/// A `RowBinary` response being read (a clone reads on from the same place).
#[derive(Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

/// Bytes that end early or hold an impossible length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed RowBinary from ClickHouse: {0}")]
pub struct Malformed(&'static str);

impl<'a> Reader<'a> {
    /// Reads `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    /// True once every byte was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.rest.len() < n {
            return Err(Malformed("truncated"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        self.take(N).and_then(|b| <[u8; N]>::try_from(b).map_err(|_| Malformed("truncated")))
    }

    /// A `UInt8`.
    ///
    /// # Errors
    /// [`Malformed`] when the bytes end early (likewise below).
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        self.fixed().map(u8::from_le_bytes)
    }

    /// A `UInt16`.
    pub fn u16(&mut self) -> Result<u16, Malformed> {
        self.fixed().map(u16::from_le_bytes)
    }

    /// A `UInt32`.
    pub fn u32(&mut self) -> Result<u32, Malformed> {
        self.fixed().map(u32::from_le_bytes)
    }

    /// A `UInt64`.
    pub fn u64(&mut self) -> Result<u64, Malformed> {
        self.fixed().map(u64::from_le_bytes)
    }

    /// An `Int64`.
    pub fn i64(&mut self) -> Result<i64, Malformed> {
        self.fixed().map(i64::from_le_bytes)
    }

    /// A LEB128 length, at most what the remaining bytes could hold.
    pub fn len(&mut self) -> Result<usize, Malformed> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let [byte] = self.fixed::<1>()?;
            n |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= self.rest.len())
                    .ok_or(Malformed("length past the end"));
            }
        }
        Err(Malformed("length too long"))
    }

    /// A `String` holding any bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.len()?;
        self.take(n)
    }

    /// A `String` (UTF-8).
    pub fn str(&mut self) -> Result<&'a str, Malformed> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|_| Malformed("string not UTF-8"))
    }

    /// An `Array(String)`.
    pub fn strings(&mut self) -> Result<Vec<&'a str>, Malformed> {
        let n = self.len()?;
        (0..n).map(|_| self.str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn rows_round_trip(rows in proptest::collection::vec((any::<u16>(), any::<u64>(), any::<i64>(), proptest::collection::vec(".{0,20}", 0..4)), 0..20)) {
            let mut buf = Vec::new();
            for (a, b, c, strings) in &rows {
                buf.extend_from_slice(&a.to_le_bytes());
                buf.extend_from_slice(&b.to_le_bytes());
                buf.extend_from_slice(&c.to_le_bytes());
                put_len(&mut buf, strings.len() as u64);
                for s in strings {
                    put_str(&mut buf, s.as_bytes());
                }
            }
            let mut r = Reader::new(&buf);
            for (a, b, c, strings) in &rows {
                prop_assert_eq!(r.u16().unwrap(), *a);
                prop_assert_eq!(r.u64().unwrap(), *b);
                prop_assert_eq!(r.i64().unwrap(), *c);
                prop_assert_eq!(r.strings().unwrap(), strings.iter().map(String::as_str).collect::<Vec<_>>());
            }
            prop_assert!(r.is_empty());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while !r.is_empty() {
                if r.strings().is_err() || r.u64().is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn impossible_lengths_are_errors() {
        assert!(Reader::new(&[0xff; 12]).len().is_err());
        assert!(Reader::new(&[5, b'a']).str().is_err());
    }
}
