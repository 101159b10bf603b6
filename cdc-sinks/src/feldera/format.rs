//! One [`Value`] → the JSON Feldera's parser expects for the matching column type,
//! written straight into the output buffer.
//!
//! (the table of representations is in the `feldera` module docs).

use cdc_core::value::{
    Date, POSTGRES_EPOCH_JDATE, Time, Timestamp, TimestampTz, USECS_PER_DAY, USECS_PER_SEC,
    julian_to_ymd,
};
use cdc_core::{Array, ArrayDim, Error, Numeric, OtherRepr, Position, TableName, Value};

use super::policy::{
    ArrayBoundsPolicy, NonFinitePolicy, OutOfRangePolicy, Policies, PolicyCase, PolicyLog,
};
use crate::json::{
    InlineJsonError, write_f32, write_f64, write_inline_json, write_int, write_padded, write_str,
    write_text,
};

/// Postgres's `MAXDIM`; bounds the recursion over dimensions.
const MAX_ARRAY_DIMS: usize = 6;

/// Where a value sits, for error messages and policy counts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColumnCtx<'a> {
    pub table: &'a TableName,
    pub relation_id: u32,
    pub column: &'a str,
    pub index: usize,
    pub position: Position,
}

impl ColumnCtx<'_> {
    /// A `Rejected` error naming table, column and position.
    #[cold]
    pub(crate) fn reject(&self, what: impl std::fmt::Display) -> Error {
        Error::rejected(format!(
            "table {}, column {:?}, position {}: {what}",
            self.table, self.column, self.position
        ))
    }

    fn record(&self, log: &mut PolicyLog, case: PolicyCase, action: &'static str) {
        log.record(
            self.relation_id,
            self.table,
            self.index,
            self.column,
            case,
            action,
        );
    }
}

/// Appends the JSON for `value`. On error, `out` may hold a partial value; the caller
/// rolls its frame back.
pub(crate) fn write_value(
    out: &mut Vec<u8>,
    value: &Value,
    policies: &Policies,
    log: &mut PolicyLog,
    ctx: &ColumnCtx<'_>,
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
        Value::Float4(_) | Value::Float8(_) => non_finite(out, value, policies, log, ctx)?,
        Value::Numeric(Numeric::Finite(text)) => {
            // Canonical numeric text is digits, '-' and '.': nothing to escape.
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
        }
        Value::Numeric(_) => non_finite(out, value, policies, log, ctx)?,
        Value::Text(t) => write_text(out, t),
        Value::Bytea(bytes) => write_byte_array(out, bytes),
        Value::Date(d) => match date_ymd(*d) {
            Some(ymd) => {
                out.push(b'"');
                write_ymd(out, ymd);
                out.push(b'"');
            }
            None => out_of_range(out, value, policies, log, ctx)?,
        },
        Value::Time(t) => match time_micros(*t) {
            Some(us) => {
                out.push(b'"');
                write_time_of_day(out, us);
                out.push(b'"');
            }
            None => out_of_range(out, value, policies, log, ctx)?,
        },
        Value::Timestamp(ts) => match split_timestamp(ts_micros(*ts)) {
            Some((ymd, us)) => {
                out.push(b'"');
                write_ymd(out, ymd);
                out.push(b' ');
                write_time_of_day(out, us);
                out.push(b'"');
            }
            None => out_of_range(out, value, policies, log, ctx)?,
        },
        Value::TimestampTz(ts) => match split_timestamp(tstz_micros(*ts)) {
            Some((ymd, us)) => {
                out.push(b'"');
                write_ymd(out, ymd);
                out.push(b'T');
                write_time_of_day(out, us);
                out.extend_from_slice(b"Z\"");
            }
            None => out_of_range(out, value, policies, log, ctx)?,
        },
        Value::TimeTz(v) => write_str(out, &v.to_string()),
        Value::Interval(v) => write_str(out, &v.to_string()),
        Value::Uuid(u) => {
            let mut buf = uuid::Uuid::encode_buffer();
            write_str(out, u.hyphenated().encode_lower(&mut buf));
        }
        Value::Json(t) | Value::Jsonb(t) => {
            write_inline_json(out, t.as_bytes()).map_err(|e| {
                ctx.reject(format!(
                    "{} value is not a single JSON document ({})",
                    value.kind_name(),
                    match e {
                        InlineJsonError::Empty => "empty",
                        InlineJsonError::Unbalanced => "unbalanced brackets or quotes",
                        InlineJsonError::TrailingData => "more than one value",
                    }
                ))
            })?;
        }
        Value::Array(a) => write_array(out, a, policies, log, ctx)?,
        Value::Other(o) => match &o.repr {
            OtherRepr::Text(t) => write_text(out, t),
            OtherRepr::Binary(_) => {
                return Err(ctx.reject(format!(
                    "a value of type {} arrived in binary form, which has no JSON representation; replicate this column in text format",
                    o.type_name
                        .as_ref()
                        .map_or_else(|| format!("oid {}", o.type_oid), |n| n.to_string())
                )));
            }
        },
        Value::Unchanged => {
            return Err(ctx.reject(
                "an unchanged TOAST value (Postgres did not send it) where the full value is needed",
            ));
        }
    }
    Ok(())
}

#[cold]
fn non_finite(
    out: &mut Vec<u8>,
    value: &Value,
    policies: &Policies,
    log: &mut PolicyLog,
    ctx: &ColumnCtx<'_>,
) -> Result<(), Error> {
    let text = value.to_pg_text().unwrap_or_default();
    match policies.non_finite {
        NonFinitePolicy::Error => Err(ctx.reject(format!(
            "{} {text} has no Feldera representation; choose a non-finite policy (null or string)",
            value.kind_name()
        ))),
        NonFinitePolicy::Null => {
            ctx.record(log, PolicyCase::NonFinite, "null");
            out.extend_from_slice(b"null");
            Ok(())
        }
        NonFinitePolicy::String => {
            ctx.record(log, PolicyCase::NonFinite, "string");
            write_str(out, &text);
            Ok(())
        }
    }
}

#[cold]
fn out_of_range(
    out: &mut Vec<u8>,
    value: &Value,
    policies: &Policies,
    log: &mut PolicyLog,
    ctx: &ColumnCtx<'_>,
) -> Result<(), Error> {
    let text = value.to_pg_text().unwrap_or_default();
    match policies.out_of_range {
        OutOfRangePolicy::Error => Err(ctx.reject(format!(
            "{} {text:?} is outside Feldera's range (years 0001-9999, times before 24:00:00); choose an out-of-range policy (null or string)",
            value.kind_name()
        ))),
        OutOfRangePolicy::Null => {
            ctx.record(log, PolicyCase::OutOfRange, "null");
            out.extend_from_slice(b"null");
            Ok(())
        }
        OutOfRangePolicy::String => {
            ctx.record(log, PolicyCase::OutOfRange, "string");
            write_str(out, &text);
            Ok(())
        }
    }
}

fn write_byte_array(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every byte is written as a fixed 4-byte store of its digits and a comma, then the
    // cursor moves by the real length: no per-digit branches or pushes (bytea columns
    // were half of the encoder's time).
    let start = out.len();
    out.resize(start + 2 + bytes.len() * 4, 0);
    let buf = &mut out[start..];
    buf[0] = b'[';
    let mut pos = 1;
    for &b in bytes {
        let (digits, len) = BYTE_AND_COMMA[usize::from(b)];
        buf[pos..pos + 4].copy_from_slice(&digits);
        pos += usize::from(len);
    }
    // Over the last comma, or after the `[` of an empty array.
    let end = if bytes.is_empty() { pos + 1 } else { pos };
    buf[end - 1] = b']';
    out.truncate(start + end);
}

/// For each byte value, its decimal digits followed by a comma, padded to 4 bytes, and
/// the length of digits and comma.
static BYTE_AND_COMMA: [([u8; 4], u8); 256] = byte_and_comma_table();

const fn byte_and_comma_table() -> [([u8; 4], u8); 256] {
    let mut table = [([0u8; 4], 0u8); 256];
    let mut b = 0;
    while b < 256 {
        let (hundreds, tens, ones) = ((b / 100) as u8, (b / 10 % 10) as u8, (b % 10) as u8);
        table[b] = if b >= 100 {
            ([b'0' + hundreds, b'0' + tens, b'0' + ones, b','], 4)
        } else if b >= 10 {
            ([b'0' + tens, b'0' + ones, b',', 0], 3)
        } else {
            ([b'0' + ones, b',', 0, 0], 2)
        };
        b += 1;
    }
    table
}

/// `(year, month, day)` for a date Feldera accepts (years 1..=9999).
fn date_ymd(date: Date) -> Option<(i64, u32, u32)> {
    match date {
        Date::Days(days) => ymd_in_range(i64::from(days)),
        _ => None,
    }
}

fn ymd_in_range(days_since_epoch: i64) -> Option<(i64, u32, u32)> {
    let ymd = julian_to_ymd(days_since_epoch.checked_add(POSTGRES_EPOCH_JDATE)?);
    (1..=9999).contains(&ymd.0).then_some(ymd)
}

fn time_micros(t: Time) -> Option<i64> {
    (0..USECS_PER_DAY).contains(&t.0).then_some(t.0)
}

fn ts_micros(ts: Timestamp) -> Option<i64> {
    match ts {
        Timestamp::Micros(us) => Some(us),
        _ => None,
    }
}

fn tstz_micros(ts: TimestampTz) -> Option<i64> {
    match ts {
        TimestampTz::Micros(us) => Some(us),
        _ => None,
    }
}

/// Date and time of day of a timestamp in Feldera's range.
fn split_timestamp(micros: Option<i64>) -> Option<((i64, u32, u32), i64)> {
    let micros = micros?;
    let ymd = ymd_in_range(micros.div_euclid(USECS_PER_DAY))?;
    Some((ymd, micros.rem_euclid(USECS_PER_DAY)))
}

fn write_ymd(out: &mut Vec<u8>, (year, month, day): (i64, u32, u32)) {
    write_padded(out, year.unsigned_abs(), 4);
    out.push(b'-');
    write_padded(out, u64::from(month), 2);
    out.push(b'-');
    write_padded(out, u64::from(day), 2);
}

/// `HH:MM:SS.ffffff` for `0 <= micros < 24h`.
fn write_time_of_day(out: &mut Vec<u8>, micros: i64) {
    let micros = micros.unsigned_abs();
    let secs = micros / USECS_PER_SEC.unsigned_abs();
    write_padded(out, secs / 3600, 2);
    out.push(b':');
    write_padded(out, secs / 60 % 60, 2);
    out.push(b':');
    write_padded(out, secs % 60, 2);
    out.push(b'.');
    write_padded(out, micros % USECS_PER_SEC.unsigned_abs(), 6);
}

fn write_array(
    out: &mut Vec<u8>,
    array: &Array,
    policies: &Policies,
    log: &mut PolicyLog,
    ctx: &ColumnCtx<'_>,
) -> Result<(), Error> {
    if !array.is_well_formed() {
        return Err(ctx.reject(format!(
            "malformed array: dimensions {:?} do not match {} elements",
            array.dims,
            array.elements.len()
        )));
    }
    if array.dims.len() > MAX_ARRAY_DIMS {
        return Err(ctx.reject(format!(
            "array with {} dimensions (Postgres allows at most {MAX_ARRAY_DIMS})",
            array.dims.len()
        )));
    }
    if array.dims.is_empty() {
        out.extend_from_slice(b"[]");
        return Ok(());
    }
    if array.dims.iter().any(|d| d.lower_bound != 1) {
        match policies.array_bounds {
            ArrayBoundsPolicy::Error => {
                return Err(ctx.reject(format!(
                    "array with lower bounds {:?} cannot be expressed as a JSON array; choose an array-bounds policy (drop_bounds or string)",
                    array.dims.iter().map(|d| d.lower_bound).collect::<Vec<_>>()
                )));
            }
            ArrayBoundsPolicy::DropBounds => {
                ctx.record(log, PolicyCase::ArrayBounds, "drop bounds");
            }
            ArrayBoundsPolicy::String => {
                let Some(text) = Value::Array(Box::new(array.clone())).to_pg_text() else {
                    return Err(ctx.reject("array has elements without a text form"));
                };
                ctx.record(log, PolicyCase::ArrayBounds, "string");
                write_str(out, &text);
                return Ok(());
            }
        }
    }
    let mut elements = array.elements.iter();
    write_dimension(out, &array.dims, &mut elements, policies, log, ctx)
}

fn write_dimension<'a>(
    out: &mut Vec<u8>,
    dims: &[ArrayDim],
    elements: &mut std::slice::Iter<'a, Value>,
    policies: &Policies,
    log: &mut PolicyLog,
    ctx: &ColumnCtx<'_>,
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
            let Some(element) = elements.next() else {
                return Err(ctx.reject("malformed array: fewer elements than its dimensions"));
            };
            write_value(out, element, policies, log, ctx)?;
        } else {
            write_dimension(out, inner, elements, policies, log, ctx)?;
        }
    }
    out.push(b']');
    Ok(())
}

#[cfg(test)]
mod byte_array_tests {
    use super::write_byte_array;

    fn plain(bytes: &[u8]) -> String {
        let digits: Vec<String> = bytes.iter().map(u8::to_string).collect();
        format!("[{}]", digits.join(","))
    }

    #[test]
    fn every_byte_value_and_length_matches_plain_formatting() {
        let all: Vec<u8> = (0..=255).collect();
        for len in [0, 1, 2, 3, 17, 256] {
            for offset in [0, 9, 99, 250] {
                let bytes: Vec<u8> = all.iter().cycle().skip(offset).take(len).copied().collect();
                let mut out = b"prefix".to_vec();
                write_byte_array(&mut out, &bytes);
                assert_eq!(
                    std::str::from_utf8(&out).unwrap(),
                    format!("prefix{}", plain(&bytes))
                );
            }
        }
    }
}
