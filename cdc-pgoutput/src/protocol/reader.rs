//! A bounds-checked cursor over one message: every read either succeeds or says which field
//! at which offset was missing, so decoders never index out of bounds.

use bytes::Bytes;
use cdc_core::Lsn;

use super::error::{DecodeError, DecodeProblem, MessageKind};

/// Reads big-endian protocol fields from a `Bytes`, tracking the offset for error reports.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    kind: MessageKind,
}

impl<'a> Reader<'a> {
    /// A reader at offset 0; errors name `kind` until [`Reader::set_kind`] narrows it.
    pub(crate) fn new(buf: &'a Bytes, kind: MessageKind) -> Self {
        Reader { buf, pos: 0, kind }
    }

    /// Names the message in later errors, once its tag is known.
    pub(crate) fn set_kind(&mut self, kind: MessageKind) {
        self.kind = kind;
    }

    pub(crate) fn offset(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn error_at(&self, offset: usize, problem: DecodeProblem) -> DecodeError {
        DecodeError {
            message: self.kind,
            offset,
            problem,
        }
    }

    fn truncated(&self, needed: usize) -> DecodeError {
        self.error_at(
            self.pos,
            DecodeProblem::Truncated {
                needed,
                available: self.remaining(),
            },
        )
    }

    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        match self.rest().first_chunk::<N>() {
            Some(chunk) => {
                self.pos += N;
                Ok(*chunk)
            }
            None => Err(self.truncated(N)),
        }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        self.array::<1>().map(|[b]| b)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, DecodeError> {
        self.array().map(i16::from_be_bytes)
    }

    pub(crate) fn i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_be_bytes)
    }

    /// An Int32 the protocol uses as an unsigned value (xid, oid).
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_be_bytes)
    }

    pub(crate) fn lsn(&mut self) -> Result<Lsn, DecodeError> {
        self.array().map(|b| Lsn(u64::from_be_bytes(b)))
    }

    /// A Byte1 that Postgres only ever writes as 0 or 1; anything else is refused rather than
    /// guessed at.
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        let at = self.pos;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(self.error_at(at, DecodeProblem::InvalidBoolean { field, value })),
        }
    }

    /// An Int32 length or count, which must not be negative.
    pub(crate) fn len_i32(&mut self) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.i32()?;
        usize::try_from(n).map_err(|_| self.error_at(at, DecodeProblem::NegativeLength(n)))
    }

    /// An Int16 count, which must not be negative.
    pub(crate) fn len_i16(&mut self) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.i16()?;
        usize::try_from(n)
            .map_err(|_| self.error_at(at, DecodeProblem::NegativeLength(i32::from(n))))
    }

    /// The whole message this reader reads.
    pub(crate) fn buffer(&self) -> &'a Bytes {
        self.buf
    }

    /// Steps over the next `n` bytes.
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        self.pos += n;
        Ok(())
    }

    /// The next `n` bytes as a zero-copy slice of the input.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        let start = self.pos;
        self.pos += n;
        Ok(self.buf.slice(start..self.pos))
    }

    /// Everything left, as a zero-copy slice.
    pub(crate) fn rest_bytes(&mut self) -> Bytes {
        let start = self.pos.min(self.buf.len());
        self.pos = self.buf.len();
        self.buf.slice(start..)
    }

    /// A NUL-terminated UTF-8 string; the NUL is consumed and not returned.
    pub(crate) fn cstr(&mut self) -> Result<String, DecodeError> {
        let rest = self.rest();
        let Some(nul) = memchr::memchr(0, rest) else {
            return Err(self.error_at(self.pos, DecodeProblem::UnterminatedString));
        };
        let raw = rest.get(..nul).unwrap_or_default();
        match std::str::from_utf8(raw) {
            Ok(s) => {
                self.pos += nul + 1;
                Ok(s.to_owned())
            }
            Err(e) => Err(self.error_at(self.pos + e.valid_up_to(), DecodeProblem::InvalidUtf8)),
        }
    }

    /// Succeeds only if the whole message was consumed: bytes left over mean the layout we
    /// decoded is not the one the sender wrote (e.g. a protocol option mismatch).
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(self.error_at(self.pos, DecodeProblem::TrailingBytes(n))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_report_offset_and_sizes() {
        let buf = Bytes::from_static(&[1, 2, 3]);
        let mut r = Reader::new(&buf, MessageKind::Begin);
        assert_eq!(r.u8().unwrap(), 1);
        let err = r.i32().unwrap_err();
        assert_eq!(err.offset, 1);
        assert_eq!(
            err.problem,
            DecodeProblem::Truncated {
                needed: 4,
                available: 2
            }
        );
        // A failed read consumes nothing.
        assert_eq!(r.offset(), 1);
    }

    #[test]
    fn cstr_rejects_missing_nul_and_bad_utf8() {
        let buf = Bytes::from_static(b"abc");
        let err = Reader::new(&buf, MessageKind::Origin).cstr().unwrap_err();
        assert_eq!(err.problem, DecodeProblem::UnterminatedString);

        let buf = Bytes::from_static(b"a\xffb\0");
        let err = Reader::new(&buf, MessageKind::Origin).cstr().unwrap_err();
        assert_eq!((err.offset, err.problem), (1, DecodeProblem::InvalidUtf8));
    }

    #[test]
    fn huge_lengths_are_truncation_not_overflow() {
        let buf = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 9]);
        let mut r = Reader::new(&buf, MessageKind::Message);
        let n = r.len_i32().unwrap();
        assert!(matches!(
            r.bytes(n).unwrap_err().problem,
            DecodeProblem::Truncated { available: 1, .. }
        ));
    }
}
