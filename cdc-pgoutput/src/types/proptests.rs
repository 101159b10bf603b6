//! Property tests across the decoders: binary round trips through the encoders, text
//! round trips through cdc-core's `Value::to_pg_text` (which catches disagreements
//! between our formatter and our parser), and arbitrary or mutated input never panics.

use bytes::{Bytes, BytesMut};
use cdc_core::value::{Date, Interval, Time, TimeTz, Timestamp, TimestampTz, USECS_PER_DAY};
use cdc_core::{Array, ArrayDim, Numeric, OtherRepr, OtherValue, Text, Value};
use proptest::prelude::*;

use super::oids::{self, BUILTINS};
use super::{
    ScalarKind, TypeDef, TypeInfo, TypeRegistry, decode_binary, decode_text, encode_binary,
};

/// First and one-past-last microsecond Postgres's timestamps cover (4714-11-24 BC to
/// 294277-01-01).
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// First and one-past-last day of Postgres's dates (4714-11-24 BC to 5874898-01-01).
const MIN_DATE: i32 = -2_451_545;
const END_DATE: i32 = 2_145_031_949;
const ENUM_OID: u32 = 16_400;

/// Which representation `Value::Other` elements get: what that format decodes to.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Text,
    Binary,
}

fn enum_type() -> TypeInfo {
    let mut registry = TypeRegistry::new();
    registry.define(ENUM_OID, Some(Text::from("public.mood")), TypeDef::Enum);
    registry.resolve(ENUM_OID)
}

/// Scalar types under test (RegOid only in binary: its text is a name).
fn scalar_type(mode: Mode) -> impl Strategy<Value = TypeInfo> {
    let mut oids = vec![
        oids::BOOL,
        oids::INT2,
        oids::INT4,
        oids::INT8,
        oids::OID,
        oids::XID,
        oids::FLOAT4,
        oids::FLOAT8,
        oids::NUMERIC,
        oids::TEXT,
        oids::VARCHAR,
        oids::BPCHAR,
        oids::NAME,
        oids::CHAR,
        oids::BYTEA,
        oids::DATE,
        oids::TIME,
        oids::TIMETZ,
        oids::TIMESTAMP,
        oids::TIMESTAMPTZ,
        oids::INTERVAL,
        oids::UUID,
        oids::JSON,
        oids::JSONB,
        oids::INET,
        oids::BOX,
        oids::INT4RANGE,
        ENUM_OID,
    ];
    if mode == Mode::Binary {
        oids.push(oids::REGCLASS);
    }
    prop::sample::select(oids).prop_map(|oid| {
        if oid == ENUM_OID {
            enum_type()
        } else {
            TypeInfo::builtin(oid)
        }
    })
}

fn any_text() -> impl Strategy<Value = Text> {
    prop_oneof![
        any::<String>(),
        // Characters arrays quote and escape.
        "[ a\"\\\\{},;NUL\t\n]{0,8}",
    ]
    .prop_map(Text::from)
}

fn numeric() -> impl Strategy<Value = Numeric> {
    let finite = (
        any::<bool>(),
        prop_oneof![
            Just(String::from("0")),
            "[1-9][0-9]{0,30}",
            "[1-9][0-9]{900,1100}"
        ],
        prop::option::of("[0-9]{1,40}"),
    )
        .prop_filter_map("negative zero", |(negative, int, frac)| {
            let is_zero =
                int == "0" && frac.as_deref().is_none_or(|f| f.bytes().all(|b| b == b'0'));
            let sign = if negative && !is_zero { "-" } else { "" };
            let text = match frac {
                Some(frac) => format!("{sign}{int}.{frac}"),
                None => format!("{sign}{int}"),
            };
            Numeric::finite(Text::from(text)).ok()
        });
    prop_oneof![
        8 => finite,
        1 => Just(Numeric::NaN),
        1 => Just(Numeric::PosInfinity),
        1 => Just(Numeric::NegInfinity),
    ]
}

fn float8() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<f64>(),
        1 => prop::sample::select(vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0,
            f64::MAX, f64::MIN_POSITIVE, 5e-324, 1e15, 1e-5]),
    ]
}

fn float4() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => any::<f32>(),
        1 => prop::sample::select(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0,
            f32::MAX, f32::MIN_POSITIVE, 1e6, 1e-5]),
    ]
}

fn char_text() -> impl Strategy<Value = Text> {
    any::<u8>().prop_map(|b| match b {
        0 => Text::default(),
        1..=0x7f => Text::from(char::from(b).to_string()),
        _ => Text::from(format!("\\{b:03o}")),
    })
}

fn interval() -> impl Strategy<Value = Interval> {
    prop_oneof![
        8 => (any::<i32>(), any::<i32>(), any::<i64>())
            .prop_map(|(months, days, micros)| Interval { months, days, micros }),
        2 => (-30i32..30, -40i32..40, -100_000_000_000i64..100_000_000_000)
            .prop_map(|(months, days, micros)| Interval { months, days, micros }),
        1 => Just(Interval { months: i32::MAX, days: i32::MAX, micros: i64::MAX }),
        1 => Just(Interval { months: i32::MIN, days: i32::MIN, micros: i64::MIN }),
    ]
}

fn other(ty: &TypeInfo, mode: Mode) -> BoxedStrategy<Value> {
    let (type_oid, type_name) = (ty.oid, ty.name.clone());
    let enum_label = ty.scalar_kind() == Some(ScalarKind::Enum);
    let repr = if mode == Mode::Text || enum_label {
        any_text().prop_map(OtherRepr::Text).boxed()
    } else {
        prop::collection::vec(any::<u8>(), 0..24)
            .prop_map(|b| OtherRepr::Binary(Bytes::from(b)))
            .boxed()
    };
    repr.prop_map(move |repr| {
        Value::Other(Box::new(OtherValue {
            type_oid,
            type_name: type_name.clone(),
            repr,
        }))
    })
    .boxed()
}

/// A value of scalar type `ty` as the decoder for `mode` produces it.
fn scalar_value(ty: &TypeInfo, mode: Mode) -> BoxedStrategy<Value> {
    let Some(kind) = ty.scalar_kind() else {
        return Just(Value::Null).boxed();
    };
    match kind {
        ScalarKind::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        ScalarKind::Int2 => any::<i16>().prop_map(Value::Int2).boxed(),
        ScalarKind::Int4 => any::<i32>().prop_map(Value::Int4).boxed(),
        ScalarKind::Int8 => any::<i64>().prop_map(Value::Int8).boxed(),
        ScalarKind::Oid | ScalarKind::RegOid => any::<u32>().prop_map(Value::Oid).boxed(),
        ScalarKind::Float4 => float4().prop_map(Value::Float4).boxed(),
        ScalarKind::Float8 => float8().prop_map(Value::Float8).boxed(),
        ScalarKind::Numeric => numeric().prop_map(Value::Numeric).boxed(),
        ScalarKind::Text => any_text().prop_map(Value::Text).boxed(),
        ScalarKind::Char => char_text().prop_map(Value::Text).boxed(),
        ScalarKind::Bytea => prop::collection::vec(any::<u8>(), 0..32)
            .prop_map(|b| Value::Bytea(Bytes::from(b)))
            .boxed(),
        ScalarKind::Date => prop_oneof![
            8 => (MIN_DATE..END_DATE).prop_map(Date::Days),
            1 => Just(Date::Infinity),
            1 => Just(Date::NegInfinity),
        ]
        .prop_map(Value::Date)
        .boxed(),
        ScalarKind::Time => (0..=USECS_PER_DAY)
            .prop_map(|t| Value::Time(Time(t)))
            .boxed(),
        ScalarKind::TimeTz => (0..=USECS_PER_DAY, -57_599i32..=57_599)
            .prop_map(|(t, offset_seconds)| {
                Value::TimeTz(TimeTz {
                    time: Time(t),
                    offset_seconds,
                })
            })
            .boxed(),
        ScalarKind::Timestamp => prop_oneof![
            8 => (MIN_TIMESTAMP..END_TIMESTAMP).prop_map(Timestamp::Micros),
            1 => Just(Timestamp::Infinity),
            1 => Just(Timestamp::NegInfinity),
        ]
        .prop_map(Value::Timestamp)
        .boxed(),
        ScalarKind::TimestampTz => prop_oneof![
            8 => (MIN_TIMESTAMP..END_TIMESTAMP).prop_map(TimestampTz::Micros),
            1 => Just(TimestampTz::Infinity),
            1 => Just(TimestampTz::NegInfinity),
        ]
        .prop_map(Value::TimestampTz)
        .boxed(),
        ScalarKind::Interval => interval().prop_map(Value::Interval).boxed(),
        ScalarKind::Uuid => any::<[u8; 16]>()
            .prop_map(|b| Value::Uuid(uuid::Uuid::from_bytes(b)))
            .boxed(),
        ScalarKind::Json => any_text().prop_map(Value::Json).boxed(),
        ScalarKind::Jsonb => any_text().prop_map(Value::Jsonb).boxed(),
        ScalarKind::Enum | ScalarKind::Other => other(ty, mode),
        #[allow(unreachable_patterns)]
        _ => Just(Value::Null).boxed(),
    }
}

/// An array over `element`: empty, or 1–3 dimensions with arbitrary lower bounds and
/// NULL elements.
fn array_value(element: TypeInfo, mode: Mode) -> BoxedStrategy<Value> {
    let element_oid = element.oid;
    let dims = prop::collection::vec(
        (1u32..=3, prop_oneof![3 => Just(1i32), 1 => -5i32..5]),
        0..=3,
    );
    dims.prop_flat_map(move |dims| {
        let count: u32 = if dims.is_empty() {
            0
        } else {
            dims.iter().map(|d| d.0).product()
        };
        let dims: Vec<ArrayDim> = dims
            .into_iter()
            .map(|(len, lower_bound)| ArrayDim { len, lower_bound })
            .collect();
        let element = prop_oneof![
            1 => Just(Value::Null),
            4 => scalar_value(&element, mode),
        ];
        prop::collection::vec(element, count as usize).prop_map(move |elements| {
            Value::Array(Box::new(Array {
                element_type: element_oid,
                dims: dims.clone(),
                elements,
            }))
        })
    })
    .boxed()
}

/// A type (scalar or array, built-in or enum) and a value of it.
fn typed_value(mode: Mode) -> impl Strategy<Value = (TypeInfo, Value)> {
    prop_oneof![
        2 => scalar_type(mode).prop_flat_map(move |ty| {
            let value = scalar_value(&ty, mode);
            (Just(ty), value)
        }),
        1 => scalar_type(mode).prop_flat_map(move |element| {
            let ty = match element.oid {
                ENUM_OID => {
                    let mut registry = TypeRegistry::new();
                    registry.define(ENUM_OID, Some(Text::from("public.mood")), TypeDef::Enum);
                    registry.define(16_401, None, TypeDef::Array { element: ENUM_OID, delimiter: b',' });
                    registry.resolve(16_401)
                }
                oid => {
                    let array_oid = BUILTINS
                        .iter()
                        .find(|b| oids::array_element(b.oid) == Some(oid))
                        .map(|b| b.oid)
                        .unwrap_or(oids::TEXT_ARRAY);
                    TypeInfo::builtin(array_oid)
                }
            };
            let value = array_value(element, mode);
            (Just(ty), value)
        }),
    ]
}

/// Every type the fuzz tests feed garbage to: every built-in, the enum and an enum array.
fn every_type() -> impl Strategy<Value = TypeInfo> {
    let mut types: Vec<TypeInfo> = BUILTINS.iter().map(|b| TypeInfo::builtin(b.oid)).collect();
    types.push(enum_type());
    prop::sample::select(types)
}

fn encode(ty: &TypeInfo, value: &Value) -> Bytes {
    let mut out = BytesMut::new();
    encode_binary(ty, value, &mut out).unwrap();
    out.freeze()
}

/// Overwrites, inserts or cuts bytes of `data` at proptest-chosen places.
fn mutate(data: &[u8], edits: &[(usize, u8, u8)]) -> Vec<u8> {
    let mut out = data.to_vec();
    for &(at, byte, how) in edits {
        let at = if out.is_empty() {
            0
        } else {
            at % (out.len() + 1)
        };
        match how % 3 {
            0 if at < out.len() => out[at] = byte,
            1 => out.insert(at, byte),
            _ => out.truncate(at),
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn binary_round_trip((ty, value) in typed_value(Mode::Binary)) {
        let bytes = encode(&ty, &value);
        let decoded = decode_binary(&ty, &bytes);
        prop_assert_eq!(decoded, Ok(value));
    }

    #[test]
    fn text_from_to_pg_text_round_trips((ty, value) in typed_value(Mode::Text)) {
        let text = value.to_pg_text().unwrap();
        let decoded = decode_text(&ty, &Bytes::from(text.clone()));
        prop_assert_eq!(decoded, Ok(value), "text: {:?}", text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(ty in every_type(), data in prop::collection::vec(any::<u8>(), 0..48)) {
        let data = Bytes::from(data);
        let _ = decode_text(&ty, &data);
        let _ = decode_binary(&ty, &data);
    }

    #[test]
    fn mutated_binary_never_panics(
        (ty, value) in typed_value(Mode::Binary),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4),
    ) {
        let bytes = encode(&ty, &value);
        let _ = decode_binary(&ty, &Bytes::from(mutate(&bytes, &edits)));
    }

    #[test]
    fn mutated_text_never_panics(
        (ty, value) in typed_value(Mode::Text),
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4),
    ) {
        let text = value.to_pg_text().unwrap();
        let _ = decode_text(&ty, &Bytes::from(mutate(text.as_bytes(), &edits)));
    }

    #[test]
    fn text_made_of_array_syntax_never_panics(
        ty in every_type(),
        text in "[\\[\\]{}\",;:=\\\\ NUL0-9a-f.+-]{0,40}",
    ) {
        let _ = decode_text(&ty, &Bytes::from(text));
    }
}
