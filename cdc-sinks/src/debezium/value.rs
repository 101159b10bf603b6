//! One column value as Debezium's PostgreSQL connector writes it in JSON, under its default
//! settings (`decimal.handling.mode=precise`, `time.precision.mode=adaptive`,
//! `binary.handling.mode=bytes`, `interval.handling.mode=numeric`); the table is in the
//! module documentation of [`crate::debezium`].

use cdc_core::value::{Date, Interval, Time, TimeTz, Timestamp, TimestampTz, USECS_PER_DAY};
use cdc_core::{ColumnSchema, Error, Numeric, Value};

use super::{BinaryMode, DecimalMode, IntervalMode, Modes, TimePrecision, hstore};
use crate::json::{write_f32, write_f64, write_int, write_str, write_text};

/// What Debezium writes for an unchanged TOASTed value it was not sent
/// (`unavailable.value.placeholder`).
pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

/// Days from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_DAYS: i64 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_MICROS: i64 = UNIX_TO_PG_DAYS * USECS_PER_DAY;
/// Debezium counts a month as 30.4375 days (365.25 / 12) in microseconds.
const MICROS_PER_MONTH: i64 = 2_629_800_000_000;

/// The type modifier's declared fractional-second precision (`time(3)` → 3); 6 without.
fn time_precision(column: &ColumnSchema) -> i32 {
    let modifier = column.column_type.modifier;
    if modifier < 0 { 6 } else { modifier }
}

/// The declared scale of a `numeric(p, s)`, if it has one.
pub(super) fn numeric_scale(column: &ColumnSchema) -> Option<u32> {
    let modifier = column.column_type.modifier;
    (modifier >= 4).then(|| ((modifier - 4) & 0xFFFF) as u32)
}

/// Appends the JSON of `value` in `column`. `Rejected` for what the encoder cannot express
/// (binary-form values of types it does not know).
pub(super) fn write_value(
    out: &mut Vec<u8>,
    value: &Value,
    column: &ColumnSchema,
    modes: Modes,
) -> Result<(), Error> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Int2(v) => write_int(out, *v),
        Value::Int4(v) => write_int(out, *v),
        Value::Int8(v) => write_int(out, *v),
        Value::Oid(v) => write_int(out, *v),
        Value::Float4(v) if v.is_finite() => write_f32(out, *v),
        Value::Float8(v) if v.is_finite() => write_f64(out, *v),
        // Java writes the special values of a float as strings.
        Value::Float4(v) => write_non_finite(out, f64::from(*v)),
        Value::Float8(v) => write_non_finite(out, *v),
        Value::Numeric(numeric) => write_decimal(out, numeric, column, modes.decimals)?,
        Value::Text(t) => write_text(out, t),
        Value::Bytea(bytes) => write_binary(out, bytes, modes.binary),
        Value::Date(d) => write_int(out, date_days(*d)),
        Value::Time(t) => write_int(out, time_value(*t, time_precision(column), modes.time)),
        Value::TimeTz(t) => write_zoned_time(out, *t),
        Value::Timestamp(ts) => {
            write_int(
                out,
                timestamp_value(*ts, time_precision(column), modes.time),
            );
        }
        Value::TimestampTz(ts) => write_zoned_timestamp(out, *ts),
        Value::Interval(iv) => match modes.interval {
            IntervalMode::Numeric => write_int(out, interval_micros(*iv)),
            IntervalMode::String => write_str(out, &interval_iso(*iv)),
        },
        Value::Uuid(u) => write_str(out, &u.hyphenated().to_string()),
        Value::Json(t) | Value::Jsonb(t) => write_text(out, t),
        Value::Array(array) => write_array(out, array, column, modes)?,
        Value::Unchanged => write_str(out, UNAVAILABLE_VALUE),
        Value::Other(other) => match &other.repr {
            cdc_core::OtherRepr::Text(text) if hstore::is_hstore(other.type_name.as_deref()) => {
                match hstore::parse(text.as_str()) {
                    Some(pairs) => hstore::write(out, &pairs, modes.hstore),
                    None => return Err(malformed(column, "hstore", text.as_str())),
                }
            }
            cdc_core::OtherRepr::Text(text) => {
                write_other(out, other.type_oid, text.as_str(), column, modes)?;
            }
            cdc_core::OtherRepr::Binary(_) => {
                return Err(Error::rejected(format!(
                    "column {:?}: a binary value of type {} has no Debezium form here; \
                     stream it in text form (binary = false)",
                    column.name, other.type_oid
                )));
            }
        },
    }
    Ok(())
}

/// Postgres's `MAXDIM`: no array has more dimensions.
const MAX_ARRAY_DIMS: usize = 6;

/// An array as nested JSON arrays, one level per dimension (a one-dimensional array is a
/// flat list; its lower bound is not written).
fn write_array(
    out: &mut Vec<u8>,
    array: &cdc_core::Array,
    column: &ColumnSchema,
    modes: Modes,
) -> Result<(), Error> {
    if !array.is_well_formed() || array.dims.len() > MAX_ARRAY_DIMS {
        return Err(Error::rejected(format!(
            "column {:?}: malformed array (dimensions {:?}, {} elements)",
            column.name,
            array.dims,
            array.elements.len()
        )));
    }
    let mut elements = array.elements.iter();
    if array.dims.is_empty() {
        out.extend_from_slice(b"[]");
        return Ok(());
    }
    write_dimension(out, &array.dims, &mut elements, column, modes)
}

fn write_dimension<'a>(
    out: &mut Vec<u8>,
    dims: &[cdc_core::ArrayDim],
    elements: &mut impl Iterator<Item = &'a Value>,
    column: &ColumnSchema,
    modes: Modes,
) -> Result<(), Error> {
    let Some((dim, inner)) = dims.split_first() else {
        return Ok(());
    };
    out.push(b'[');
    for i in 0..dim.len {
        if i > 0 {
            out.push(b',');
        }
        if inner.is_empty() {
            let element = elements
                .next()
                .ok_or_else(|| Error::rejected(format!("column {:?}: short array", column.name)))?;
            write_value(out, element, column, modes)?;
        } else {
            write_dimension(out, inner, elements, column, modes)?;
        }
    }
    out.push(b']');
    Ok(())
}

/// Type OIDs with a Debezium form other than their text.
mod other_oid {
    pub const POINT: u32 = 600;
    pub const MONEY: u32 = 790;
    pub const BIT: u32 = 1560;
    pub const VARBIT: u32 = 1562;
}

/// A value of a type without a dedicated [`Value`] variant, from its text: `bit(1)` as a
/// boolean, other bit strings as `io.debezium.data.Bits`, `money` as a decimal of scale 2,
/// `point` as `io.debezium.data.geometry.Point`; the rest as the text.
fn write_other(
    out: &mut Vec<u8>,
    type_oid: u32,
    text: &str,
    column: &ColumnSchema,
    modes: Modes,
) -> Result<(), Error> {
    let is_array_column = column.column_type.oid != type_oid;
    match type_oid {
        other_oid::BIT if column.column_type.modifier == 1 && !is_array_column => {
            out.extend_from_slice(if text == "1" { b"true" } else { b"false" });
        }
        other_oid::BIT | other_oid::VARBIT => match bit_string_bytes(text) {
            Some(bytes) => write_base64(out, &bytes),
            None => return Err(malformed(column, "bit string", text)),
        },
        other_oid::MONEY => {
            let Some(amount) = money_amount(text) else {
                return Err(Error::rejected(format!(
                    "column {:?}: money value {text:?} is not in the C locale's form \
                     (-$1,234.56); set lc_monetary = 'C' for the replication user",
                    column.name
                )));
            };
            match modes.decimals {
                DecimalMode::Precise => write_numeric(out, &amount, Some(2))?,
                DecimalMode::String => write_str(out, &amount),
                DecimalMode::Double => match amount.parse::<f64>() {
                    Ok(v) => write_double(out, v),
                    Err(_) => return Err(malformed(column, "money", text)),
                },
            }
        }
        other_oid::POINT => {
            let Some((x, y)) = point_coordinates(text) else {
                return Err(malformed(column, "point", text));
            };
            write_point(out, x, y);
        }
        _ => write_str(out, text),
    }
    Ok(())
}

fn malformed(column: &ColumnSchema, what: &str, text: &str) -> Error {
    Error::rejected(format!(
        "column {:?}: malformed {what} {text:?}",
        column.name
    ))
}

/// The bytes of Java's `BitSet.toByteArray` for a bit string (its last character bit 0):
/// little-endian, without trailing zero bytes (none for all zeros).
fn bit_string_bytes(text: &str) -> Option<Vec<u8>> {
    let mut bytes = vec![0u8; text.len().div_ceil(8)];
    for (i, c) in text.bytes().rev().enumerate() {
        match c {
            b'1' => {
                if let Some(byte) = bytes.get_mut(i / 8) {
                    *byte |= 1 << (i % 8);
                }
            }
            b'0' => {}
            _ => return None,
        }
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    Some(bytes)
}

/// `money`'s C-locale text (`$1,234.56`, `-$5.00`) as a plain decimal (`1234.56`).
fn money_amount(text: &str) -> Option<String> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let digits = rest.strip_prefix('$')?;
    let (whole, cents) = digits.split_once('.')?;
    let whole: String = whole.chars().filter(|&c| c != ',').collect();
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || cents.len() != 2
        || !cents.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some(format!(
        "{}{whole}.{cents}",
        if negative { "-" } else { "" }
    ))
}

/// `point`'s text `(x,y)`.
fn point_coordinates(text: &str) -> Option<(f64, f64)> {
    let inner = text.strip_prefix('(')?.strip_suffix(')')?;
    let (x, y) = inner.split_once(',')?;
    Some((x.trim().parse().ok()?, y.trim().parse().ok()?))
}

/// `{"x", "y", "wkb", "srid"}`: the coordinates and the point's well-known binary
/// (little-endian), no SRID — Debezium's `io.debezium.data.geometry.Point`.
fn write_point(out: &mut Vec<u8>, x: f64, y: f64) {
    let mut wkb = Vec::with_capacity(21);
    wkb.push(1);
    wkb.extend_from_slice(&1u32.to_le_bytes());
    wkb.extend_from_slice(&x.to_le_bytes());
    wkb.extend_from_slice(&y.to_le_bytes());
    out.extend_from_slice(b"{\"x\":");
    write_double(out, x);
    out.extend_from_slice(b",\"y\":");
    write_double(out, y);
    out.extend_from_slice(b",\"wkb\":");
    write_base64(out, &wkb);
    out.extend_from_slice(b",\"srid\":null}");
}

/// A numeric in `decimals` mode.
fn write_decimal(
    out: &mut Vec<u8>,
    numeric: &Numeric,
    column: &ColumnSchema,
    decimals: DecimalMode,
) -> Result<(), Error> {
    match (decimals, numeric) {
        (DecimalMode::Precise, Numeric::Finite(text)) => {
            write_numeric(out, text.as_str(), numeric_scale(column))?;
        }
        // `precise` cannot carry NaN or infinities: Debezium writes null (and logs a
        // warning).
        (DecimalMode::Precise, _) => out.extend_from_slice(b"null"),
        (DecimalMode::String, Numeric::Finite(text)) => write_text(out, text),
        // The names of Debezium's `SpecialValueDecimal` values.
        (DecimalMode::String, Numeric::NaN) => write_str(out, "NAN"),
        (DecimalMode::String, Numeric::PosInfinity) => write_str(out, "POSITIVE_INFINITY"),
        (DecimalMode::String, Numeric::NegInfinity) => write_str(out, "NEGATIVE_INFINITY"),
        (DecimalMode::Double, Numeric::Finite(text)) => match text.as_str().parse::<f64>() {
            Ok(v) if v.is_finite() => write_f64(out, v),
            Ok(v) => write_non_finite(out, v),
            Err(_) => return Err(Error::rejected(format!("malformed numeric {text:?}"))),
        },
        (DecimalMode::Double, Numeric::NaN) => write_non_finite(out, f64::NAN),
        (DecimalMode::Double, Numeric::PosInfinity) => write_non_finite(out, f64::INFINITY),
        (DecimalMode::Double, Numeric::NegInfinity) => write_non_finite(out, f64::NEG_INFINITY),
    }
    Ok(())
}

/// A double as a JSON number, or as Java writes a special value.
fn write_double(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        write_f64(out, v);
    } else {
        write_non_finite(out, v);
    }
}

fn write_non_finite(out: &mut Vec<u8>, v: f64) {
    let text = if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    };
    write_str(out, text);
}

/// Days since 1970-01-01 (`io.debezium.time.Date`).
fn date_days(date: Date) -> i64 {
    match date {
        Date::Days(days) => i64::from(days) + UNIX_TO_PG_DAYS,
        // What Debezium's stream gives for PostgreSQL's infinite dates.
        Date::Infinity => -2_147_472_692,
        Date::NegInfinity => -2_147_472_691,
    }
}

/// `time(p)`: milliseconds since midnight for `p` ≤ 3 (`io.debezium.time.Time`), else
/// microseconds (`MicroTime`); always microseconds with `AdaptiveTimeMicroseconds`, always
/// milliseconds with `Connect`.
fn time_value(time: Time, precision: i32, mode: TimePrecision) -> i64 {
    match mode {
        TimePrecision::Adaptive if precision <= 3 => time.0 / 1000,
        TimePrecision::Connect => time.0 / 1000,
        _ => time.0,
    }
}

/// `timestamp(p)`: milliseconds since the Unix epoch for `p` ≤ 3
/// (`io.debezium.time.Timestamp`), else microseconds (`MicroTimestamp`).
fn timestamp_value(ts: Timestamp, precision: i32, mode: TimePrecision) -> i64 {
    let precision = if mode == TimePrecision::Connect {
        0
    } else {
        precision
    };
    let micros = match ts {
        Timestamp::Micros(us) => us.saturating_add(UNIX_TO_PG_MICROS),
        Timestamp::Infinity => 9_223_372_036_825_200_000,
        Timestamp::NegInfinity => -9_223_372_036_832_400_000,
    };
    if precision <= 3 {
        micros.div_euclid(1000)
    } else {
        micros
    }
}

/// Microseconds, with a month of 30.4375 days (`io.debezium.time.MicroDuration`).
fn interval_micros(iv: Interval) -> i64 {
    i64::from(iv.months)
        .saturating_mul(MICROS_PER_MONTH)
        .saturating_add(i64::from(iv.days).saturating_mul(USECS_PER_DAY))
        .saturating_add(iv.micros)
}

/// ISO 8601, `P<y>Y<m>M<d>DT<h>H<m>M<s>S`, each part with the sign PostgreSQL gives it
/// and the seconds without trailing zeros (`io.debezium.time.Interval`).
fn interval_iso(iv: Interval) -> String {
    let seconds = iv.micros % 60_000_000;
    let mut text = format!(
        "P{}Y{}M{}DT{}H{}M",
        iv.months / 12,
        iv.months % 12,
        iv.days,
        iv.micros / 3_600_000_000,
        iv.micros / 60_000_000 % 60,
    );
    if seconds < 0 {
        text.push('-');
    }
    let (whole, fraction) = (seconds.abs() / 1_000_000, seconds.abs() % 1_000_000);
    text.push_str(&whole.to_string());
    if fraction != 0 {
        let digits = format!("{fraction:06}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    text.push('S');
    text
}

/// `"HH:MM:SS[.fraction]Z"` in UTC, the fraction without trailing zeros
/// (`io.debezium.time.ZonedTime`).
fn write_zoned_time(out: &mut Vec<u8>, t: TimeTz) {
    let utc = (t.time.0 - i64::from(t.offset_seconds) * 1_000_000).rem_euclid(USECS_PER_DAY);
    let mut text = String::with_capacity(20);
    push_time_of_day(&mut text, utc, false);
    text.push('Z');
    write_str(out, &text);
}

/// `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` in UTC, always six fraction digits
/// (`io.debezium.time.ZonedTimestamp`); PostgreSQL's infinities as `"infinity"`.
fn write_zoned_timestamp(out: &mut Vec<u8>, ts: TimestampTz) {
    let micros = match ts {
        TimestampTz::Micros(us) => us,
        TimestampTz::Infinity => return write_str(out, "infinity"),
        TimestampTz::NegInfinity => return write_str(out, "-infinity"),
    };
    let days = micros.div_euclid(USECS_PER_DAY);
    let of_day = micros.rem_euclid(USECS_PER_DAY);
    let (year, month, day) =
        cdc_core::value::julian_to_ymd(days + cdc_core::value::POSTGRES_EPOCH_JDATE);
    let mut text = String::with_capacity(32);
    if (0..=9999).contains(&year) {
        text.push_str(&format!("{year:04}-{month:02}-{day:02}T"));
    } else {
        // Java's ISO format signs years outside 0000–9999.
        text.push_str(&format!("{year:+05}-{month:02}-{day:02}T"));
    }
    push_time_of_day(&mut text, of_day, true);
    text.push('Z');
    write_str(out, &text);
}

/// `HH:MM:SS` and the fraction: all six digits when `full`, else without trailing zeros
/// (none when zero).
fn push_time_of_day(text: &mut String, micros: i64, full: bool) {
    let seconds = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    text.push_str(&format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    ));
    if full {
        text.push_str(&format!(".{fraction:06}"));
    } else if fraction != 0 {
        let digits = format!("{fraction:06}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
}

/// A finite numeric: with a declared scale, the unscaled value's bytes
/// (`org.apache.kafka.connect.data.Decimal`); without one, `{"scale":s,"value":bytes}`
/// with the scale of the value (`io.debezium.data.VariableScaleDecimal`).
fn write_numeric(out: &mut Vec<u8>, text: &str, declared: Option<u32>) -> Result<(), Error> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    let scale = declared.unwrap_or(frac_part.len() as u32);
    let mut unscaled: Vec<u8> = Vec::with_capacity(int_part.len() + scale as usize);
    unscaled.extend_from_slice(int_part.as_bytes());
    // The value has the column's scale already (PostgreSQL stores it so); pad or cut
    // should it not.
    let frac = frac_part.as_bytes();
    for i in 0..scale as usize {
        unscaled.push(frac.get(i).copied().unwrap_or(b'0'));
    }
    if !unscaled.iter().all(u8::is_ascii_digit) {
        return Err(Error::rejected(format!("malformed numeric {text:?}")));
    }
    let bytes = twos_complement(&unscaled, negative);
    match declared {
        Some(_) => write_base64(out, &bytes),
        None => {
            out.extend_from_slice(b"{\"scale\":");
            write_int(out, scale);
            out.extend_from_slice(b",\"value\":");
            write_base64(out, &bytes);
            out.push(b'}');
        }
    }
    Ok(())
}

/// The big-endian two's-complement bytes of the decimal integer `digits` (negated when
/// `negative`), as Java's `BigInteger.toByteArray` gives them: as few bytes as hold the
/// sign.
pub(super) fn twos_complement(digits: &[u8], negative: bool) -> Vec<u8> {
    // Base 2^32 limbs, least significant first.
    let mut limbs: Vec<u32> = Vec::new();
    for &d in digits {
        let mut carry = u64::from(d - b'0');
        for limb in &mut limbs {
            let v = u64::from(*limb) * 10 + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    let is_zero = limbs.iter().all(|&l| l == 0);
    if negative && !is_zero {
        // -m is ~(m - 1).
        for limb in &mut limbs {
            let (v, borrow) = limb.overflowing_sub(1);
            *limb = v;
            if !borrow {
                break;
            }
        }
    }
    let mut bytes: Vec<u8> = limbs.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    let first_nonzero = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    bytes.drain(..first_nonzero);
    if negative && !is_zero {
        for b in &mut bytes {
            *b = !*b;
        }
        if bytes.first().is_none_or(|&b| b & 0x80 == 0) {
            bytes.insert(0, 0xFF);
        }
    } else if bytes.first().is_none_or(|&b| b & 0x80 != 0) {
        bytes.insert(0, 0);
    }
    bytes
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `bytea` in `mode`.
fn write_binary(out: &mut Vec<u8>, bytes: &[u8], mode: BinaryMode) {
    match mode {
        BinaryMode::Bytes | BinaryMode::Base64 => write_base64(out, bytes),
        BinaryMode::Base64UrlSafe => write_base64_with(out, bytes, BASE64_URL),
        BinaryMode::Hex => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.reserve(bytes.len() * 2 + 2);
            out.push(b'"');
            for &b in bytes {
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
            out.push(b'"');
        }
    }
}

/// `bytes` as a JSON string in standard base64 with padding (what Kafka's JSON converter
/// writes for Connect `bytes`).
pub(super) fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    write_base64_with(out, bytes, BASE64);
}

fn write_base64_with(out: &mut Vec<u8>, bytes: &[u8], alphabet: &[u8; 64]) {
    out.reserve(bytes.len().div_ceil(3) * 4 + 2);
    out.push(b'"');
    for chunk in bytes.chunks(3) {
        let b0 = chunk.first().copied().unwrap_or(0);
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let n = (u32::from(b0) << 16) | (u32::from(b1) << 8) | u32::from(b2);
        let sextet = |shift: u32| alphabet[((n >> shift) & 63) as usize];
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { b'=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { b'=' });
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        let mut out = Vec::new();
        write_base64(&mut out, bytes);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn unscaled_values_are_java_big_integer_bytes() {
        // The values Debezium wrote for them (benches/debezium/NOTES.md).
        assert_eq!(b64(&twos_complement(b"1234567", false)), "\"EtaH\"");
        assert_eq!(b64(&twos_complement(b"0001", true)), "\"/w==\"");
        assert_eq!(b64(&twos_complement(b"1500", false)), "\"Bdw=\"");
        assert_eq!(b64(&twos_complement(b"100", false)), "\"ZA==\"");
        assert_eq!(b64(&twos_complement(b"0", false)), "\"AA==\"");
        assert_eq!(twos_complement(b"128", false), vec![0x00, 0x80]);
        assert_eq!(twos_complement(b"128", true), vec![0x80]);
        assert_eq!(twos_complement(b"129", true), vec![0xFF, 0x7F]);
        assert_eq!(twos_complement(b"256", true), vec![0xFF, 0x00]);
        assert_eq!(
            b64(&twos_complement(b"314159265358979323846", false)),
            "\"EQfV61tbpNfG\""
        );
    }

    /// The values Debezium 3.6 wrote for the type corpus (`debezium_types.rs`).
    #[test]
    fn bits_money_and_points_are_what_debezium_wrote() {
        let bits = |text: &str| b64(&bit_string_bytes(text).unwrap());
        assert_eq!(bits("1011"), "\"Cw==\"");
        assert_eq!(bits("1010"), "\"Cg==\"");
        assert_eq!(bits("101"), "\"BQ==\"");
        assert_eq!(bits("0000"), "\"\"");
        assert_eq!(bits(""), "\"\"");
        assert_eq!(bits("100000000"), "\"AAE=\"");
        assert_eq!(bit_string_bytes("10x"), None);

        let money = |text: &str| {
            let amount = money_amount(text).unwrap();
            let mut out = Vec::new();
            write_numeric(&mut out, &amount, Some(2)).unwrap();
            (amount, String::from_utf8(out).unwrap())
        };
        assert_eq!(money("$12.34"), ("12.34".into(), "\"BNI=\"".into()));
        assert_eq!(money("-$5.00"), ("-5.00".into(), "\"/gw=\"".into()));
        assert_eq!(money("$1,234.56"), ("1234.56".into(), "\"AeJA\"".into()));
        assert_eq!(money("-$0.01"), ("-0.01".into(), "\"/w==\"".into()));
        assert_eq!(money_amount("1,234.56 €"), None);
        assert_eq!(money_amount("$1.5"), None);

        let point = |text: &str| {
            let (x, y) = point_coordinates(text).unwrap();
            let mut out = Vec::new();
            write_point(&mut out, x, y);
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        assert_eq!(
            point("(1.5,2)"),
            serde_json::json!({"x": 1.5, "y": 2.0, "wkb": "AQEAAAAAAAAAAAD4PwAAAAAAAABA", "srid": null})
        );
        assert_eq!(point("(-0,1e+300)")["wkb"], "AQEAAAAAAAAAAAAAgJx1AIg85Dd+");
        assert_eq!(point_coordinates("(1,2"), None);
    }

    #[test]
    fn arrays_nest_one_level_per_dimension() {
        let column = ColumnSchema {
            name: "a".into(),
            column_type: cdc_core::ColumnType {
                oid: 1016,
                modifier: -1,
                name: None,
                definition: Default::default(),
            },
            nullable: true,
            part_of_key: false,
            generated: false,
        };
        let array = |dims: &[u32], n: i64| {
            Value::Array(Box::new(cdc_core::Array {
                element_type: 20,
                dims: dims
                    .iter()
                    .map(|&len| cdc_core::ArrayDim {
                        len,
                        lower_bound: 1,
                    })
                    .collect(),
                elements: (1..=n).map(Value::Int8).collect(),
            }))
        };
        let write = |value: &Value| {
            let mut out = Vec::new();
            write_value(&mut out, value, &column, Modes::default())
                .map(|()| String::from_utf8(out).unwrap())
        };
        assert_eq!(write(&array(&[2, 2], 4)).unwrap(), "[[1,2],[3,4]]");
        assert_eq!(write(&array(&[1, 2, 1], 2)).unwrap(), "[[[1],[2]]]");
        assert_eq!(write(&array(&[3], 3)).unwrap(), "[1,2,3]");
        assert_eq!(write(&array(&[], 0)).unwrap(), "[]");
        assert!(write(&array(&[2, 2], 3)).is_err());
    }

    #[test]
    fn base64_pads_like_the_standard_alphabet() {
        assert_eq!(b64(b""), "\"\"");
        assert_eq!(b64(&[0x00, 0x01, 0xff]), "\"AAH/\"");
        assert_eq!(b64(&[0xde, 0xad, 0xbe, 0xef]), "\"3q2+7w==\"");
    }
}
