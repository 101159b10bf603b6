//! Incremental parser of `COPY … TO STDOUT (FORMAT binary)` output: chunks of bytes in,
//! rows of raw field values out. Sans-IO: the caller feeds whatever the connection
//! delivered; with [`CopyBinaryDecoder::decode`] fields are slices of the chunk itself
//! where a row lies within one chunk.
//!
//! Format (PostgreSQL documentation, "COPY", binary format): the 11-byte signature
//! `PGCOPY\n\xff\r\n\0`, a 32-bit flags field, a 32-bit header extension length and that
//! many bytes; then per tuple a 16-bit field count (−1 ends the data) and per field a 32-bit
//! length (−1 for NULL) and the value in the type's binary send format.

use bytes::{Buf, BytesMut};

const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// A malformed COPY stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed binary COPY data at byte {offset}: {problem}")]
pub struct CopyFormatError {
    /// Offset from the start of the COPY data.
    pub offset: u64,
    /// What was wrong.
    pub problem: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Tuples,
    Done,
}

/// Parses binary COPY data fed in arbitrary chunks.
#[derive(Debug)]
pub struct CopyBinaryDecoder {
    buffer: BytesMut,
    /// Bytes consumed before `buffer`'s start.
    consumed: u64,
    parser: Parser,
}

/// Where the parse is, apart from the bytes: kept beside the buffer so that it can parse
/// the buffer or a chunk of its caller's alike.
#[derive(Debug)]
struct Parser {
    state: State,
    expected_fields: Option<usize>,
    /// The current row's field spans (kept to reuse the allocation).
    spans: Vec<Option<FieldSpan>>,
}

impl CopyBinaryDecoder {
    /// A decoder for rows of `expected_fields` columns (checked per row when given).
    pub fn new(expected_fields: Option<usize>) -> Self {
        CopyBinaryDecoder {
            buffer: BytesMut::new(),
            consumed: 0,
            parser: Parser {
                state: State::Header,
                expected_fields,
                spans: Vec::new(),
            },
        }
    }

    /// Adds received bytes.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// Whether the end-of-data trailer was seen.
    pub fn is_done(&self) -> bool {
        self.parser.state == State::Done
    }

    /// Whether unparsed bytes remain (after `is_done`, trailing garbage).
    pub fn has_pending_bytes(&self) -> bool {
        !self.buffer.is_empty()
    }

    fn advance(&mut self, n: usize) {
        self.consumed += n as u64;
        self.buffer.advance(n);
    }

    /// Hands the next complete row to `read` — its bytes and each field's span in them
    /// (`None`: NULL; [`field`] reads one) — and returns what `read` made; `Ok(None)` when
    /// more bytes are needed or the data ended.
    ///
    /// The fields are read where they were buffered: no allocation per row or field, and
    /// no reference count on the receive buffer that rows handed to another thread would
    /// have to give back (a contended counter once cost a seventh of a snapshot's CPU).
    pub fn next_row_with<T>(
        &mut self,
        read: impl FnOnce(&[u8], &[Option<FieldSpan>]) -> T,
    ) -> Result<Option<T>, CopyFormatError> {
        loop {
            match self.parser.parse(self.consumed, &self.buffer)? {
                Parsed::NeedMore => return Ok(None),
                Parsed::Skip(len) => self.advance(len),
                Parsed::Row(len) => {
                    let row = self.buffer.get(..len).unwrap_or_default();
                    let made = read(row, &self.parser.spans);
                    self.advance(len);
                    return Ok(Some(made));
                }
            }
        }
    }

    /// Parses `chunk` after whatever earlier chunks left unparsed, handing every complete
    /// row to `on_row` as [`Self::next_row_with`] does, and keeps an incomplete last row
    /// for the next chunk. With nothing left over — PostgreSQL sends each row in a
    /// CopyData message of its own — the rows are read in `chunk` itself, not copied
    /// into the decoder first. A malformed stream is `format_error`'s error; the first
    /// error of `on_row` stops the parse and is returned. Either way what was not
    /// consumed stays, as if fed (see `has_pending_bytes`).
    pub fn decode<E>(
        &mut self,
        chunk: &[u8],
        on_row: impl FnMut(&[u8], &[Option<FieldSpan>]) -> Result<(), E>,
        format_error: impl Fn(CopyFormatError) -> E,
    ) -> Result<(), E> {
        if self.buffer.is_empty() {
            let (used, result) = self.parser.rows(self.consumed, chunk, on_row, format_error);
            self.consumed += used as u64;
            self.feed(chunk.get(used..).unwrap_or_default());
            result
        } else {
            self.feed(chunk);
            let (used, result) =
                self.parser
                    .rows(self.consumed, &self.buffer, on_row, format_error);
            self.advance(used);
            result
        }
    }
}

/// What the bytes at the start of a buffer hold.
enum Parsed {
    /// An incomplete header or row, or the data ended: nothing to consume yet.
    NeedMore,
    /// The header or the end-of-data trailer, this many bytes (the state moved on).
    Skip(usize),
    /// A row of this many bytes, its fields' spans in `spans`.
    Row(usize),
}

impl Parser {
    /// Parses the rows at the start of `buf`, which lies `consumed` bytes into the COPY
    /// data, handing each to `on_row`, up to an incomplete one, the end of the data or
    /// the first error. Returns how many bytes were consumed (a row `on_row` refused
    /// included) and the error.
    fn rows<E>(
        &mut self,
        consumed: u64,
        buf: &[u8],
        mut on_row: impl FnMut(&[u8], &[Option<FieldSpan>]) -> Result<(), E>,
        format_error: impl Fn(CopyFormatError) -> E,
    ) -> (usize, Result<(), E>) {
        let mut used = 0;
        loop {
            let rest = buf.get(used..).unwrap_or_default();
            let parsed = match self.parse(consumed + used as u64, rest) {
                Ok(parsed) => parsed,
                Err(e) => return (used, Err(format_error(e))),
            };
            match parsed {
                Parsed::NeedMore => return (used, Ok(())),
                Parsed::Skip(len) => used += len,
                Parsed::Row(len) => {
                    used += len;
                    if let Err(e) = on_row(rest.get(..len).unwrap_or_default(), &self.spans) {
                        return (used, Err(e));
                    }
                }
            }
        }
    }

    /// Parses the start of `buf`, which lies `consumed` bytes into the COPY data (for
    /// error offsets): the header in state `Header`, a row or the trailer in state
    /// `Tuples`.
    fn parse(&mut self, consumed: u64, buf: &[u8]) -> Result<Parsed, CopyFormatError> {
        let error = |at: usize, problem: String| CopyFormatError {
            offset: consumed + at as u64,
            problem,
        };
        let spans = &mut self.spans;
        match self.state {
            State::Done => Ok(Parsed::NeedMore),
            State::Header => {
                if buf.len() < SIGNATURE.len() + 8 {
                    return Ok(Parsed::NeedMore);
                }
                if buf.get(..SIGNATURE.len()) != Some(&SIGNATURE[..]) {
                    return Err(error(0, "missing PGCOPY signature".into()));
                }
                let mut rest = buf.get(SIGNATURE.len()..).unwrap_or_default();
                let _flags = rest.get_i32();
                let ext = rest.get_i32();
                let Ok(ext) = usize::try_from(ext) else {
                    return Err(error(15, "negative header extension length".into()));
                };
                let header_len = SIGNATURE.len() + 8 + ext;
                if buf.len() < header_len {
                    return Ok(Parsed::NeedMore);
                }
                self.state = State::Tuples;
                Ok(Parsed::Skip(header_len))
            }
            State::Tuples => {
                let Some(&[high, low]) = buf.get(..2) else {
                    return Ok(Parsed::NeedMore);
                };
                let count = i16::from_be_bytes([high, low]);
                if count == -1 {
                    self.state = State::Done;
                    return Ok(Parsed::Skip(2));
                }
                let Ok(count) = usize::try_from(count) else {
                    return Err(error(0, format!("negative field count {count}")));
                };
                if let Some(expected) = self.expected_fields
                    && expected != count
                {
                    return Err(error(
                        0,
                        format!("row has {count} fields, expected {expected}"),
                    ));
                }
                let mut offset = 2;
                spans.clear();
                for _ in 0..count {
                    let Some(&[a, b, c, d]) = buf.get(offset..offset + 4) else {
                        return Ok(Parsed::NeedMore);
                    };
                    let len = i32::from_be_bytes([a, b, c, d]);
                    offset += 4;
                    if len == -1 {
                        spans.push(None);
                        continue;
                    }
                    let Ok(len) = usize::try_from(len) else {
                        return Err(error(offset - 4, format!("negative field length {len}")));
                    };
                    if buf.len() < offset + len {
                        return Ok(Parsed::NeedMore);
                    }
                    spans.push(Some(FieldSpan { start: offset, len }));
                    offset += len;
                }
                Ok(Parsed::Row(offset))
            }
        }
    }
}

/// Where one field lies in its row's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpan {
    start: usize,
    len: usize,
}

impl FieldSpan {
    /// Where the field lies in a buffer whose row starts at `row_start`.
    pub fn at(self, row_start: usize) -> std::ops::Range<usize> {
        let start = row_start.saturating_add(self.start);
        start..start.saturating_add(self.len)
    }
}

/// The bytes of the field at `span` in `row` (empty should the span not lie in it).
pub fn field(row: &[u8], span: FieldSpan) -> &[u8] {
    row.get(span.start..span.start + span.len)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use proptest::prelude::*;

    type Fields = Vec<Option<Vec<u8>>>;

    /// The next row's fields, copied out.
    fn next_row(decoder: &mut CopyBinaryDecoder) -> Result<Option<Fields>, CopyFormatError> {
        decoder.next_row_with(|row, spans| {
            spans
                .iter()
                .map(|span| span.map(|s| field(row, s).to_vec()))
                .collect()
        })
    }

    fn encode(rows: &[Vec<Option<Vec<u8>>>]) -> Vec<u8> {
        let mut out = BytesMut::new();
        out.put_slice(SIGNATURE);
        out.put_i32(0);
        out.put_i32(0);
        for row in rows {
            out.put_i16(row.len() as i16);
            for field in row {
                match field {
                    None => out.put_i32(-1),
                    Some(f) => {
                        out.put_i32(f.len() as i32);
                        out.put_slice(f);
                    }
                }
            }
        }
        out.put_i16(-1);
        out.to_vec()
    }

    proptest! {
        #[test]
        fn any_chunking_gives_back_the_rows(
            rows in prop::collection::vec(prop::collection::vec(prop::option::of(prop::collection::vec(any::<u8>(), 0..20)), 3), 0..20),
            chunk in 1usize..40,
        ) {
            let data = encode(&rows);
            let mut decoder = CopyBinaryDecoder::new(Some(3));
            let mut got = Vec::new();
            for piece in data.chunks(chunk) {
                decoder.feed(piece);
                while let Some(row) = next_row(&mut decoder).unwrap() {
                    got.push(row);
                }
            }
            prop_assert!(decoder.is_done());
            prop_assert!(!decoder.has_pending_bytes());
            prop_assert_eq!(got, rows);
        }

        #[test]
        fn decoding_in_place_gives_back_the_rows_whatever_the_chunks(
            rows in prop::collection::vec(prop::collection::vec(prop::option::of(prop::collection::vec(any::<u8>(), 0..20)), 3), 0..20),
            cuts in prop::collection::vec(0usize..400, 0..12),
            per_row in any::<bool>(),
        ) {
            let data = encode(&rows);
            // Either one chunk per row (as PostgreSQL sends them: every row is read in
            // place) or arbitrary cuts (rows split across chunks go through the buffer).
            let mut bounds: Vec<usize> = if per_row {
                let mut at = 19; // the header
                let mut ends = vec![at];
                for row in &rows {
                    at += 2 + row.iter().map(|f| 4 + f.as_ref().map_or(0, Vec::len)).sum::<usize>();
                    ends.push(at);
                }
                ends
            } else {
                cuts.into_iter().filter(|&c| c < data.len()).collect()
            };
            bounds.push(data.len());
            bounds.sort_unstable();
            bounds.dedup();
            let mut decoder = CopyBinaryDecoder::new(Some(3));
            let mut got: Vec<Fields> = Vec::new();
            let mut start = 0;
            for end in bounds {
                decoder
                    .decode(
                        &data[start..end],
                        |row, spans| {
                            got.push(spans.iter().map(|s| s.map(|s| field(row, s).to_vec())).collect());
                            Ok::<(), CopyFormatError>(())
                        },
                        |e| e,
                    )
                    .unwrap();
                start = end;
            }
            prop_assert!(decoder.is_done());
            prop_assert!(!decoder.has_pending_bytes());
            prop_assert_eq!(got, rows);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut decoder = CopyBinaryDecoder::new(None);
            let mut with_sig = SIGNATURE.to_vec();
            with_sig.extend_from_slice(&data);
            decoder.feed(&with_sig);
            for _ in 0..50 {
                match next_row(&mut decoder) {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
        }
    }

    #[test]
    fn decoding_stops_at_the_first_error_of_the_row_handler_or_the_format() {
        let data = encode(&[vec![None], vec![None], vec![None]]);
        let mut decoder = CopyBinaryDecoder::new(Some(1));
        let mut seen = 0;
        let stopped = decoder.decode(
            &data,
            |_, _| {
                seen += 1;
                if seen == 2 {
                    Err("second row refused")
                } else {
                    Ok(())
                }
            },
            |_| "format",
        );
        assert_eq!((stopped, seen), (Err("second row refused"), 2));
        let mut decoder = CopyBinaryDecoder::new(Some(2));
        let wrong = decoder.decode(&data, |_, _| Ok(()), |e| e.problem);
        assert!(wrong.unwrap_err().contains("expected 2"));
    }

    #[test]
    fn wrong_field_count_and_signature_are_errors() {
        let data = encode(&[vec![None, None]]);
        let mut decoder = CopyBinaryDecoder::new(Some(3));
        decoder.feed(&data);
        assert!(
            decoder
                .next_row_with(|_, _| ())
                .unwrap_err()
                .problem
                .contains("expected 3")
        );
        let mut decoder = CopyBinaryDecoder::new(None);
        decoder.feed(b"NOTCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0");
        assert!(next_row(&mut decoder).is_err());
    }
}
