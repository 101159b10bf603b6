//! TupleData: the row values inside Insert, Update and Delete, as zero-copy slices of the
//! payload. Turning them into typed values is the type decoders' job, given the column's type
//! OID from the Relation message.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::BytesView;
use crate::protocol::error::{DecodeError, DecodeProblem, EncodeError};
use crate::protocol::reader::Reader;
use crate::protocol::writer::{put_len_i16, put_len_i32};

const NULL: u8 = b'n';
const UNCHANGED_TOAST: u8 = b'u';
const TEXT: u8 = b't';
const BINARY: u8 = b'b';

/// One column's value as pgoutput sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnValue {
    /// `n`: SQL NULL.
    Null,
    /// `u`: an unchanged TOASTed value that Postgres did not send. Not NULL: the value exists,
    /// we just were not told it.
    UnchangedToast,
    /// `t`: the type's text output (the bytes are in the database encoding).
    Text(Bytes),
    /// `b`: the type's binary send format (only with the `binary` option).
    Binary(Bytes),
}

impl ColumnValue {
    /// The value's bytes, for `Text` and `Binary`.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            ColumnValue::Text(b) | ColumnValue::Binary(b) => Some(b),
            ColumnValue::Null | ColumnValue::UnchangedToast => None,
        }
    }
}

/// The values of one row, in the order of the Relation's columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TupleData {
    /// One value per published column.
    pub columns: Vec<ColumnValue>,
}

impl TupleData {
    /// A tuple of these values.
    pub fn new(columns: Vec<ColumnValue>) -> Self {
        TupleData { columns }
    }
}

impl From<Vec<ColumnValue>> for TupleData {
    fn from(columns: Vec<ColumnValue>) -> Self {
        TupleData { columns }
    }
}

/// One column's value as pgoutput sent it, borrowed from the message (see [`TupleRef`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnRef<'a> {
    /// `n`: SQL NULL.
    Null,
    /// `u`: an unchanged TOASTed value that Postgres did not send.
    UnchangedToast,
    /// `t`: the type's text output (in the database encoding).
    Text(BytesView<'a>),
    /// `b`: the type's binary send format.
    Binary(BytesView<'a>),
}

impl ColumnRef<'_> {
    /// The owned form, sharing the message's buffer.
    pub fn to_column_value(&self) -> ColumnValue {
        match self {
            ColumnRef::Null => ColumnValue::Null,
            ColumnRef::UnchangedToast => ColumnValue::UnchangedToast,
            ColumnRef::Text(v) => ColumnValue::Text(v.to_bytes()),
            ColumnRef::Binary(v) => ColumnValue::Binary(v.to_bytes()),
        }
    }
}

/// A row's values inside a decoded message, without a `Bytes` per column: what
/// [`super::PgOutputDecoder::decode_borrowed`] returns, for consumers that turn columns
/// into values at once and keep bytes only for some of them.
///
/// Its layout was checked when the message was decoded, so iterating cannot fail.
#[derive(Clone, Copy)]
pub struct TupleRef<'a> {
    payload: &'a Bytes,
    /// Offset of the first column's kind byte.
    start: usize,
    /// Offset just past the last column.
    end: usize,
    count: usize,
}

impl<'a> TupleRef<'a> {
    /// How many columns the tuple has.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the tuple has no columns.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The columns, in the order of the Relation's columns.
    pub fn columns(&self) -> TupleColumns<'a> {
        TupleColumns {
            payload: self.payload,
            pos: self.start,
            end: self.end,
            remaining: self.count,
        }
    }

    /// The owned form, sharing the message's buffer.
    pub fn to_tuple_data(&self) -> TupleData {
        TupleData {
            columns: self.columns().map(|c| c.to_column_value()).collect(),
        }
    }
}

impl PartialEq for TupleRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.columns().eq(other.columns())
    }
}

impl Eq for TupleRef<'_> {}

impl std::fmt::Debug for TupleRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.columns()).finish()
    }
}

/// The columns of a [`TupleRef`].
#[derive(Debug, Clone)]
pub struct TupleColumns<'a> {
    payload: &'a Bytes,
    pos: usize,
    end: usize,
    remaining: usize,
}

impl<'a> Iterator for TupleColumns<'a> {
    type Item = ColumnRef<'a>;

    fn next(&mut self) -> Option<ColumnRef<'a>> {
        if self.remaining == 0 || self.pos >= self.end {
            return None;
        }
        self.remaining -= 1;
        let kind = *self.payload.get(self.pos)?;
        let data_at = self.pos + 5;
        let value = |payload: &'a Bytes, pos: usize| -> Option<(BytesView<'a>, usize)> {
            let len = payload.get(pos + 1..data_at)?;
            let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
            let end = data_at.checked_add(len)?;
            Some((BytesView::new(payload, data_at..end)?, end))
        };
        let (column, next) = match kind {
            NULL => (ColumnRef::Null, self.pos + 1),
            UNCHANGED_TOAST => (ColumnRef::UnchangedToast, self.pos + 1),
            TEXT => {
                let (view, end) = value(self.payload, self.pos)?;
                (ColumnRef::Text(view), end)
            }
            BINARY => {
                let (view, end) = value(self.payload, self.pos)?;
                (ColumnRef::Binary(view), end)
            }
            // Checked when the tuple was decoded.
            _ => return None,
        };
        self.pos = next;
        Some(column)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for TupleColumns<'_> {}

/// How a message decoder represents tuples: owned ([`TupleData`]) or borrowed
/// ([`TupleRef`]). Both are read by the same layout checks.
pub(crate) trait TupleRepr<'a>: Sized {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError>;
}

impl<'a> TupleRepr<'a> for TupleRef<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        decode_tuple_ref(r)
    }
}

impl<'a> TupleRepr<'a> for TupleData {
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        decode_tuple_ref(r).map(|t| t.to_tuple_data())
    }
}

/// Reads an Int16 column count and that many columns, checking the layout.
pub(crate) fn decode_tuple_ref<'a>(r: &mut Reader<'a>) -> Result<TupleRef<'a>, DecodeError> {
    let count = r.len_i16()?;
    let start = r.offset();
    for _ in 0..count {
        let at = r.offset();
        match r.u8()? {
            NULL | UNCHANGED_TOAST => {}
            TEXT | BINARY => {
                let len = r.len_i32()?;
                r.skip(len)?;
            }
            other => return Err(r.error_at(at, DecodeProblem::UnknownColumnKind(other))),
        }
    }
    Ok(TupleRef {
        payload: r.buffer(),
        start,
        end: r.offset(),
        count,
    })
}

/// Writes the tuple exactly as pgoutput would.
pub(crate) fn encode_tuple(tuple: &TupleData, out: &mut BytesMut) -> Result<(), EncodeError> {
    put_len_i16(out, tuple.columns.len(), "tuple column count")?;
    for value in &tuple.columns {
        match value {
            ColumnValue::Null => out.put_u8(NULL),
            ColumnValue::UnchangedToast => out.put_u8(UNCHANGED_TOAST),
            ColumnValue::Text(b) => {
                out.put_u8(TEXT);
                put_len_i32(out, b.len(), "text column value length")?;
                out.put_slice(b);
            }
            ColumnValue::Binary(b) => {
                out.put_u8(BINARY);
                put_len_i32(out, b.len(), "binary column value length")?;
                out.put_slice(b);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::error::MessageKind;

    fn decode(raw: &'static [u8]) -> Result<TupleData, DecodeError> {
        let buf = Bytes::from_static(raw);
        let mut r = Reader::new(&buf, MessageKind::Insert);
        TupleData::read(&mut r)
    }

    #[test]
    fn borrowed_and_owned_tuples_agree() {
        let buf = Bytes::from_static(b"\x00\x04nu\x74\x00\x00\x00\x0242b\x00\x00\x00\x01\xff");
        let borrowed = decode_tuple_ref(&mut Reader::new(&buf, MessageKind::Insert)).unwrap();
        assert_eq!(borrowed.len(), 4);
        assert_eq!(borrowed.columns().len(), 4);
        let kinds: Vec<_> = borrowed.columns().collect();
        assert!(matches!(kinds[2], ColumnRef::Text(v) if v.as_slice() == b"42"));
        assert_eq!(
            borrowed.to_tuple_data(),
            decode(b"\x00\x04nu\x74\x00\x00\x00\x0242b\x00\x00\x00\x01\xff").unwrap()
        );
    }

    #[test]
    fn all_four_column_kinds_decode() {
        let tuple = decode(b"\x00\x04nu\x74\x00\x00\x00\x0242b\x00\x00\x00\x01\xff").unwrap();
        assert_eq!(
            tuple.columns,
            vec![
                ColumnValue::Null,
                ColumnValue::UnchangedToast,
                ColumnValue::Text(Bytes::from_static(b"42")),
                ColumnValue::Binary(Bytes::from_static(b"\xff")),
            ]
        );
    }

    #[test]
    fn unknown_column_kind_names_its_offset() {
        let err = decode(b"\x00\x02nx").unwrap_err();
        assert_eq!(
            (err.offset, err.problem),
            (3, DecodeProblem::UnknownColumnKind(b'x'))
        );
    }

    #[test]
    fn negative_text_length_is_rejected() {
        let err = decode(b"\x00\x01t\xff\xff\xff\xff").unwrap_err();
        assert_eq!(
            (err.offset, err.problem),
            (3, DecodeProblem::NegativeLength(-1))
        );
    }

    #[test]
    fn negative_column_count_is_rejected() {
        let err = decode(b"\xff\xfe").unwrap_err();
        assert_eq!(
            (err.offset, err.problem),
            (0, DecodeProblem::NegativeLength(-2))
        );
    }

    #[test]
    fn too_many_columns_cannot_be_encoded() {
        let tuple = TupleData::new(vec![ColumnValue::Null; 40_000]);
        let err = encode_tuple(&tuple, &mut BytesMut::new()).unwrap_err();
        assert!(matches!(err, EncodeError::TooLarge { len: 40_000, .. }));
    }
}
