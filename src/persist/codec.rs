//! A small, bounded binary reader/writer for the module's encodings.
//!
//! Integers are LEB128 varints (zigzag for signed ones). The reader never trusts a count: a
//! count is refused unless the bytes left could hold that many elements, so a forged payload
//! cannot make the decoder allocate more than the payload's own size.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

pub fn decode_error<T>(msg: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError(msg.into()))
}

#[derive(Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn uvarint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }

    pub fn ivarint(&mut self, v: i64) -> &mut Self {
        self.uvarint(((v << 1) ^ (v >> 63)) as u64)
    }

    pub fn fixed_u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.uvarint(b.len() as u64);
        self.buf.extend_from_slice(b);
        self
    }

    /// A writer that appends to `buf` (cleared first), to reuse its allocation.
    pub fn reusing(mut buf: Vec<u8>) -> Self {
        buf.clear();
        Writer { buf }
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// A bus message of `family` ("transfer message", ...) past its version byte, which must
    /// be `version`.
    pub fn open_message(buf: &'a [u8], version: u8, family: &str) -> Result<Self, DecodeError> {
        Reader::open_message_of(buf, &[version], family).map(|(r, _)| r)
    }

    /// [`Reader::open_message`] for a family whose messages come in several versions: the
    /// version byte must be one of `versions`, and is returned beside the reader.
    pub fn open_message_of(
        buf: &'a [u8],
        versions: &[u8],
        family: &str,
    ) -> Result<(Self, u8), DecodeError> {
        let mut r = Reader::new(buf);
        match r.u8()? {
            v if versions.contains(&v) => Ok((r, v)),
            other => decode_error(format!("unknown {family} version {other}")),
        }
    }

    /// A key name in a message of `family`: 1 to `max` bytes.
    pub fn key_name(&mut self, max: usize, family: &str) -> Result<Vec<u8>, DecodeError> {
        let n = self.bytes(max)?;
        if n.is_empty() {
            return decode_error(format!("empty key name in a {family}"));
        }
        Ok(n.to_vec())
    }

    /// `m`, once every byte of a message of `family` has been read.
    pub fn end<T>(&self, m: T, family: &str) -> Result<T, DecodeError> {
        if self.is_empty() {
            Ok(m)
        } else {
            decode_error(format!("trailing bytes in a {family}"))
        }
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let Some(&b) = self.buf.get(self.pos) else {
            return decode_error("truncated payload");
        };
        self.pos += 1;
        Ok(b)
    }

    pub fn uvarint(&mut self) -> Result<u64, DecodeError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return decode_error("varint overflows 64 bits");
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        decode_error("varint longer than 10 bytes")
    }

    pub fn fixed_u64(&mut self) -> Result<u64, DecodeError> {
        let Some(bytes) = self.buf.get(self.pos..self.pos + 8) else {
            return decode_error("truncated payload");
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        self.pos += 8;
        Ok(u64::from_le_bytes(word))
    }

    pub fn ivarint(&mut self) -> Result<i64, DecodeError> {
        let z = self.uvarint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    /// A signed varint written only when it is not 0 (`what`, in a message of `family`): a 0
    /// there is refused, so each value has one encoding.
    pub fn nonzero_ivarint(&mut self, what: &str, family: &str) -> Result<i64, DecodeError> {
        match self.ivarint()? {
            0 => decode_error(format!("{what} 0 written out in a {family}")),
            v => Ok(v),
        }
    }

    /// A count of elements that each take at least `min_element_bytes`, at most `max`.
    pub fn count(&mut self, max: usize, min_element_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.uvarint()?;
        let fits = usize::try_from(n)
            .ok()
            .filter(|n| *n <= max)
            .filter(|n| n.saturating_mul(min_element_bytes.max(1)) <= self.remaining());
        match fits {
            Some(n) => Ok(n),
            None => decode_error(format!("count {n} exceeds its bound or the payload")),
        }
    }

    pub fn bytes(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.count(max, 1)?;
        let slice = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_roundtrip_at_the_edges() {
        let values = [0i64, 1, -1, 63, -64, 64, i64::MAX, i64::MIN, 300, -300];
        let mut w = Writer::new();
        for v in values {
            w.ivarint(v);
        }
        w.uvarint(u64::MAX);
        let buf = w.finish();
        let mut r = Reader::new(&buf);
        for v in values {
            assert_eq!(r.ivarint().unwrap(), v);
        }
        assert_eq!(r.uvarint().unwrap(), u64::MAX);
        assert!(r.is_empty());
    }

    #[test]
    fn truncated_and_overlong_varints_fail() {
        assert!(Reader::new(&[0x80]).uvarint().is_err());
        assert!(Reader::new(&[0xff; 11]).uvarint().is_err());
        // 10th byte may only carry the top bit
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert!(Reader::new(&over).uvarint().is_err());
    }

    #[test]
    fn counts_are_bounded_by_payload() {
        let mut w = Writer::new();
        w.uvarint(1_000_000).u8(1);
        let buf = w.finish();
        assert!(Reader::new(&buf).count(usize::MAX, 1).is_err());
        let mut w = Writer::new();
        w.uvarint(2).u8(1).u8(2);
        let buf = w.finish();
        assert_eq!(Reader::new(&buf).count(10, 1).unwrap(), 2);
        assert!(Reader::new(&buf).count(1, 1).is_err());
        assert!(Reader::new(&buf).count(10, 2).is_err());
    }
}
