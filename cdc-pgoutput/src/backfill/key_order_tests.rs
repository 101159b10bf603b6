use std::cmp::Ordering::{self, Equal, Greater, Less};

use bytes::Bytes;
use cdc_core::value::{Date, Interval, Time, Timestamp, TimestampTz};
use cdc_core::{Numeric, Text};
use proptest::prelude::*;

use super::*;

fn column(type_oid: TypeOid) -> KeyColumnOrder {
    KeyColumnOrder::for_column(type_oid, KeyCollation::NotCollatable).unwrap()
}

fn c_text(type_oid: TypeOid) -> KeyColumnOrder {
    KeyColumnOrder::for_column(type_oid, KeyCollation::Libc { collate: "C" }).unwrap()
}

fn cmp1(order: KeyColumnOrder, a: Value, b: Value) -> Ordering {
    KeyOrder::new(vec![order]).compare(&[a], &[b]).unwrap()
}

/// `groups` of equal values, in ascending order: checks every pair of values.
fn assert_order(order: KeyColumnOrder, groups: &[Vec<Value>]) {
    let key = KeyOrder::new(vec![order]);
    let flat: Vec<(usize, &Value)> = groups
        .iter()
        .enumerate()
        .flat_map(|(g, vs)| vs.iter().map(move |v| (g, v)))
        .collect();
    for &(ga, a) in &flat {
        for &(gb, b) in &flat {
            let got = key
                .compare(std::slice::from_ref(a), std::slice::from_ref(b))
                .unwrap();
            assert_eq!(got, ga.cmp(&gb), "{a:?} vs {b:?}");
        }
    }
}

fn text(s: &str) -> Value {
    Value::Text(Text::from(s))
}

fn num(s: &str) -> Value {
    Value::Numeric(s.parse().unwrap())
}

#[test]
fn orderable_types_and_collations() {
    for oid in [
        oids::BOOL,
        oids::INT2,
        oids::INT4,
        oids::INT8,
        oids::OID,
        oids::FLOAT4,
        oids::FLOAT8,
        oids::NUMERIC,
        oids::DATE,
        oids::TIME,
        oids::TIMESTAMP,
        oids::TIMESTAMPTZ,
        oids::UUID,
        oids::BYTEA,
    ] {
        assert_eq!(column(oid).type_oid(), oid);
        assert_eq!(
            KeyColumnOrder::for_column(oid, KeyCollation::Libc { collate: "C" }),
            Err(UnsupportedKeyColumn::UnexpectedCollation {
                type_oid: oid,
                collation: "libc collation \"C\"".to_owned()
            })
        );
    }
    for oid in [oids::TEXT, oids::VARCHAR, oids::NAME, oids::BPCHAR] {
        for ok in [
            KeyCollation::Libc { collate: "C" },
            KeyCollation::Libc { collate: "POSIX" },
            KeyCollation::Builtin { locale: "C" },
        ] {
            assert_eq!(
                KeyColumnOrder::for_column(oid, ok).map(|c| c.type_oid()),
                Ok(oid)
            );
        }
        assert_eq!(
            KeyColumnOrder::for_column(oid, KeyCollation::NotCollatable),
            Err(UnsupportedKeyColumn::MissingCollation { type_oid: oid })
        );
        for refused in [
            KeyCollation::Libc {
                collate: "en_US.utf8",
            },
            KeyCollation::Libc { collate: "C.UTF-8" },
            KeyCollation::Libc { collate: "c" },
            KeyCollation::Libc { collate: "default" },
            KeyCollation::Icu { locale: "und" },
            KeyCollation::Builtin { locale: "C.UTF-8" },
        ] {
            assert!(
                matches!(
                    KeyColumnOrder::for_column(oid, refused),
                    Err(UnsupportedKeyColumn::Collation { type_oid, .. }) if type_oid == oid
                ),
                "{oid} {refused:?}"
            );
        }
    }
}

#[test]
fn unsupported_types_say_why() {
    for oid in [
        oids::INTERVAL,
        oids::TIMETZ,
        oids::JSON,
        oids::JSONB,
        oids::CHAR,
        oids::XID,
        oids::CID,
        oids::INT4_ARRAY,
        oids::TEXT_ARRAY,
        oids::MONEY,
        oids::INET,
        oids::REGCLASS,
        99_999,
    ] {
        for collation in [
            KeyCollation::NotCollatable,
            KeyCollation::Libc { collate: "C" },
        ] {
            assert_eq!(
                KeyColumnOrder::for_column(oid, collation),
                Err(UnsupportedKeyColumn::Type { type_oid: oid })
            );
        }
    }
    let e = KeyColumnOrder::for_column(oids::INTERVAL, KeyCollation::NotCollatable)
        .unwrap_err()
        .to_string();
    assert!(e.contains("pg_catalog.interval (OID 1186)"), "{e}");
    let e = KeyColumnOrder::for_column(oids::TEXT, KeyCollation::Icu { locale: "en-US" })
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pg_catalog.text") && e.contains("ICU collation \"en-US\""),
        "{e}"
    );
    let e = KeyColumnOrder::for_column(99_999, KeyCollation::NotCollatable)
        .unwrap_err()
        .to_string();
    assert!(e.contains("OID 99999"), "{e}");
}

#[test]
fn malformed_keys_are_errors_not_panics() {
    let key = KeyOrder::new(vec![column(oids::INT4), c_text(oids::TEXT)]);
    let good = [Value::Int4(1), text("a")];
    assert_eq!(
        key.compare(&good, &[Value::Int4(1)]),
        Err(KeyOrderError::Arity {
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        key.compare(&[], &good),
        Err(KeyOrderError::Arity {
            expected: 2,
            got: 0
        })
    );
    assert_eq!(
        key.compare(&good, &[Value::Null, text("a")]),
        Err(KeyOrderError::Null { column: 0 })
    );
    assert_eq!(
        key.compare(&good, &[Value::Int8(1), text("a")]),
        Err(KeyOrderError::TypeMismatch {
            column: 0,
            expected: "int4",
            found: "int8"
        })
    );
    // Checked even though column 0 already decides.
    assert_eq!(
        key.compare(&good, &[Value::Int4(2), Value::Unchanged]),
        Err(KeyOrderError::TypeMismatch {
            column: 1,
            expected: "text",
            found: "unchanged-toast"
        })
    );
    assert_eq!(
        key.compare(&[Value::Int4(0), Value::Null], &good),
        Err(KeyOrderError::Null { column: 1 })
    );
    let bad = Value::Numeric(Numeric::Finite(Text::from("1.2.3")));
    let numeric = KeyOrder::new(vec![column(oids::NUMERIC)]);
    assert_eq!(
        numeric.compare(&[num("1")], std::slice::from_ref(&bad)),
        Err(KeyOrderError::InvalidNumeric {
            column: 0,
            start: "1.2.3".to_owned()
        })
    );
    for raw in ["", "-", ".5", "1.", "+1", "1e5", " 1", "١"] {
        let v = Value::Numeric(Numeric::Finite(Text::from(raw)));
        assert!(
            matches!(
                numeric.compare(std::slice::from_ref(&v), std::slice::from_ref(&v)),
                Err(KeyOrderError::InvalidNumeric { .. })
            ),
            "{raw:?}"
        );
    }
    let e = key
        .compare(&good, &[Value::Int4(1), Value::Bytea(Bytes::new())])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("column 1") && e.contains("text") && e.contains("bytea"),
        "{e}"
    );
    // No columns: every two (empty) keys are equal.
    assert_eq!(KeyOrder::new(vec![]).compare(&[], &[]), Ok(Equal));
}

#[test]
fn integers_bool_and_oid() {
    assert_order(
        column(oids::INT2),
        &[
            vec![Value::Int2(i16::MIN)],
            vec![Value::Int2(-1)],
            vec![Value::Int2(0)],
            vec![Value::Int2(i16::MAX)],
        ],
    );
    assert_order(
        column(oids::INT8),
        &[
            vec![Value::Int8(i64::MIN)],
            vec![Value::Int8(0)],
            vec![Value::Int8(i64::MAX)],
        ],
    );
    assert_order(
        column(oids::BOOL),
        &[vec![Value::Bool(false)], vec![Value::Bool(true)]],
    );
    // oid is unsigned: 2^31 sorts after 2^31 - 1.
    assert_order(
        column(oids::OID),
        &[
            vec![Value::Oid(0)],
            vec![Value::Oid(0x7fff_ffff)],
            vec![Value::Oid(0x8000_0000)],
            vec![Value::Oid(u32::MAX)],
        ],
    );
}

#[test]
fn floats_in_postgres_order() {
    let negative_nan = f64::from_bits(f64::NAN.to_bits() | (1 << 63));
    let payload_nan = f64::from_bits(0x7ff0_0000_0000_0001);
    assert!(negative_nan.is_nan() && payload_nan.is_nan());
    assert_order(
        column(oids::FLOAT8),
        &[
            vec![Value::Float8(f64::NEG_INFINITY)],
            vec![Value::Float8(f64::MIN)],
            vec![Value::Float8(-1.0)],
            vec![Value::Float8(-5e-324)],
            vec![Value::Float8(-0.0), Value::Float8(0.0)],
            vec![Value::Float8(5e-324)],
            vec![Value::Float8(1.0)],
            vec![Value::Float8(f64::MAX)],
            vec![Value::Float8(f64::INFINITY)],
            vec![
                Value::Float8(f64::NAN),
                Value::Float8(negative_nan),
                Value::Float8(payload_nan),
            ],
        ],
    );
    assert_order(
        column(oids::FLOAT4),
        &[
            vec![Value::Float4(f32::NEG_INFINITY)],
            vec![Value::Float4(f32::MIN)],
            vec![Value::Float4(-0.0), Value::Float4(0.0)],
            vec![Value::Float4(1e-45)],
            vec![Value::Float4(f32::MAX)],
            vec![Value::Float4(f32::INFINITY)],
            vec![Value::Float4(f32::NAN), Value::Float4(-f32::NAN)],
        ],
    );
}

#[test]
fn numerics_by_value_not_scale() {
    let group = |xs: &[&str]| xs.iter().map(|s| num(s)).collect::<Vec<_>>();
    let huge = format!("{}.5", "9".repeat(1000));
    let tiny = format!("0.{}1", "0".repeat(999));
    assert_order(
        column(oids::NUMERIC),
        &[
            group(&["-Infinity"]),
            group(&[&format!("-{huge}")]),
            group(&["-100", "-100.000"]),
            group(&["-99.99"]),
            group(&["-10"]),
            group(&["-9.5", "-9.50"]),
            group(&["-9"]),
            group(&["-0.5"]),
            group(&["-0.05"]),
            group(&[&format!("-{tiny}")]),
            group(&["0", "0.0", "0.000", "-0", "-0.00", "000"]),
            group(&[&tiny]),
            group(&["0.00000001"]),
            group(&["0.0000001"]),
            group(&["0.1", "0.10"]),
            group(&["0.11"]),
            group(&["0.2"]),
            group(&["1", "1.0", "1.00", "01.0"]),
            group(&["1.000001"]),
            group(&["9.99"]),
            group(&["10"]),
            group(&["99999.9999"]),
            group(&["100000"]),
            group(&[&huge]),
            group(&["Infinity"]),
            group(&["NaN"]),
        ],
    );
}

#[test]
fn dates_and_timestamps_with_infinities() {
    assert_order(
        column(oids::DATE),
        &[
            vec![
                Value::Date(Date::NegInfinity),
                Value::Date(Date::Days(i32::MIN)),
            ],
            vec![Value::Date(Date::Days(i32::MIN + 1))],
            vec![Value::Date(Date::Days(-1))],
            vec![Value::Date(Date::Days(0))],
            vec![Value::Date(Date::Days(i32::MAX - 1))],
            vec![
                Value::Date(Date::Infinity),
                Value::Date(Date::Days(i32::MAX)),
            ],
        ],
    );
    for (oid, wrap) in [
        (
            oids::TIMESTAMP,
            (|t: Option<i64>, inf: i8| {
                Value::Timestamp(match (t, inf) {
                    (Some(us), _) => Timestamp::Micros(us),
                    (None, i) if i < 0 => Timestamp::NegInfinity,
                    _ => Timestamp::Infinity,
                })
            }) as fn(Option<i64>, i8) -> Value,
        ),
        (oids::TIMESTAMPTZ, |t, inf| {
            Value::TimestampTz(match (t, inf) {
                (Some(us), _) => TimestampTz::Micros(us),
                (None, i) if i < 0 => TimestampTz::NegInfinity,
                _ => TimestampTz::Infinity,
            })
        }),
    ] {
        assert_order(
            column(oid),
            &[
                vec![wrap(None, -1), wrap(Some(i64::MIN), 0)],
                vec![wrap(Some(i64::MIN + 1), 0)],
                vec![wrap(Some(-1), 0)],
                vec![wrap(Some(0), 0)],
                vec![wrap(Some(i64::MAX - 1), 0)],
                vec![wrap(None, 1), wrap(Some(i64::MAX), 0)],
            ],
        );
    }
    assert_order(
        column(oids::TIME),
        &[
            vec![Value::Time(Time(0))],
            vec![Value::Time(Time(1))],
            vec![Value::Time(Time(86_400_000_000))],
        ],
    );
    assert!(matches!(
        KeyOrder::new(vec![column(oids::TIME)]).compare(
            &[Value::Time(Time(0))],
            &[Value::Interval(Interval::default())]
        ),
        Err(KeyOrderError::TypeMismatch { .. })
    ));
}

#[test]
fn uuid_and_bytea_bytewise() {
    let uuid = |first: u8, last: u8| {
        let mut b = [0u8; 16];
        b[0] = first;
        b[15] = last;
        Value::Uuid(uuid::Uuid::from_bytes(b))
    };
    assert_order(
        column(oids::UUID),
        &[
            vec![uuid(0, 0)],
            vec![uuid(0, 1)],
            vec![uuid(0x7f, 0)],
            vec![uuid(0x80, 0)],
            vec![uuid(0xff, 0xff)],
        ],
    );
    let b = |bytes: &'static [u8]| Value::Bytea(Bytes::from_static(bytes));
    assert_order(
        column(oids::BYTEA),
        &[
            vec![b(b"")],
            vec![b(b"\0")],
            vec![b(b"\0\0")],
            vec![b(b"\0\x01")],
            vec![b(b"\x01")],
            vec![b(b"\x7f")],
            vec![b(b"\x80")],
            vec![b(b"\xff")],
            vec![b(b"\xff\0")],
        ],
    );
}

#[test]
fn strings_in_c_collation_are_utf8_byte_order() {
    let ascending = [
        "",
        "\u{1}",
        "\t",
        " ",
        "A",
        "Z",
        "a",
        "a\u{1}",
        "a ",
        "ab",
        "z",
        "\u{7f}",
        "\u{80}",
        "é",
        "\u{ffff}",
        "😀",
        "\u{10ffff}",
    ];
    for oid in [oids::TEXT, oids::VARCHAR, oids::NAME] {
        let groups: Vec<Vec<Value>> = ascending.iter().map(|s| vec![text(s)]).collect();
        assert_order(c_text(oid), &groups);
    }
}

#[test]
fn bpchar_ignores_trailing_spaces_only() {
    assert_order(
        c_text(oids::BPCHAR),
        &[
            vec![text(""), text(" "), text("   ")],
            vec![text("\t")],
            vec![text(" a")],
            vec![text("a"), text("a "), text("a    ")],
            // 'a\x01' sorts after 'a ' as bpchar (the space is ignored), before it as text.
            vec![text("a\u{1}")],
            vec![text("a\t"), text("a\t ")],
            vec![text("a a")],
            vec![text("ab")],
        ],
    );
    assert_eq!(cmp1(c_text(oids::TEXT), text("a\u{1}"), text("a ")), Less);
    assert_eq!(
        cmp1(c_text(oids::BPCHAR), text("a\u{1}"), text("a ")),
        Greater
    );
}

#[test]
fn composite_keys_compare_column_by_column() {
    let key = KeyOrder::new(vec![column(oids::INT4), c_text(oids::TEXT)]);
    let k = |i: i32, s: &str| [Value::Int4(i), text(s)];
    assert_eq!(key.compare(&k(1, "b"), &k(2, "a")), Ok(Less));
    assert_eq!(key.compare(&k(2, "a"), &k(1, "b")), Ok(Greater));
    assert_eq!(key.compare(&k(1, "a"), &k(1, "b")), Ok(Less));
    assert_eq!(key.compare(&k(1, "b"), &k(1, "b")), Ok(Equal));
    assert_eq!(key.compare(&k(-1, "z"), &k(0, "")), Ok(Less));
}

/// Postgres's float order spelled out as a sort key: NaN last, -0 as 0.
fn float_rank(x: f64) -> (u8, f64) {
    if x.is_nan() {
        (1, 0.0)
    } else if x == 0.0 {
        (0, 0.0)
    } else {
        (0, x)
    }
}

fn floats() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(-f64::NAN),
        Just(0.0),
        Just(-0.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        (-3i8..3).prop_map(f64::from),
    ]
}

/// Canonical-enough decimal text of at most 28 digits (so `to_decimal` is exact), with
/// optional extra leading and trailing zeros.
fn small_decimals() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        "[0-9]{1,12}",
        prop::option::of("[0-9]{1,12}"),
        0usize..3,
    )
        .prop_map(|(neg, int, frac, pad)| {
            let sign = if neg { "-" } else { "" };
            let zeros = "0".repeat(pad);
            match frac {
                Some(f) => format!("{sign}{zeros}{int}.{f}{zeros}"),
                None => format!("{sign}{zeros}{int}"),
            }
        })
}

proptest! {
    #[test]
    fn float8_matches_reference(a in floats(), b in floats()) {
        let expected = float_rank(a).partial_cmp(&float_rank(b)).unwrap();
        let got = cmp1(column(oids::FLOAT8), Value::Float8(a), Value::Float8(b));
        prop_assert_eq!(got, expected);
        let (a4, b4) = (a as f32, b as f32);
        let expected4 = float_rank(f64::from(a4))
            .partial_cmp(&float_rank(f64::from(b4)))
            .unwrap();
        let got4 = cmp1(column(oids::FLOAT4), Value::Float4(a4), Value::Float4(b4));
        prop_assert_eq!(got4, expected4);
    }

    #[test]
    fn numeric_matches_decimal(a in small_decimals(), b in small_decimals()) {
        let (na, nb): (Numeric, Numeric) = (a.parse().unwrap(), b.parse().unwrap());
        let expected = na.to_decimal().unwrap().cmp(&nb.to_decimal().unwrap());
        let got = cmp1(column(oids::NUMERIC), Value::Numeric(na), Value::Numeric(nb));
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn numeric_scale_and_padding_do_not_matter(a in small_decimals(), zeros in 1usize..40) {
        let padded = if a.contains('.') {
            format!("{a}{}", "0".repeat(zeros))
        } else {
            format!("{a}.{}", "0".repeat(zeros))
        };
        prop_assert_eq!(cmp1(column(oids::NUMERIC), num(&a), num(&padded)), Equal);
    }

    #[test]
    fn text_is_byte_order(a in "\\PC{0,6}", b in "\\PC{0,6}") {
        let got = cmp1(c_text(oids::TEXT), text(&a), text(&b));
        prop_assert_eq!(got, a.as_bytes().cmp(b.as_bytes()));
        let trim = |s: &str| s.trim_end_matches(' ').as_bytes().to_vec();
        let got = cmp1(c_text(oids::BPCHAR), text(&a), text(&b));
        prop_assert_eq!(got, trim(&a).cmp(&trim(&b)));
    }

    #[test]
    fn compare_is_antisymmetric(
        a in floats(),
        b in floats(),
        x in small_decimals(),
        y in small_decimals(),
    ) {
        let key = KeyOrder::new(vec![column(oids::FLOAT8), column(oids::NUMERIC)]);
        let ka = [Value::Float8(a), num(&x)];
        let kb = [Value::Float8(b), num(&y)];
        prop_assert_eq!(key.compare(&ka, &kb).unwrap(), key.compare(&kb, &ka).unwrap().reverse());
        prop_assert_eq!(key.compare(&ka, &ka).unwrap(), Equal);
    }
}
