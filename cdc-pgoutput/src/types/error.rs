//! Errors of type decoding and encoding: which type, which format, what was wrong, and
//! the offending input.

use std::fmt::{self, Write as _};

use cdc_core::{Text, TypeOid};

use super::registry::TypeInfo;

/// Longest excerpt of the offending input an error keeps, in bytes of input.
const EXCERPT_LIMIT: usize = 64;

/// The two formats pgoutput sends column values in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// The type's text output function (tuple column kind `t`).
    Text,
    /// The type's binary send function (tuple column kind `b`, the `binary` option of
    /// Postgres 14+).
    Binary,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Text => "text",
            Format::Binary => "binary",
        })
    }
}

/// A column value that could not be decoded into a [`cdc_core::Value`].
///
/// Names the type (OID and, when known, its qualified name), the format, what was wrong,
/// and an excerpt of the input (text shown as text, binary as hex, both truncated).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot decode {format} value of type {} (oid {type_oid}): {reason}; input: {input}",
    type_name.as_deref().unwrap_or("<unknown>")
)]
pub struct TypeDecodeError {
    /// OID of the type being decoded.
    pub type_oid: TypeOid,
    /// Its qualified name, when known.
    pub type_name: Option<Text>,
    /// The format the value arrived in.
    pub format: Format,
    /// What was wrong.
    pub reason: DecodeErrorKind,
    /// An excerpt of the offending input, ready to print.
    pub input: String,
}

/// What was wrong with a value; see [`TypeDecodeError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeErrorKind {
    /// The value is not valid UTF-8 (pgcdc needs a UTF-8 database for text values).
    #[error("invalid UTF-8")]
    InvalidUtf8,
    /// A binary value of a fixed-size type has the wrong length.
    #[error("expected {expected} bytes, got {actual}")]
    WrongLength {
        /// The length the type's send function produces.
        expected: usize,
        /// The length received.
        actual: usize,
    },
    /// A variable-length binary value ended early or has bytes left over.
    #[error("binary value {0}")]
    Truncated(&'static str),
    /// The text does not have the syntax Postgres's output function produces.
    #[error("invalid syntax: expected {0}")]
    Syntax(&'static str),
    /// Well-formed, but outside what the type (or `Value`) can hold.
    #[error("out of range: {0}")]
    OutOfRange(&'static str),
    /// A field of a binary value has a value its send function never produces.
    #[error("invalid binary value: {0}")]
    InvalidBinary(&'static str),
    /// A binary `jsonb` value with a format version other than 1.
    #[error("unsupported jsonb binary format version {0} (only version 1 exists)")]
    UnsupportedJsonbVersion(u8),
    /// An array literal or binary array whose structure is wrong.
    #[error("malformed array: {0}")]
    MalformedArray(&'static str),
    /// A binary array whose element type differs from the column's element type.
    #[error("array element type is oid {actual}, expected oid {expected}")]
    WrongElementType {
        /// The column's element type.
        expected: TypeOid,
        /// The element type in the array header.
        actual: TypeOid,
    },
    /// An array element could not be decoded.
    #[error("array element: {0}")]
    Element(Box<TypeDecodeError>),
}

impl TypeDecodeError {
    /// The error for `input`, a value of type `ty` in `format`.
    pub(crate) fn new(
        ty: &TypeInfo,
        format: Format,
        reason: DecodeErrorKind,
        input: &[u8],
    ) -> Self {
        TypeDecodeError {
            type_oid: ty.oid,
            type_name: ty.name.clone(),
            format,
            reason,
            input: excerpt(format, input),
        }
    }
}

/// Text as a quoted, escaped string, binary as hex; both cut at [`EXCERPT_LIMIT`] bytes
/// with the total length noted.
fn excerpt(format: Format, input: &[u8]) -> String {
    let shown = input.get(..EXCERPT_LIMIT).unwrap_or(input);
    let mut out = String::with_capacity(shown.len() * 2 + 24);
    match format {
        Format::Text => {
            let _ = write!(out, "{:?}", String::from_utf8_lossy(shown));
        }
        Format::Binary => {
            out.push_str("0x");
            for byte in shown {
                let _ = write!(out, "{byte:02x}");
            }
        }
    }
    if shown.len() < input.len() {
        let _ = write!(out, "… ({} bytes in all)", input.len());
    }
    out
}

/// A value that [`encode_binary`](super::encode_binary) cannot write as the given type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot encode a {value_kind} value as type {} (oid {type_oid}): {reason}",
    type_name.as_deref().unwrap_or("<unknown>")
)]
pub struct TypeEncodeError {
    /// OID of the target type.
    pub type_oid: TypeOid,
    /// Its qualified name, when known.
    pub type_name: Option<Text>,
    /// [`cdc_core::Value::kind_name`] of the value.
    pub value_kind: &'static str,
    /// Why it cannot be encoded.
    pub reason: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_names_type_reason_and_input() {
        let ty = TypeInfo::builtin(23);
        let err = TypeDecodeError::new(
            &ty,
            Format::Text,
            DecodeErrorKind::Syntax("a decimal integer"),
            b"12x",
        );
        assert_eq!(
            err.to_string(),
            "cannot decode text value of type pg_catalog.int4 (oid 23): invalid syntax: \
             expected a decimal integer; input: \"12x\""
        );
    }

    #[test]
    fn long_inputs_are_cut() {
        let ty = TypeInfo::builtin(17);
        let input = vec![0xabu8; 1000];
        let err = TypeDecodeError::new(
            &ty,
            Format::Binary,
            DecodeErrorKind::Truncated("ends early"),
            &input,
        );
        assert!(err.input.starts_with("0xabab"));
        assert!(
            err.input.ends_with("… (1000 bytes in all)"),
            "{}",
            err.input
        );
        assert!(err.input.len() < 200);
    }
}
