//! Postgres's text output of a [`Value`], as `SELECT value::text` prints it with
//! `DateStyle = ISO`, `IntervalStyle = postgres`, `TimeZone = UTC`, `bytea_output = hex`
//! and the default `extra_float_digits = 1`.
//!
//! Used by sinks that pass a value on as Postgres text (types their target has no column
//! for) and by tests that compare decoded values with what Postgres itself prints.

use std::fmt::Write as _;

use super::{Array, OtherRepr, Value};

const BOX_OID: u32 = 603;

impl Value {
    /// The value in Postgres's text output format, or `None` for NULL, an unchanged TOAST
    /// value, and an [`OtherRepr::Binary`] value (whose text only the server can produce).
    pub fn to_pg_text(&self) -> Option<String> {
        let mut out = String::new();
        write_pg_text(self, &mut out).then_some(out)
    }
}

/// Appends the text of `value` to `out`; false when it has none (see `to_pg_text`).
fn write_pg_text(value: &Value, out: &mut String) -> bool {
    match value {
        Value::Null | Value::Unchanged => return false,
        Value::Bool(b) => out.push(if *b { 't' } else { 'f' }),
        Value::Int2(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Int4(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Int8(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Oid(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Float4(v) => out.push_str(&format_float4(*v)),
        Value::Float8(v) => out.push_str(&format_float8(*v)),
        Value::Numeric(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Text(t) | Value::Json(t) | Value::Jsonb(t) => out.push_str(t),
        Value::Bytea(b) => {
            out.reserve(2 + b.len() * 2);
            out.push_str("\\x");
            for byte in b.iter() {
                let _ = write!(out, "{byte:02x}");
            }
        }
        Value::Date(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Time(v) => {
            let _ = write!(out, "{v}");
        }
        Value::TimeTz(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Timestamp(v) => {
            let _ = write!(out, "{v}");
        }
        Value::TimestampTz(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Interval(v) => {
            let _ = write!(out, "{v}");
        }
        Value::Uuid(v) => {
            let _ = write!(out, "{}", v.hyphenated());
        }
        Value::Array(a) => return write_array(a, out),
        Value::Other(o) => match &o.repr {
            OtherRepr::Text(t) => out.push_str(t),
            OtherRepr::Binary(_) => return false,
        },
    }
    true
}

fn write_array(array: &Array, out: &mut String) -> bool {
    if array.dims.is_empty() {
        out.push_str("{}");
        return true;
    }
    if array.dims.iter().any(|d| d.lower_bound != 1) {
        for d in &array.dims {
            let upper = i64::from(d.lower_bound) + i64::from(d.len) - 1;
            let _ = write!(out, "[{}:{}]", d.lower_bound, upper);
        }
        out.push('=');
    }
    let delimiter = if array.element_type == BOX_OID {
        ';'
    } else {
        ','
    };
    let mut elements = array.elements.iter();
    write_dimension(&array.dims, 0, &mut elements, delimiter, out)
}

fn write_dimension<'a>(
    dims: &[super::ArrayDim],
    level: usize,
    elements: &mut impl Iterator<Item = &'a Value>,
    delimiter: char,
    out: &mut String,
) -> bool {
    let Some(dim) = dims.get(level) else {
        return false;
    };
    out.push('{');
    for i in 0..dim.len {
        if i > 0 {
            out.push(delimiter);
        }
        if level + 1 < dims.len() {
            if !write_dimension(dims, level + 1, elements, delimiter, out) {
                return false;
            }
        } else {
            match elements.next() {
                None => return false,
                Some(Value::Null) => out.push_str("NULL"),
                Some(element) => {
                    let mut text = String::new();
                    if !write_pg_text(element, &mut text) {
                        return false;
                    }
                    write_array_element(&text, delimiter, out);
                }
            }
        }
    }
    out.push('}');
    true
}

/// Quotes an element as `array_out` does: when empty, `NULL`, or containing a quote,
/// backslash, brace, the delimiter or white space.
fn write_array_element(text: &str, delimiter: char, out: &mut String) {
    let needs_quotes = text.is_empty()
        || text.eq_ignore_ascii_case("NULL")
        || text.chars().any(|c| {
            matches!(
                c,
                '"' | '\\' | '{' | '}' | ' ' | '\t' | '\n' | '\r' | '\x0B' | '\x0C'
            ) || c == delimiter
        });
    if !needs_quotes {
        out.push_str(text);
        return;
    }
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// Formats a `float8` as Postgres does: the shortest text that reads back as the same
/// value, in `%g`-like style (exponent form below 1e-4 or from 1e15), `NaN`, `Infinity`.
pub fn format_float8(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    shortest_to_pg(&format!("{v:e}"), 15)
}

/// Formats a `float4` as Postgres does (exponent form below 1e-4 or from 1e6).
pub fn format_float4(v: f32) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    shortest_to_pg(&float4_digits(v), 6)
}

/// The shortest `LowerExp` digits of `v` as Postgres's Ryu chooses them: they read back
/// as `v`, never lie exactly halfway between two floats (Rust's shortest output may: that
/// still round-trips, by ties-to-even), and ties between equally near candidates go to the
/// even digit. Midpoints of adjacent `f32`s are exact in `f64`, which makes the check
/// exact.
fn float4_digits(v: f32) -> String {
    let shortest = format!("{v:e}");
    let digits = shortest
        .split('e')
        .next()
        .map_or(0, |m| m.chars().filter(char::is_ascii_digit).count());
    // Rust's shortest digits have the right length, but where two candidates of that
    // length are equally near, Ryu breaks the tie to even; and a candidate exactly halfway
    // between two floats is refused, which takes one more digit.
    for significant in digits..digits + 12 {
        let candidate = round_half_even(v, significant);
        if candidate.parse::<f32>() == Ok(v) && !is_f32_midpoint(&candidate) {
            return trim_exp_mantissa(&candidate);
        }
    }
    shortest
}

/// `v` rounded to `significant` digits, ties to even (as Ryu does), in `LowerExp` form.
fn round_half_even(v: f32, significant: usize) -> String {
    // Every f32 is exact in f64, and 120 fractional digits hold its whole expansion.
    let exact = format!("{:.120e}", f64::from(v).abs());
    let (mantissa, exp) = exact.split_once('e').unwrap_or((&exact, "0"));
    let mut exp: i32 = exp.parse().unwrap_or(0);
    let all: Vec<u8> = mantissa
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    let keep = significant.min(all.len());
    let mut kept: Vec<u8> = all[..keep].to_vec();
    let rest = &all[keep..];
    let round_up = match rest.first() {
        Some(d) if *d > 5 => true,
        Some(5) if rest[1..].iter().any(|d| *d != 0) => true,
        Some(5) => kept.last().is_some_and(|d| d % 2 == 1),
        _ => false,
    };
    if round_up {
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, 1);
                kept.pop();
                exp += 1;
                break;
            }
            i -= 1;
            if kept[i] == 9 {
                kept[i] = 0;
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    let mut out = String::new();
    if v.is_sign_negative() {
        out.push('-');
    }
    for (i, d) in kept.iter().enumerate() {
        if i == 1 {
            out.push('.');
        }
        out.push(char::from(b'0' + d));
    }
    let _ = write!(out, "e{exp}");
    out
}

/// Whether the decimal `text` is exactly the midpoint between two adjacent `f32` values.
fn is_f32_midpoint(text: &str) -> bool {
    let Ok(wide) = text.parse::<f64>() else {
        return false;
    };
    let narrow = wide as f32;
    if f64::from(narrow) == wide || !wide.is_finite() {
        return false;
    }
    let (below, above) = if f64::from(narrow) < wide {
        (narrow, narrow.next_up())
    } else {
        (narrow.next_down(), narrow)
    };
    (f64::from(below) + f64::from(above)) / 2.0 == wide
}

/// Drops trailing zeros of the mantissa of a `LowerExp` string (`1.2300e5` → `1.23e5`).
fn trim_exp_mantissa(text: &str) -> String {
    match text.split_once('e') {
        Some((mantissa, exp)) if mantissa.contains('.') => {
            let trimmed = mantissa.trim_end_matches('0').trim_end_matches('.');
            format!("{trimmed}e{exp}")
        }
        _ => text.to_owned(),
    }
}

/// Rewrites Rust's shortest `LowerExp` output (`-1.2345e-5`) in Postgres's style.
fn shortest_to_pg(sci: &str, fixed_below_exp: i32) -> String {
    let (negative, body) = match sci.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, sci),
    };
    let (mantissa, exp) = body.split_once('e').unwrap_or((body, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if negative {
        out.push('-');
    }
    if digits == "0" {
        out.push('0');
        return out;
    }
    if (-4..fixed_below_exp).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.unsigned_abs());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{ArrayDim, Text};
    use bytes::Bytes;

    #[test]
    fn floats_like_postgres() {
        assert_eq!(format_float8(1e15), "1e+15");
        assert_eq!(format_float8(1e14), "100000000000000");
        assert_eq!(format_float8(0.0001), "0.0001");
        assert_eq!(format_float8(0.00001), "1e-05");
        assert_eq!(format_float8(-1.5), "-1.5");
        assert_eq!(format_float8(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_float8(-0.0), "-0");
        assert_eq!(
            format_float8(1.7976931348623157e308),
            "1.7976931348623157e+308"
        );
        assert_eq!(format_float8(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(format_float4(1e6), "1e+06");
        assert_eq!(format_float4(100000.0), "100000");
        assert_eq!(format_float4(1.1), "1.1");
        // Rust's shortest output would be the halfway decimal 8.731366e+07.
        assert_eq!(format_float4(87_313_664.0), "8.7313664e+07");
        // …and one more digit is a tie itself, broken to even as Ryu does.
        assert_eq!(
            format_float4("2563072.25".parse().unwrap()),
            "2.5630722e+06"
        );
        assert_eq!(
            format_float4("-3588616.25".parse().unwrap()),
            "-3.5886162e+06"
        );
    }

    #[test]
    fn arrays_quote_and_decorate() {
        let a = Array {
            element_type: 25,
            dims: vec![ArrayDim {
                len: 4,
                lower_bound: 1,
            }],
            elements: vec![
                Value::Text(Text::from("a b")),
                Value::Null,
                Value::Text(Text::from("null")),
                Value::Text(Text::from("q\"\\")),
            ],
        };
        assert_eq!(
            Value::Array(Box::new(a)).to_pg_text().unwrap(),
            r#"{"a b",NULL,"null","q\"\\"}"#
        );
        let a = Array {
            element_type: 23,
            dims: vec![
                ArrayDim {
                    len: 2,
                    lower_bound: 0,
                },
                ArrayDim {
                    len: 1,
                    lower_bound: 1,
                },
            ],
            elements: vec![Value::Int4(1), Value::Int4(2)],
        };
        assert_eq!(
            Value::Array(Box::new(a)).to_pg_text().unwrap(),
            "[0:1][1:1]={{1},{2}}"
        );
        assert_eq!(
            Value::Array(Box::new(Array::one_dimensional(23, vec![])))
                .to_pg_text()
                .unwrap(),
            "{}"
        );
    }

    #[test]
    fn bytea_hex_and_no_text_for_null() {
        assert_eq!(
            Value::Bytea(Bytes::from_static(b"\xde\xad"))
                .to_pg_text()
                .unwrap(),
            "\\xdead"
        );
        assert_eq!(Value::Null.to_pg_text(), None);
        assert_eq!(Value::Unchanged.to_pg_text(), None);
    }
}
