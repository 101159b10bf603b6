//! TupleData: the row values inside Insert, Update and Delete, as zero-copy slices of the
//! payload. Turning them into typed values is the type decoders' job, given the column's type
//! OID from the Relation message.

use bytes::{BufMut, Bytes, BytesMut};

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

/// Reads an Int16 column count and that many columns.
pub(crate) fn decode_tuple(r: &mut Reader<'_>) -> Result<TupleData, DecodeError> {
    let count = r.len_i16()?;
    // Every column takes at least one byte, so a lying count cannot make us reserve more
    // than the payload could hold.
    let mut columns = Vec::with_capacity(count.min(r.remaining()));
    for _ in 0..count {
        let at = r.offset();
        let value = match r.u8()? {
            NULL => ColumnValue::Null,
            UNCHANGED_TOAST => ColumnValue::UnchangedToast,
            TEXT => {
                let len = r.len_i32()?;
                ColumnValue::Text(r.bytes(len)?)
            }
            BINARY => {
                let len = r.len_i32()?;
                ColumnValue::Binary(r.bytes(len)?)
            }
            other => return Err(r.error_at(at, DecodeProblem::UnknownColumnKind(other))),
        };
        columns.push(value);
    }
    Ok(TupleData { columns })
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
        decode_tuple(&mut r)
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
