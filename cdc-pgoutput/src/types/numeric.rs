//! `numeric`: text kept exactly; binary (base-10000 digits) turned into the exact
//! canonical decimal text Postgres itself would print.

use bytes::{BufMut, Bytes, BytesMut};
use cdc_core::{Numeric, Text};

use super::error::DecodeErrorKind as Kind;
use super::scalar::text_from_bytes;

const SIGN_POS: u16 = 0x0000;
const SIGN_NEG: u16 = 0x4000;
const SIGN_NAN: u16 = 0xC000;
const SIGN_PINF: u16 = 0xD000;
const SIGN_NINF: u16 = 0xF000;
/// Largest display scale a numeric can have (`NUMERIC_DSCALE_MASK`).
const MAX_DSCALE: u16 = 0x3FFF;
const NBASE: u16 = 10_000;
/// Decimal digits per base-10000 digit.
const DEC_DIGITS: usize = 4;

/// Postgres's numeric text (`-12.340`, `NaN`, `Infinity`, `-Infinity`), kept as is.
pub(crate) fn numeric_from_text(data: &Bytes) -> Result<Numeric, Kind> {
    Numeric::parse_text(text_from_bytes(data)?)
        .map_err(|_| Kind::Syntax("[-]digits[.digits], NaN, Infinity or -Infinity"))
}

fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    let bytes = data.get(at..at + 2)?;
    Some(u16::from_be_bytes([*bytes.first()?, *bytes.get(1)?]))
}

/// `numeric_send` format: ndigits (u16), weight (i16), sign (u16), dscale (u16), then
/// ndigits base-10000 digits (u16 each), the first of which is worth 10000^weight.
pub(crate) fn numeric_from_binary(data: &[u8]) -> Result<Numeric, Kind> {
    let header = |at| u16_at(data, at).ok_or(Kind::Truncated("ends inside the numeric header"));
    let ndigits = usize::from(header(0)?);
    let weight = header(2)? as i16;
    let sign = header(4)?;
    let dscale = header(6)?;
    let expected = 8 + 2 * ndigits;
    if data.len() != expected {
        return Err(Kind::WrongLength {
            expected,
            actual: data.len(),
        });
    }
    match sign {
        SIGN_NAN => return Ok(Numeric::NaN),
        SIGN_PINF => return Ok(Numeric::PosInfinity),
        SIGN_NINF => return Ok(Numeric::NegInfinity),
        SIGN_POS | SIGN_NEG => {}
        _ => {
            return Err(Kind::InvalidBinary(
                "numeric sign is not one Postgres sends",
            ));
        }
    }
    if dscale > MAX_DSCALE {
        return Err(Kind::InvalidBinary("numeric display scale exceeds 16383"));
    }
    let digits = data.get(8..).unwrap_or(&[]);
    let digit = |i: i64| -> u16 {
        usize::try_from(i)
            .ok()
            .and_then(|i| u16_at(digits, i * 2))
            .unwrap_or(0)
    };
    if (0..ndigits).any(|i| digit(i as i64) >= NBASE) {
        return Err(Kind::InvalidBinary("numeric digit is not below 10000"));
    }
    Ok(Numeric::Finite(Text::from(numeric_text(
        ndigits, weight, sign, dscale, &digit,
    ))))
}

/// Postgres's `get_str_from_var`, producing canonical text: no superfluous leading
/// zeros, exactly `dscale` fractional digits, no minus sign on zero.
fn numeric_text(
    ndigits: usize,
    weight: i16,
    sign: u16,
    dscale: u16,
    digit: &impl Fn(i64) -> u16,
) -> String {
    let int_groups = usize::try_from(i32::from(weight) + 1).unwrap_or(0);
    let mut out = String::with_capacity(2 + int_groups * DEC_DIGITS + usize::from(dscale));
    if sign == SIGN_NEG && (0..ndigits).any(|i| digit(i as i64) != 0) {
        out.push('-');
    }
    let int_start = out.len();
    if int_groups == 0 {
        out.push('0');
    } else {
        for d in 0..int_groups {
            push_group(&mut out, digit(d as i64));
        }
        let zeros = out
            .get(int_start..)
            .map_or(0, |s| s.bytes().take_while(|&b| b == b'0').count());
        let keep_one = usize::from(zeros == int_groups * DEC_DIGITS);
        out.replace_range(int_start..int_start + zeros - keep_one, "");
    }
    if dscale > 0 {
        out.push('.');
        let end = out.len() + usize::from(dscale);
        let mut d = i64::from(weight) + 1;
        while out.len() < end {
            push_group(&mut out, digit(d));
            d += 1;
        }
        out.truncate(end);
    }
    out
}

fn push_group(out: &mut String, group: u16) {
    let mut buf = [b'0'; DEC_DIGITS];
    let mut v = group;
    for slot in buf.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend(buf.iter().map(|&b| char::from(b)));
}

/// Writes `value` in `numeric_send` format, normalized as Postgres stores it (no leading
/// or trailing zero digits; zero has no digits and weight 0).
pub(crate) fn numeric_to_binary(value: &Numeric, out: &mut BytesMut) -> Result<(), &'static str> {
    let text = match value {
        Numeric::Finite(text) => text.as_str(),
        special => {
            let sign = match special {
                Numeric::PosInfinity => SIGN_PINF,
                Numeric::NegInfinity => SIGN_NINF,
                _ => SIGN_NAN,
            };
            put_header(out, 0, 0, sign, 0);
            return Ok(());
        }
    };
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err("numeric text is not [-]digits[.digits]");
    }
    let dscale = u16::try_from(frac.len())
        .ok()
        .filter(|&s| s <= MAX_DSCALE)
        .ok_or("numeric scale exceeds 16383")?;
    // Pad the integer part on the left and the fraction on the right to whole groups.
    let int_pad = (DEC_DIGITS - int.len() % DEC_DIGITS) % DEC_DIGITS;
    let frac_pad = (DEC_DIGITS - frac.len() % DEC_DIGITS) % DEC_DIGITS;
    let padded: Vec<u8> = std::iter::repeat_n(b'0', int_pad)
        .chain(int.bytes())
        .chain(frac.bytes())
        .chain(std::iter::repeat_n(b'0', frac_pad))
        .collect();
    let mut groups: Vec<u16> = padded
        .chunks(DEC_DIGITS)
        .map(|c| {
            c.iter()
                .fold(0u16, |acc, &b| acc * 10 + u16::from(b - b'0'))
        })
        .collect();
    let int_groups = (int.len() + int_pad) / DEC_DIGITS;
    let leading = groups.iter().take_while(|&&g| g == 0).count();
    let weight = i64::try_from(int_groups).unwrap_or(i64::MAX) - 1 - leading as i64;
    groups.drain(..leading);
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        put_header(out, 0, 0, SIGN_POS, dscale);
        return Ok(());
    }
    let weight = i16::try_from(weight).map_err(|_| "numeric weight exceeds the binary format")?;
    let ndigits = u16::try_from(groups.len()).map_err(|_| "numeric has too many digits")?;
    let sign = if negative { SIGN_NEG } else { SIGN_POS };
    put_header(out, ndigits, weight, sign, dscale);
    for g in groups {
        out.put_u16(g);
    }
    Ok(())
}

fn put_header(out: &mut BytesMut, ndigits: u16, weight: i16, sign: u16, dscale: u16) {
    out.put_u16(ndigits);
    out.put_i16(weight);
    out.put_u16(sign);
    out.put_u16(dscale);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_header(&mut out, ndigits, weight, sign, dscale);
        for d in digits {
            out.put_u16(*d);
        }
        out.to_vec()
    }

    fn decoded(data: &[u8]) -> String {
        numeric_from_binary(data).unwrap().to_string()
    }

    fn encoded(text: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        numeric_to_binary(&text.parse().unwrap(), &mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn binary_as_postgres_sends_it() {
        // Captured from Postgres 15: numeric_send(0.0), numeric_send(-0.00012),
        // numeric_send('NaN'), numeric_send('-Infinity').
        assert_eq!(decoded(&[0, 0, 0, 0, 0, 0, 0, 1]), "0.0");
        let neg = [0, 2, 0xff, 0xff, 0x40, 0, 0, 5, 0, 1, 0x07, 0xd0];
        assert_eq!(decoded(&neg), "-0.00012");
        assert_eq!(encoded("-0.00012"), neg);
        assert_eq!(encoded("0.0"), [0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(decoded(&[0, 0, 0, 0, 0xc0, 0, 0, 0]), "NaN");
        assert_eq!(decoded(&[0, 0, 0, 0, 0xf0, 0, 0, 0x20]), "-Infinity");
        assert_eq!(decoded(&bin(0, 0, SIGN_PINF, 0, &[])), "Infinity");
    }

    #[test]
    fn binary_weights_and_scales() {
        assert_eq!(decoded(&bin(1, 0, SIGN_POS, 0, &[7])), "7");
        assert_eq!(decoded(&bin(2, 1, SIGN_NEG, 2, &[12, 3456])), "-123456.00");
        // Weight beyond the digits: trailing zero groups are implied.
        assert_eq!(decoded(&bin(1, 2, SIGN_POS, 0, &[5])), "500000000");
        // dscale larger than the digits present: zero-filled.
        assert_eq!(decoded(&bin(1, -1, SIGN_POS, 10, &[5])), "0.0005000000");
        // dscale smaller than the digits present: cut, as Postgres prints.
        assert_eq!(decoded(&bin(1, -1, SIGN_POS, 2, &[1234])), "0.12");
        // Negative weight far below zero.
        assert_eq!(decoded(&bin(1, -3, SIGN_NEG, 12, &[42])), "-0.000000000042");
        // A negative zero (never sent) prints without sign.
        assert_eq!(decoded(&bin(1, 0, SIGN_NEG, 1, &[0])), "0.0");
    }

    #[test]
    fn thousand_digit_numeric_round_trips() {
        let text = format!("-{}.{}", "9".repeat(1000), "1".repeat(37));
        let bytes = encoded(&text);
        assert_eq!(decoded(&bytes), text);
        let text = format!("1{}", "0".repeat(999));
        assert_eq!(decoded(&encoded(&text)), text);
    }

    #[test]
    fn malformed_binary_is_rejected() {
        assert!(numeric_from_binary(&[0, 1, 0, 0, 0, 0, 0, 0]).is_err()); // missing digit
        assert!(numeric_from_binary(&[0, 0, 0, 0]).is_err());
        assert!(numeric_from_binary(&bin(1, 0, 0x1234, 0, &[1])).is_err());
        assert!(numeric_from_binary(&bin(1, 0, SIGN_POS, 0x4000, &[1])).is_err());
        assert!(numeric_from_binary(&bin(1, 0, SIGN_POS, 0, &[10_000])).is_err());
    }

    #[test]
    fn text_is_kept_exactly() {
        let n = numeric_from_text(&Bytes::from_static(b"-12.3400")).unwrap();
        assert_eq!(n.to_string(), "-12.3400");
        assert_eq!(
            numeric_from_text(&Bytes::from_static(b"NaN")).unwrap(),
            Numeric::NaN
        );
        assert_eq!(
            numeric_from_text(&Bytes::from_static(b"-Infinity")).unwrap(),
            Numeric::NegInfinity
        );
        assert!(numeric_from_text(&Bytes::from_static(b"1e5")).is_err());
    }
}
