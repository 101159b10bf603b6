//! Round trips: the emitted JSON parses back (serde_json) to the same values.

use cdc_core::value::{
    Date, POSTGRES_EPOCH_JDATE, Time, Timestamp, TimestampTz, USECS_PER_DAY, USECS_PER_SEC,
    ymd_to_julian,
};
use cdc_core::{Array, ErrorKind, Numeric, ReplicaIdentity, Value};
use proptest::prelude::*;

use super::*;
use crate::testing::{self, insert, pos, text};

fn encoder(policies: Policies) -> FelderaEncoder {
    FelderaEncoder::new(EncoderOptions {
        policies,
        table_key: false,
    })
}

fn parse_ymd(s: &str) -> (i64, u32, u32) {
    (
        s[0..4].parse().unwrap(),
        s[5..7].parse().unwrap(),
        s[8..10].parse().unwrap(),
    )
}

fn parse_time(s: &str) -> i64 {
    assert_eq!(s.len(), 15, "{s}");
    let h: i64 = s[0..2].parse().unwrap();
    let m: i64 = s[3..5].parse().unwrap();
    let sec: i64 = s[6..8].parse().unwrap();
    let us: i64 = s[9..15].parse().unwrap();
    ((h * 60 + m) * 60 + sec) * USECS_PER_SEC + us
}

fn parse_ts(s: &str, sep: char, suffix: &str) -> i64 {
    let body = s.strip_suffix(suffix).unwrap();
    assert_eq!(body.as_bytes()[10] as char, sep);
    let (y, m, d) = parse_ymd(&body[..10]);
    (ymd_to_julian(y, m, d) - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY + parse_time(&body[11..])
}

/// Whether `s` has `pattern`'s shape (`d` = an ASCII digit, anything else literal).
fn shaped(s: &str, pattern: &str) -> bool {
    s.len() == pattern.len()
        && s.bytes().zip(pattern.bytes()).all(|(c, p)| {
            if p == b'd' {
                c.is_ascii_digit()
            } else {
                c == p
            }
        })
}

/// Rebuilds a value of `original`'s kind from the JSON the encoder produced.
fn decode(original: &Value, json: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match (original, json) {
        (Value::Float4(_) | Value::Float8(_) | Value::Numeric(_), J::String(s))
            if !matches!(original, Value::Numeric(Numeric::Finite(_))) =>
        {
            assert_eq!(Some(s.clone()), original.to_pg_text());
            original.clone()
        }
        (Value::Null, J::Null) => Value::Null,
        (Value::Bool(_), J::Bool(b)) => Value::Bool(*b),
        (Value::Int2(_), J::Number(n)) => Value::Int2(n.as_i64().unwrap() as i16),
        (Value::Int4(_), J::Number(n)) => Value::Int4(n.as_i64().unwrap() as i32),
        (Value::Int8(_), J::Number(n)) => Value::Int8(n.as_i64().unwrap()),
        (Value::Oid(_), J::Number(n)) => Value::Oid(n.as_u64().unwrap() as u32),
        (Value::Float4(_), J::Number(n)) => Value::Float4(n.as_f64().unwrap() as f32),
        (Value::Float8(_), J::Number(n)) => Value::Float8(n.as_f64().unwrap()),
        (Value::Numeric(_), J::String(s)) => Value::Numeric(s.parse().unwrap()),
        (Value::Text(_), J::String(s)) => text(s),
        (Value::Bytea(_), J::Array(a)) => Value::Bytea(
            a.iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect::<Vec<u8>>()
                .into(),
        ),
        (Value::Date(_), J::String(s)) if shaped(s, "dddd-dd-dd") => {
            let (y, m, d) = parse_ymd(s);
            Value::Date(Date::Days(
                (ymd_to_julian(y, m, d) - POSTGRES_EPOCH_JDATE) as i32,
            ))
        }
        (Value::Time(_), J::String(s)) if shaped(s, "dd:dd:dd.dddddd") => {
            Value::Time(Time(parse_time(s)))
        }
        (Value::Timestamp(_), J::String(s)) if shaped(s, "dddd-dd-dd dd:dd:dd.dddddd") => {
            Value::Timestamp(Timestamp::Micros(parse_ts(s, ' ', "")))
        }
        (Value::TimestampTz(_), J::String(s)) if shaped(s, "dddd-dd-ddTdd:dd:dd.ddddddZ") => {
            Value::TimestampTz(TimestampTz::Micros(parse_ts(s, 'T', "Z")))
        }
        (Value::Uuid(_), J::String(s)) => Value::Uuid(s.parse().unwrap()),
        (Value::Json(t) | Value::Jsonb(t), j) => {
            assert_eq!(&serde_json::from_str::<J>(t).unwrap(), j);
            original.clone()
        }
        (Value::Array(a), J::Array(_)) => {
            let mut flat = Vec::new();
            flatten(json, a.dims.len(), &mut flat);
            assert_eq!(flat.len(), a.elements.len());
            let elements = a
                .elements
                .iter()
                .zip(&flat)
                .map(|(o, j)| decode(o, j))
                .collect();
            Value::Array(Box::new(Array {
                elements,
                ..(**a).clone()
            }))
        }
        (Value::Array(a), J::String(s)) => {
            assert_eq!(Some(s.clone()), original.to_pg_text(), "{a:?}");
            original.clone()
        }
        (_, J::String(s)) => {
            assert_eq!(Some(s.clone()), original.to_pg_text());
            original.clone()
        }
        (o, j) => panic!("unexpected JSON {j} for {o:?}"),
    }
}

fn flatten<'a>(json: &'a serde_json::Value, depth: usize, out: &mut Vec<&'a serde_json::Value>) {
    match (depth, json) {
        (0, j) => out.push(j),
        (d, serde_json::Value::Array(items)) => items.iter().for_each(|i| flatten(i, d - 1, out)),
        (_, j) => panic!("expected nested array, got {j}"),
    }
}

fn round_trip(policies: Policies, row: Vec<Value>) -> Result<(), TestCaseError> {
    let columns: Vec<(String, u32)> = (0..row.len()).map(|i| (format!("c{i} \"q\""), 0)).collect();
    let cols: Vec<(&str, u32)> = columns.iter().map(|(n, o)| (n.as_str(), *o)).collect();
    let schema = testing::table("rt", &cols, &[], ReplicaIdentity::Default);
    let mut enc = encoder(policies);
    let mut frame = Frame::new(Framing::Lines);
    enc.encode_event(&insert(pos(1, 1), &schema, row.clone()), &mut frame)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let text = std::str::from_utf8(frame.bytes()).unwrap();
    prop_assert_eq!(text.matches('\n').count(), 1, "one line: {}", text);
    let parsed: serde_json::Value = serde_json::from_str(text).unwrap();
    let object = parsed["insert"].as_object().unwrap();
    prop_assert_eq!(object.len(), row.len());
    for ((name, _), original) in columns.iter().zip(&row) {
        let back = decode(original, &object[name.as_str()]);
        prop_assert_eq!(&back, original);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn rows_in_feldera_range_round_trip_with_default_policies(row in proptest::collection::vec(testing::arb_value(true), 1..8)) {
        round_trip(Policies::default(), row)?;
    }

    #[test]
    fn any_rows_round_trip_with_string_policies(row in proptest::collection::vec(testing::arb_value(false), 1..8)) {
        let policies = Policies {
            non_finite: NonFinitePolicy::String,
            out_of_range: OutOfRangePolicy::String,
            array_bounds: ArrayBoundsPolicy::String,
            truncate: TruncatePolicy::Error,
        };
        round_trip(policies, row)?;
    }

    #[test]
    fn default_policies_accept_or_reject_but_never_emit_invalid_json(row in proptest::collection::vec(testing::arb_value(false), 1..8)) {
        let schema = testing::table("x", &[("a", 0)], &[], ReplicaIdentity::Default);
        let mut enc = encoder(Policies::default());
        let mut frame = Frame::new(Framing::Lines);
        for (i, v) in row.into_iter().enumerate() {
            match enc.encode_event(&insert(pos(1, i as u64), &schema, vec![v]), &mut frame) {
                Ok(()) => {}
                Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Rejected),
            }
        }
        for line in std::str::from_utf8(frame.bytes()).unwrap().lines() {
            prop_assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "{}", line);
        }
    }
}
