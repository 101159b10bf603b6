//! Fixed-size and string-like scalars: bool, integers, the oid family, floats, uuid,
//! text types, `"char"`, bytea, json and jsonb. One function per type and direction.

use std::str::FromStr;

use bytes::{BufMut, Bytes, BytesMut};

use crate::protocol::BytesView;
use cdc_core::Text;

use super::error::DecodeErrorKind as Kind;

/// `N` bytes of a fixed-size binary value.
fn fixed<const N: usize>(data: &[u8]) -> Result<[u8; N], Kind> {
    <[u8; N]>::try_from(data).map_err(|_| Kind::WrongLength {
        expected: N,
        actual: data.len(),
    })
}

/// `data` as `&str`, for parsing.
pub(crate) fn ascii_str(data: &[u8]) -> Result<&str, Kind> {
    std::str::from_utf8(data).map_err(|_| Kind::InvalidUtf8)
}

/// The whole of `data` as text, sharing its storage.
pub(crate) fn text_from_bytes(data: &Bytes) -> Result<Text, Kind> {
    Text::from_utf8(data.clone()).map_err(|_| Kind::InvalidUtf8)
}

fn parse_int<T: FromStr<Err = std::num::ParseIntError>>(data: &[u8]) -> Result<T, Kind> {
    // Rust's parser accepts a leading `+`, which Postgres never prints but accepts.
    ascii_str(data)?.parse::<T>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
            Kind::OutOfRange("integer does not fit the type")
        }
        _ => Kind::Syntax("a decimal integer"),
    })
}

// ---- bool ----

pub(crate) fn bool_from_text(data: &[u8]) -> Result<bool, Kind> {
    match data {
        b"t" | b"true" => Ok(true),
        b"f" | b"false" => Ok(false),
        _ => Err(Kind::Syntax("t or f")),
    }
}

pub(crate) fn bool_from_binary(data: &[u8]) -> Result<bool, Kind> {
    // boolrecv: any non-zero byte is true.
    let [byte] = fixed::<1>(data)?;
    Ok(byte != 0)
}

pub(crate) fn bool_to_binary(v: bool, out: &mut BytesMut) {
    out.put_u8(u8::from(v));
}

// ---- integers ----

pub(crate) fn int2_from_text(data: &[u8]) -> Result<i16, Kind> {
    parse_int(data)
}

pub(crate) fn int2_from_binary(data: &[u8]) -> Result<i16, Kind> {
    Ok(i16::from_be_bytes(fixed(data)?))
}

pub(crate) fn int4_from_text(data: &[u8]) -> Result<i32, Kind> {
    parse_int(data)
}

pub(crate) fn int4_from_binary(data: &[u8]) -> Result<i32, Kind> {
    Ok(i32::from_be_bytes(fixed(data)?))
}

pub(crate) fn int8_from_text(data: &[u8]) -> Result<i64, Kind> {
    parse_int(data)
}

pub(crate) fn int8_from_binary(data: &[u8]) -> Result<i64, Kind> {
    Ok(i64::from_be_bytes(fixed(data)?))
}

/// `oid`, `xid`, `cid`: unsigned decimal.
pub(crate) fn oid_from_text(data: &[u8]) -> Result<u32, Kind> {
    parse_int(data)
}

/// `oid`, `xid`, `cid` and the `reg*` types: a u32.
pub(crate) fn oid_from_binary(data: &[u8]) -> Result<u32, Kind> {
    Ok(u32::from_be_bytes(fixed(data)?))
}

// ---- floats ----

/// Whether `s` can only be a number (Rust's parser would also take `inf`, `nan`, …,
/// which Postgres never prints).
fn is_float_literal(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
}

pub(crate) fn float4_from_text(data: &[u8]) -> Result<f32, Kind> {
    match data {
        b"NaN" => Ok(f32::NAN),
        b"Infinity" => Ok(f32::INFINITY),
        b"-Infinity" => Ok(f32::NEG_INFINITY),
        _ => {
            let s = ascii_str(data)?;
            if !is_float_literal(s) {
                return Err(Kind::Syntax("a float, NaN, Infinity or -Infinity"));
            }
            let v: f32 = s
                .parse()
                .map_err(|_| Kind::Syntax("a float, NaN, Infinity or -Infinity"))?;
            // A finite literal that overflows is not a value Postgres printed.
            if v.is_infinite() {
                return Err(Kind::OutOfRange("float4 literal overflows"));
            }
            Ok(v)
        }
    }
}

pub(crate) fn float4_from_binary(data: &[u8]) -> Result<f32, Kind> {
    Ok(f32::from_bits(u32::from_be_bytes(fixed(data)?)))
}

pub(crate) fn float8_from_text(data: &[u8]) -> Result<f64, Kind> {
    match data {
        b"NaN" => Ok(f64::NAN),
        b"Infinity" => Ok(f64::INFINITY),
        b"-Infinity" => Ok(f64::NEG_INFINITY),
        _ => {
            let s = ascii_str(data)?;
            if !is_float_literal(s) {
                return Err(Kind::Syntax("a float, NaN, Infinity or -Infinity"));
            }
            let v: f64 = s
                .parse()
                .map_err(|_| Kind::Syntax("a float, NaN, Infinity or -Infinity"))?;
            if v.is_infinite() {
                return Err(Kind::OutOfRange("float8 literal overflows"));
            }
            Ok(v)
        }
    }
}

pub(crate) fn float8_from_binary(data: &[u8]) -> Result<f64, Kind> {
    Ok(f64::from_bits(u64::from_be_bytes(fixed(data)?)))
}

// ---- uuid ----

pub(crate) fn uuid_from_text(data: &[u8]) -> Result<uuid::Uuid, Kind> {
    uuid::Uuid::try_parse_ascii(data)
        .map_err(|_| Kind::Syntax("a UUID like a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"))
}

pub(crate) fn uuid_from_binary(data: &[u8]) -> Result<uuid::Uuid, Kind> {
    Ok(uuid::Uuid::from_bytes(fixed(data)?))
}

// ---- "char" ----

/// The text Postgres 15+ prints for a `"char"` byte: nothing for 0, the character for
/// ASCII, `\ooo` (octal) for a byte with the high bit set.
fn char_text(byte: u8) -> Text {
    match byte {
        0 => Text::default(),
        0x01..=0x7f => {
            // Zero-copy for the common case: a one-byte static slice.
            static ASCII: [u8; 128] = {
                let mut table = [0u8; 128];
                let mut i = 0;
                while i < 128 {
                    table[i] = i as u8;
                    i += 1;
                }
                table
            };
            let slice = ASCII
                .get(usize::from(byte)..=usize::from(byte))
                .unwrap_or(&[]);
            Text::from_utf8(Bytes::from_static(slice)).unwrap_or_default()
        }
        _ => Text::from(format!("\\{byte:03o}")),
    }
}

/// Text output of `"char"`. Postgres 15+ already prints a high-bit byte as `\ooo`; older
/// servers send the raw byte, which is turned into the same `\ooo` form here.
pub(crate) fn char_from_text(data: BytesView<'_>) -> Result<Text, Kind> {
    match data.as_slice() {
        [byte] if *byte >= 0x80 => Ok(char_text(*byte)),
        _ => text_from_bytes(&data.to_bytes()),
    }
}

pub(crate) fn char_from_binary(data: &[u8]) -> Result<Text, Kind> {
    let [byte] = fixed::<1>(data)?;
    Ok(char_text(byte))
}

/// The byte a `"char"` value's text stands for (the inverse of its output function).
pub(crate) fn char_to_byte(text: &str) -> Option<u8> {
    match text.as_bytes() {
        [] => Some(0),
        [b] if b.is_ascii() && *b != 0 => Some(*b),
        [b'\\', d1 @ b'0'..=b'3', d2 @ b'0'..=b'7', d3 @ b'0'..=b'7'] => {
            let byte = (d1 - b'0') << 6 | (d2 - b'0') << 3 | (d3 - b'0');
            // Postgres escapes exactly the high-bit bytes; anything else is another text.
            (byte >= 0x80).then_some(byte)
        }
        _ => None,
    }
}

// ---- bytea ----

/// `bytea` text: hex (`\x0aff`, the default output) or the legacy escape format (`\\`
/// for a backslash, `\ooo` for other bytes). Escape-format text without escapes is
/// returned without copying.
pub(crate) fn bytea_from_text(data: BytesView<'_>) -> Result<Bytes, Kind> {
    match data.strip_prefix(b"\\x") {
        Some(hex) => bytea_hex(hex),
        None if memchr::memchr(b'\\', &data).is_none() => Ok(data.to_bytes()),
        None => bytea_escape(&data),
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Hex digit values, 0xFF for non-digits: one lookup per digit on the hot path.
const HEX_VALUES: [u8; 256] = {
    let mut table = [0xFFu8; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

fn bytea_hex(hex: &[u8]) -> Result<Bytes, Kind> {
    // Postgres's own output has no white space: decode pairs straight from the table.
    if hex.len().is_multiple_of(2) {
        let mut out = Vec::with_capacity(hex.len() / 2);
        let mut valid = true;
        for pair in hex.chunks_exact(2) {
            let hi = HEX_VALUES[usize::from(pair[0])];
            let lo = HEX_VALUES[usize::from(pair[1])];
            valid &= (hi | lo) != 0xFF;
            out.push(hi << 4 | (lo & 0x0F));
        }
        if valid {
            return Ok(Bytes::from(out));
        }
    }
    bytea_hex_with_spaces(hex)
}

/// The general path: white space allowed between digit pairs, as `byteain` does.
fn bytea_hex_with_spaces(hex: &[u8]) -> Result<Bytes, Kind> {
    let mut out = Vec::with_capacity(hex.len() / 2);
    let mut rest = hex;
    // Like byteain, white space is allowed between digit pairs.
    while let Some((&first, tail)) = rest.split_first() {
        if matches!(first, b' ' | b'\n' | b'\t' | b'\r') {
            rest = tail;
            continue;
        }
        let (&second, tail) = tail
            .split_first()
            .ok_or(Kind::Syntax("an even number of hex digits"))?;
        let (Some(hi), Some(lo)) = (hex_value(first), hex_value(second)) else {
            return Err(Kind::Syntax("hex digits after \\x"));
        };
        out.push(hi << 4 | lo);
        rest = tail;
    }
    Ok(Bytes::from(out))
}

fn bytea_escape(data: &[u8]) -> Result<Bytes, Kind> {
    let mut out = Vec::with_capacity(data.len());
    let mut rest = data;
    while let Some((&byte, tail)) = rest.split_first() {
        if byte != b'\\' {
            out.push(byte);
            rest = tail;
            continue;
        }
        match tail {
            [b'\\', after @ ..] => {
                out.push(b'\\');
                rest = after;
            }
            [
                d1 @ b'0'..=b'3',
                d2 @ b'0'..=b'7',
                d3 @ b'0'..=b'7',
                after @ ..,
            ] => {
                out.push((d1 - b'0') << 6 | (d2 - b'0') << 3 | (d3 - b'0'));
                rest = after;
            }
            _ => return Err(Kind::Syntax("\\\\ or \\ooo after a backslash in bytea")),
        }
    }
    Ok(Bytes::from(out))
}

// ---- jsonb ----

/// The only binary jsonb format version.
const JSONB_VERSION: u8 = 1;

pub(crate) fn jsonb_from_binary(data: BytesView<'_>) -> Result<Text, Kind> {
    match data.first() {
        Some(&JSONB_VERSION) => {
            Text::from_utf8(data.to_bytes().slice(1..)).map_err(|_| Kind::InvalidUtf8)
        }
        Some(&version) => Err(Kind::UnsupportedJsonbVersion(version)),
        None => Err(Kind::Truncated(
            "is empty; jsonb starts with a version byte",
        )),
    }
}

pub(crate) fn jsonb_to_binary(text: &str, out: &mut BytesMut) {
    out.put_u8(JSONB_VERSION);
    out.put_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bools() {
        assert_eq!(bool_from_text(b"t"), Ok(true));
        assert_eq!(bool_from_text(b"f"), Ok(false));
        assert!(bool_from_text(b"yes").is_err());
        assert_eq!(bool_from_binary(&[1]), Ok(true));
        assert_eq!(bool_from_binary(&[0]), Ok(false));
        assert_eq!(
            bool_from_binary(&[]),
            Err(Kind::WrongLength {
                expected: 1,
                actual: 0
            })
        );
    }

    #[test]
    fn integer_extremes_and_errors() {
        assert_eq!(int8_from_text(b"-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(int8_from_text(b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(
            int8_from_text(b"9223372036854775808"),
            Err(Kind::OutOfRange("integer does not fit the type"))
        );
        assert_eq!(int2_from_text(b"-32768"), Ok(i16::MIN));
        assert!(int2_from_text(b"32768").is_err());
        assert!(int4_from_text(b"").is_err());
        assert!(int4_from_text(b"1 ").is_err());
        assert_eq!(int8_from_binary(&i64::MIN.to_be_bytes()), Ok(i64::MIN));
        assert_eq!(int4_from_binary(&(-5i32).to_be_bytes()), Ok(-5));
        assert_eq!(int2_from_binary(&[0x80, 0]), Ok(i16::MIN));
        assert!(int4_from_binary(&[0; 8]).is_err());
        assert_eq!(oid_from_text(b"4294967295"), Ok(u32::MAX));
        assert!(oid_from_text(b"-1").is_err());
        assert_eq!(oid_from_binary(&[0xff; 4]), Ok(u32::MAX));
    }

    #[test]
    fn floats_with_specials_and_exponents() {
        assert!(float8_from_text(b"NaN").unwrap().is_nan());
        assert_eq!(float8_from_text(b"Infinity"), Ok(f64::INFINITY));
        assert_eq!(float8_from_text(b"-Infinity"), Ok(f64::NEG_INFINITY));
        assert_eq!(float8_from_text(b"1e+15"), Ok(1e15));
        assert_eq!(float8_from_text(b"1.5e-05"), Ok(1.5e-5));
        assert_eq!(float8_from_text(b"1.7976931348623157e+308"), Ok(f64::MAX));
        assert_eq!(
            float8_from_text(b"-0").map(f64::to_bits),
            Ok((-0.0f64).to_bits())
        );
        assert_eq!(float4_from_text(b"1e+06"), Ok(1e6));
        assert_eq!(float4_from_text(b"3.4028235e+38"), Ok(f32::MAX));
        for bad in [&b"inf"[..], b"nan", b"", b"1,5", b"infinity", b"1e999"] {
            assert!(float8_from_text(bad).is_err(), "{bad:?}");
        }
        assert_eq!(float8_from_binary(&1.5f64.to_be_bytes()), Ok(1.5));
        assert!(
            float4_from_binary(&f32::NAN.to_be_bytes())
                .unwrap()
                .is_nan()
        );
    }

    #[test]
    fn uuids() {
        let u = uuid_from_text(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        assert_eq!(uuid_from_binary(u.as_bytes()), Ok(u));
        assert!(uuid_from_text(b"a0eebc99").is_err());
        assert!(uuid_from_binary(&[0; 15]).is_err());
    }

    #[test]
    fn char_high_bit_bytes_print_as_octal_like_postgres() {
        assert_eq!(char_from_binary(b"a").unwrap().as_str(), "a");
        assert_eq!(char_from_binary(&[0]).unwrap().as_str(), "");
        assert_eq!(char_from_binary(&[0xe9]).unwrap().as_str(), "\\351");
        assert_eq!(char_from_binary(&[0x80]).unwrap().as_str(), "\\200");
        assert!(char_from_binary(&[]).is_err());
        // Postgres 15+ text, and a pre-15 raw byte, agree.
        assert_eq!(
            char_from_text(BytesView::whole(&Bytes::from_static(b"\\351")))
                .unwrap()
                .as_str(),
            "\\351"
        );
        assert_eq!(
            char_from_text(BytesView::whole(&Bytes::from_static(&[0xe9])))
                .unwrap()
                .as_str(),
            "\\351"
        );
        assert_eq!(char_to_byte("\\351"), Some(0xe9));
        assert_eq!(char_to_byte(""), Some(0));
        assert_eq!(char_to_byte("\\101"), None);
        assert_eq!(char_to_byte("ab"), None);
    }

    #[test]
    fn bytea_hex_and_escape_formats() {
        let hex = bytea_from_text(BytesView::whole(&Bytes::from_static(b"\\x00ffA0"))).unwrap();
        assert_eq!(hex.as_ref(), b"\x00\xff\xa0");
        let spaced = bytea_from_text(BytesView::whole(&Bytes::from_static(b"\\x00 ff\n"))).unwrap();
        assert_eq!(spaced.as_ref(), b"\x00\xff");
        assert_eq!(
            bytea_from_text(BytesView::whole(&Bytes::from_static(b"\\x")))
                .unwrap()
                .as_ref(),
            b""
        );
        assert!(bytea_from_text(BytesView::whole(&Bytes::from_static(b"\\x0"))).is_err());
        assert!(bytea_from_text(BytesView::whole(&Bytes::from_static(b"\\xzz"))).is_err());
        // Escape format, as `bytea_output = escape` prints `\x005c27ff41`.
        let escaped =
            bytea_from_text(BytesView::whole(&Bytes::from_static(b"\\000\\\\'\\377A"))).unwrap();
        assert_eq!(escaped.as_ref(), b"\x00\\'\xffA");
        assert!(bytea_from_text(BytesView::whole(&Bytes::from_static(b"a\\9"))).is_err());
        assert!(bytea_from_text(BytesView::whole(&Bytes::from_static(b"a\\"))).is_err());
        let plain = Bytes::from_static(b"abc");
        assert_eq!(
            bytea_from_text(BytesView::whole(&plain)).unwrap().as_ptr(),
            plain.as_ptr()
        );
    }

    #[test]
    fn jsonb_binary_needs_version_one() {
        let text =
            jsonb_from_binary(BytesView::whole(&Bytes::from_static(b"\x01{\"a\": 1}"))).unwrap();
        assert_eq!(text.as_str(), "{\"a\": 1}");
        assert_eq!(
            jsonb_from_binary(BytesView::whole(&Bytes::from_static(b"\x02{}"))),
            Err(Kind::UnsupportedJsonbVersion(2))
        );
        assert!(jsonb_from_binary(BytesView::whole(&Bytes::new())).is_err());
    }
}
