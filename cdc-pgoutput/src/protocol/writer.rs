//! Checked writes for the fields an encoder can get wrong: strings that must not contain NUL,
//! and lengths or counts that must fit their wire integer.

use bytes::{BufMut, BytesMut};

use super::error::EncodeError;

/// Writes `s` followed by its NUL terminator.
pub(crate) fn put_cstr(
    out: &mut BytesMut,
    s: &str,
    field: &'static str,
) -> Result<(), EncodeError> {
    if memchr::memchr(0, s.as_bytes()).is_some() {
        return Err(EncodeError::NulInString { field });
    }
    out.put_slice(s.as_bytes());
    out.put_u8(0);
    Ok(())
}

/// Writes `len` as an Int32 length or count.
pub(crate) fn put_len_i32(
    out: &mut BytesMut,
    len: usize,
    field: &'static str,
) -> Result<(), EncodeError> {
    let n = i32::try_from(len).map_err(|_| EncodeError::TooLarge {
        field,
        len,
        max: i32::MAX as usize,
    })?;
    out.put_i32(n);
    Ok(())
}

/// Writes `len` as an Int16 count.
pub(crate) fn put_len_i16(
    out: &mut BytesMut,
    len: usize,
    field: &'static str,
) -> Result<(), EncodeError> {
    let n = i16::try_from(len).map_err(|_| EncodeError::TooLarge {
        field,
        len,
        max: i16::MAX as usize,
    })?;
    out.put_i16(n);
    Ok(())
}

/// Runs `write`, and on error truncates `out` back to where it was, so a failed encode leaves
/// no half-written message behind.
pub(crate) fn atomically(
    out: &mut BytesMut,
    write: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let result = write(out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}
