//! Arrays: the text literal `array_out` prints (`{…}` nested per dimension, `NULL`,
//! double quotes with backslash escapes, `[lb:ub]=` when a lower bound is not 1) and the
//! `array_send` binary format. Elements are decoded by the element type's decoder.

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::BytesView;
use cdc_core::{Array, ArrayDim, Value};

use super::error::{DecodeErrorKind as Kind, Format, TypeDecodeError};
use super::registry::{ArrayType, TypeInfo};

/// Decodes one element of an array in the array's format (the caller's own value decoder:
/// an element may itself be of any type).
pub(crate) type ElementDecoder = fn(&TypeInfo, BytesView<'_>) -> Result<Value, Kind>;

/// Most dimensions an array can have (`MAXDIM`).
pub(crate) const MAX_DIMS: usize = 6;
/// Most elements an array can have (`MaxArraySize`).
const MAX_ELEMENTS: u64 = 0x3FFF_FFFF / 8;

/// White space as `array_in` skips it (`scanner_isspace`).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0B' | b'\x0C')
}

fn element_error(element: &TypeInfo, format: Format, reason: Kind, input: &[u8]) -> Kind {
    Kind::Element(Box::new(TypeDecodeError::new(
        element, format, reason, input,
    )))
}

/// The `[lb:ub]` decorations in front of `=`, as (lower, upper) pairs.
fn decoration(bytes: &[u8], pos: &mut usize) -> Result<([(i64, i64); MAX_DIMS], usize), Kind> {
    let malformed = Kind::MalformedArray("dimension decoration must look like [1:3][0:1]=");
    let mut dims = [(0i64, 0i64); MAX_DIMS];
    let mut count = 0;
    while bytes.get(*pos) == Some(&b'[') {
        *pos += 1;
        let first = signed(bytes, pos).ok_or(malformed.clone())?;
        let (lower, upper) = if bytes.get(*pos) == Some(&b':') {
            *pos += 1;
            (first, signed(bytes, pos).ok_or(malformed.clone())?)
        } else {
            (1, first)
        };
        if bytes.get(*pos) != Some(&b']') {
            return Err(malformed);
        }
        *pos += 1;
        let slot = dims
            .get_mut(count)
            .ok_or(Kind::MalformedArray("more than 6 dimensions"))?;
        *slot = (lower, upper);
        count += 1;
    }
    if bytes.get(*pos) != Some(&b'=') {
        return Err(malformed);
    }
    *pos += 1;
    Ok((dims, count))
}

/// An optionally signed decimal number of at most 10 digits.
fn signed(bytes: &[u8], pos: &mut usize) -> Option<i64> {
    let negative = match bytes.get(*pos) {
        Some(b'-') => {
            *pos += 1;
            true
        }
        Some(b'+') => {
            *pos += 1;
            false
        }
        _ => false,
    };
    let digits = bytes
        .get(*pos..)?
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > 10 {
        return None;
    }
    let value = bytes
        .get(*pos..*pos + digits)?
        .iter()
        .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
    *pos += digits;
    Some(if negative { -value } else { value })
}

/// A double-quoted element starting at `pos` (on the quote); shares `data` unless it has
/// escapes.
fn quoted_element(data: &Bytes, pos: &mut usize) -> Result<Bytes, Kind> {
    let unterminated = || Kind::MalformedArray("unterminated quoted element");
    let start = *pos + 1;
    let rest = data.get(start..).ok_or_else(unterminated)?;
    let stop = memchr::memchr2(b'"', b'\\', rest).ok_or_else(unterminated)?;
    if rest.get(stop) == Some(&b'"') {
        *pos = start + stop + 1;
        return Ok(data.slice(start..start + stop));
    }
    let mut owned = Vec::with_capacity(rest.len().min(64));
    let mut i = 0;
    loop {
        match rest.get(i) {
            None => return Err(unterminated()),
            Some(b'"') => break,
            Some(b'\\') => {
                owned.push(*rest.get(i + 1).ok_or_else(unterminated)?);
                i += 2;
            }
            Some(&b) => {
                owned.push(b);
                i += 1;
            }
        }
    }
    *pos = start + i + 1;
    Ok(Bytes::from(owned))
}

/// An unquoted element starting at `pos`: up to the delimiter or `}`, trailing white
/// space dropped, backslash escapes honoured. `None` for an unescaped `NULL`.
fn unquoted_element(data: &Bytes, pos: &mut usize, delimiter: u8) -> Result<Option<Bytes>, Kind> {
    let start = *pos;
    let mut i = start;
    // End of the element without trailing white space: in `data` while nothing was
    // escaped, in `owned` after.
    let mut raw_end = start;
    let mut owned: Option<Vec<u8>> = None;
    let mut owned_end = 0;
    loop {
        let Some(&b) = data.get(i) else {
            return Err(Kind::MalformedArray("unexpected end of input"));
        };
        if b == delimiter || b == b'}' {
            break;
        }
        match b {
            b'{' | b'"' => {
                return Err(Kind::MalformedArray("unexpected { or \" inside an element"));
            }
            b'\\' => {
                let escaped = *data
                    .get(i + 1)
                    .ok_or(Kind::MalformedArray("unexpected end of input"))?;
                let buf = owned.get_or_insert_with(|| {
                    data.get(start..i).map(<[u8]>::to_vec).unwrap_or_default()
                });
                buf.push(escaped);
                owned_end = buf.len();
                i += 2;
            }
            _ => {
                if let Some(buf) = owned.as_mut() {
                    buf.push(b);
                    if !is_space(b) {
                        owned_end = buf.len();
                    }
                } else if !is_space(b) {
                    raw_end = i + 1;
                }
                i += 1;
            }
        }
    }
    *pos = i;
    match owned {
        Some(mut buf) => {
            buf.truncate(owned_end);
            Ok(Some(Bytes::from(buf)))
        }
        None if raw_end == start => Err(Kind::MalformedArray("empty unquoted element")),
        None => {
            let raw = data.slice(start..raw_end);
            Ok((!raw.eq_ignore_ascii_case(b"NULL")).then_some(raw))
        }
    }
}

/// Parses `array_out`'s text, decoding each element with the element type's text
/// decoder.
pub(crate) fn array_from_text(
    array: &ArrayType,
    data: &Bytes,
    decode_element: ElementDecoder,
) -> Result<Array, Kind> {
    let bytes: &[u8] = data;
    let delimiter = array.delimiter;
    let mut pos = 0;
    let skip_space = |pos: &mut usize| {
        while bytes.get(*pos).is_some_and(|&b| is_space(b)) {
            *pos += 1;
        }
    };
    skip_space(&mut pos);
    let (decorated, n_decorated) = if bytes.get(pos) == Some(&b'[') {
        let d = decoration(bytes, &mut pos)?;
        skip_space(&mut pos);
        (d.0, Some(d.1))
    } else {
        ([(0, 0); MAX_DIMS], None)
    };
    if bytes.get(pos) != Some(&b'{') {
        return Err(Kind::MalformedArray("must start with {"));
    }
    pos += 1;

    // counts[d]: elements (innermost level) or sub-arrays seen so far at nesting level d;
    // lens[d]: the length every level-d sub-array must have, once the first one closed.
    let mut depth = 1usize;
    let mut counts = [0u32; MAX_DIMS];
    let mut lens: [Option<u32>; MAX_DIMS] = [None; MAX_DIMS];
    let mut ndim: Option<usize> = None;
    let mut expect_element = true;
    let mut elements = Vec::new();
    loop {
        skip_space(&mut pos);
        let Some(&b) = bytes.get(pos) else {
            return Err(Kind::MalformedArray("unexpected end of input"));
        };
        match b {
            b'{' => {
                if !expect_element || ndim.is_some_and(|n| depth >= n) {
                    return Err(Kind::MalformedArray("unexpected {"));
                }
                if depth >= MAX_DIMS {
                    return Err(Kind::MalformedArray("more than 6 dimensions"));
                }
                depth += 1;
                if let Some(c) = counts.get_mut(depth - 1) {
                    *c = 0;
                }
                pos += 1;
                continue; // still expecting an element (or a nested `{`)
            }
            b'}' => {
                let count = counts.get(depth - 1).copied().unwrap_or(0);
                pos += 1;
                if expect_element {
                    if count == 0 && depth == 1 && ndim.is_none() {
                        break; // `{}`
                    }
                    return Err(Kind::MalformedArray("unexpected }"));
                }
                if let Some(slot) = lens.get_mut(depth - 1) {
                    match *slot {
                        Some(len) if len != count => {
                            return Err(Kind::MalformedArray(
                                "sub-arrays must have matching dimensions",
                            ));
                        }
                        _ => *slot = Some(count),
                    }
                }
                depth -= 1;
                if depth == 0 {
                    break;
                }
                if let Some(c) = counts.get_mut(depth - 1) {
                    *c = c.saturating_add(1);
                }
            }
            _ if b == delimiter => {
                if expect_element {
                    return Err(Kind::MalformedArray("unexpected delimiter"));
                }
                expect_element = true;
                pos += 1;
                continue;
            }
            _ => {
                if !expect_element {
                    return Err(Kind::MalformedArray("expected a delimiter or }"));
                }
                match ndim {
                    None => ndim = Some(depth),
                    Some(n) if n != depth => {
                        return Err(Kind::MalformedArray(
                            "multidimensional arrays must have sub-arrays of matching dimensions",
                        ));
                    }
                    Some(_) => {}
                }
                let element = if b == b'"' {
                    Some(quoted_element(data, &mut pos)?)
                } else {
                    unquoted_element(data, &mut pos, delimiter)?
                };
                let value = match element {
                    None => Value::Null,
                    Some(text) => decode_element(&array.element, BytesView::whole(&text))
                        .map_err(|e| element_error(&array.element, Format::Text, e, &text))?,
                };
                elements.push(value);
                if let Some(c) = counts.get_mut(depth - 1) {
                    *c = c.saturating_add(1);
                }
            }
        }
        expect_element = false;
    }
    skip_space(&mut pos);
    if pos != bytes.len() {
        return Err(Kind::MalformedArray("junk after the closing }"));
    }

    let ndim = ndim.unwrap_or(0);
    let mut dims = Vec::with_capacity(ndim);
    for d in 0..ndim {
        let len = lens.get(d).copied().flatten().unwrap_or(0);
        dims.push(ArrayDim {
            len,
            lower_bound: 1,
        });
    }
    if let Some(n_decorated) = n_decorated {
        let decorated = decorated.get(..n_decorated).unwrap_or_default();
        if dims.is_empty() {
            if decorated.iter().any(|&(lower, upper)| upper != lower - 1) {
                return Err(Kind::MalformedArray("dimensions do not match the elements"));
            }
        } else {
            if decorated.len() != dims.len() {
                return Err(Kind::MalformedArray("dimensions do not match the elements"));
            }
            for (dim, &(lower, upper)) in dims.iter_mut().zip(decorated) {
                if upper - lower + 1 != i64::from(dim.len) {
                    return Err(Kind::MalformedArray("dimensions do not match the elements"));
                }
                dim.lower_bound = i32::try_from(lower)
                    .ok()
                    .filter(|_| i32::try_from(upper).is_ok())
                    .ok_or(Kind::MalformedArray("array bound out of range"))?;
            }
        }
    }
    Ok(Array {
        element_type: array.element.oid,
        dims,
        elements,
    })
}

/// Big-endian reader over a binary array.
struct Reader<'a> {
    data: &'a Bytes,
    pos: usize,
}

impl Reader<'_> {
    fn i32(&mut self) -> Result<i32, Kind> {
        let bytes = self
            .data
            .get(self.pos..self.pos + 4)
            .ok_or(Kind::Truncated(
                "ends inside the array header or an element length",
            ))?;
        let bytes = <[u8; 4]>::try_from(bytes)
            .map_err(|_| Kind::Truncated("ends inside the array header"))?;
        self.pos += 4;
        Ok(i32::from_be_bytes(bytes))
    }

    fn take(&mut self, len: usize) -> Result<Bytes, Kind> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.data.len())
            .ok_or(Kind::Truncated("ends inside an array element"))?;
        let slice = self.data.slice(self.pos..end);
        self.pos = end;
        Ok(slice)
    }
}

/// `array_send`: ndim, has-null flag, element OID, (length, lower bound) per dimension,
/// then per element an i32 length (-1 for NULL) and the element's own binary form.
pub(crate) fn array_from_binary(
    array: &ArrayType,
    data: &Bytes,
    decode_element: ElementDecoder,
) -> Result<Array, Kind> {
    let mut r = Reader { data, pos: 0 };
    let ndim = r.i32()?;
    let flags = r.i32()?;
    let element_type = r.i32()? as u32;
    let ndim = usize::try_from(ndim)
        .ok()
        .filter(|&n| n <= MAX_DIMS)
        .ok_or(Kind::MalformedArray("number of dimensions must be 0 to 6"))?;
    if flags != 0 && flags != 1 {
        return Err(Kind::MalformedArray("has-null flag must be 0 or 1"));
    }
    if element_type != array.element.oid {
        return Err(Kind::WrongElementType {
            expected: array.element.oid,
            actual: element_type,
        });
    }
    let mut dims = Vec::with_capacity(ndim);
    let mut total: u64 = 1;
    for _ in 0..ndim {
        let len = r.i32()?;
        let lower_bound = r.i32()?;
        let len =
            u32::try_from(len).map_err(|_| Kind::MalformedArray("negative dimension length"))?;
        if i64::from(lower_bound) + i64::from(len) - 1 > i64::from(i32::MAX) {
            return Err(Kind::MalformedArray("upper bound out of range"));
        }
        total = total.saturating_mul(u64::from(len));
        dims.push(ArrayDim { len, lower_bound });
    }
    if total > MAX_ELEMENTS {
        return Err(Kind::MalformedArray("more elements than an array can hold"));
    }
    if ndim == 0 || total == 0 {
        if r.pos != data.len() {
            return Err(Kind::Truncated("has bytes after an empty array"));
        }
        return Ok(Array {
            element_type,
            dims: Vec::new(),
            elements: Vec::new(),
        });
    }
    // Each element takes at least its 4-byte length: never reserve more than that allows.
    let remaining = (data.len() - r.pos) / 4;
    let mut elements = Vec::with_capacity((total as usize).min(remaining));
    for _ in 0..total {
        let len = r.i32()?;
        let value = match len {
            -1 => Value::Null,
            len if len < -1 => {
                return Err(Kind::MalformedArray("negative element length"));
            }
            len => {
                let bytes = r.take(len as usize)?;
                decode_element(&array.element, BytesView::whole(&bytes))
                    .map_err(|e| element_error(&array.element, Format::Binary, e, &bytes))?
            }
        };
        elements.push(value);
    }
    if r.pos != data.len() {
        return Err(Kind::Truncated("has bytes after the last element"));
    }
    Ok(Array {
        element_type,
        dims,
        elements,
    })
}

/// Writes `value` in `array_send` format, each element with `encode_element`.
pub(crate) fn array_to_binary(
    array: &ArrayType,
    value: &Array,
    out: &mut BytesMut,
    encode_element: &dyn Fn(&TypeInfo, &Value, &mut BytesMut) -> Result<(), &'static str>,
) -> Result<(), &'static str> {
    if !value.is_well_formed() || value.dims.len() > MAX_DIMS {
        return Err("array dimensions do not match its elements");
    }
    if value.element_type != array.element.oid {
        return Err("array element type differs from the column's element type");
    }
    out.put_i32(value.dims.len() as i32);
    out.put_i32(i32::from(value.elements.iter().any(Value::is_null)));
    out.put_u32(array.element.oid);
    for dim in &value.dims {
        out.put_i32(i32::try_from(dim.len).map_err(|_| "array dimension too long")?);
        out.put_i32(dim.lower_bound);
    }
    for element in &value.elements {
        if element.is_null() {
            out.put_i32(-1);
            continue;
        }
        let at = out.len();
        out.put_i32(0);
        encode_element(&array.element, element, out)?;
        let len = i32::try_from(out.len() - at - 4).map_err(|_| "array element too long")?;
        if let Some(slot) = out.get_mut(at..at + 4) {
            slot.copy_from_slice(&len.to_be_bytes());
        }
    }
    Ok(())
}
