//! Type decoding: one column's bytes, as pgoutput sends them, into a [`Value`].
//!
//! pgoutput sends each column either in text format (the type's output function, tuple
//! column kind `t`) or, with the `binary` option of Postgres 14+, in binary format (the
//! type's send function, kind `b`). [`decode_text`] and [`decode_binary`] turn either into
//! the same [`Value`], given the column's [`TypeInfo`]: resolve it once per column from a
//! [`TypeRegistry`] (built-in types, plus what pgoutput Type messages and the catalog
//! taught it) and reuse it for every row.
//!
//! Pure functions over bytes: no I/O, no global state. Text values share the input buffer
//! (`Value::Text` slices it), integers and floats parse without allocating. Nothing is
//! guessed: input that is not what Postgres produces for the type is a
//! [`TypeDecodeError`] naming the type and the input, never a panic or a silent NULL.
//!
//! # What the text decoders expect
//!
//! Text is as the walsender prints it, which depends on its settings: `DateStyle = ISO`
//! (Postgres's default), `IntervalStyle = postgres` (the default), `extra_float_digits`
//! ≥ 1 (the default since Postgres 12; lower values round floats), `bytea_output` hex or
//! escape, and a UTF-8 server encoding. `timestamptz` text carries the walsender's
//! `TimeZone` offset and is converted to UTC. The replication connection should pin these
//! settings in its startup options.
//!
//! # Type coverage
//!
//! `bool`, `int2/4/8`, `oid`/`xid`/`cid`, the `reg*` types (binary: the OID; text: the
//! object's name as [`Value::Other`]), `float4/8`, `numeric`, `text`/`varchar`/`bpchar`/
//! `name`/`"char"`, `bytea`, `date`, `time`, `timetz`, `timestamp`, `timestamptz`,
//! `interval`, `uuid`, `json`, `jsonb`, arrays of any of these and of any other type, and
//! domains over them. Everything else becomes [`Value::Other`] carrying the text or the
//! binary form as received, with the type's OID and qualified name.

mod array;
mod datetime;
mod encode;
mod error;
mod numeric;
pub mod oids;
mod registry;
mod scalar;

#[cfg(test)]
mod proptests;

use bytes::Bytes;

use crate::protocol::BytesView;
use cdc_core::{OtherRepr, OtherValue, Value};

pub use encode::encode_binary;
pub use error::{DecodeErrorKind, Format, TypeDecodeError, TypeEncodeError};
pub use oids::ScalarKind;
pub use registry::{ArrayType, TypeDef, TypeInfo, TypeKind, TypeRegistry};

/// Decodes a value in text format (a type's output function) as a value of `ty`.
///
/// Text, JSON and `Other` values share `data`'s storage; nothing is copied for them.
#[inline]
pub fn decode_text(ty: &TypeInfo, data: &Bytes) -> Result<Value, TypeDecodeError> {
    decode_text_view(ty, BytesView::whole(data))
}

/// Decodes a value in binary format (a type's send function) as a value of `ty`.
///
/// Binary `text`, `bytea`, `json`, `jsonb` and `Other` values share `data`'s storage.
#[inline]
pub fn decode_binary(ty: &TypeInfo, data: &Bytes) -> Result<Value, TypeDecodeError> {
    decode_binary_view(ty, BytesView::whole(data))
}

/// [`decode_text`] of a view into a larger buffer (e.g. a column of a
/// [`crate::protocol::pgoutput::TupleRef`]): values that keep bytes share the buffer,
/// the others never touch its reference count.
#[inline]
pub fn decode_text_view(ty: &TypeInfo, data: BytesView<'_>) -> Result<Value, TypeDecodeError> {
    value_from_text(ty, data)
        .map_err(|reason| TypeDecodeError::new(ty, Format::Text, reason, &data))
}

/// [`decode_binary`] of a view into a larger buffer; see [`decode_text_view`].
#[inline]
pub fn decode_binary_view(ty: &TypeInfo, data: BytesView<'_>) -> Result<Value, TypeDecodeError> {
    value_from_binary(ty, data)
        .map_err(|reason| TypeDecodeError::new(ty, Format::Binary, reason, &data))
}

/// Decodes `data` in `format`; see [`decode_text`] and [`decode_binary`].
pub fn decode(ty: &TypeInfo, format: Format, data: &Bytes) -> Result<Value, TypeDecodeError> {
    match format {
        Format::Text => decode_text(ty, data),
        Format::Binary => decode_binary(ty, data),
    }
}

fn other(ty: &TypeInfo, repr: OtherRepr) -> Value {
    Value::Other(Box::new(OtherValue {
        type_oid: ty.oid,
        type_name: ty.name.clone(),
        repr,
    }))
}

fn other_text(ty: &TypeInfo, data: &Bytes) -> Result<Value, DecodeErrorKind> {
    Ok(other(ty, OtherRepr::Text(scalar::text_from_bytes(data)?)))
}

#[inline]
fn value_from_text(ty: &TypeInfo, view: BytesView<'_>) -> Result<Value, DecodeErrorKind> {
    let data = view.as_slice();
    let kind = match &ty.kind {
        TypeKind::Scalar(kind) => *kind,
        TypeKind::Array(array) => {
            return Ok(Value::Array(Box::new(array::array_from_text(
                array,
                &view.to_bytes(),
                value_from_text,
            )?)));
        }
    };
    Ok(match kind {
        ScalarKind::Bool => Value::Bool(scalar::bool_from_text(data)?),
        ScalarKind::Int2 => Value::Int2(scalar::int2_from_text(data)?),
        ScalarKind::Int4 => Value::Int4(scalar::int4_from_text(data)?),
        ScalarKind::Int8 => Value::Int8(scalar::int8_from_text(data)?),
        ScalarKind::Oid => Value::Oid(scalar::oid_from_text(data)?),
        ScalarKind::Float4 => Value::Float4(scalar::float4_from_text(data)?),
        ScalarKind::Float8 => Value::Float8(scalar::float8_from_text(data)?),
        ScalarKind::Numeric => Value::Numeric(numeric::numeric_from_text(&view.to_bytes())?),
        ScalarKind::Text => Value::Text(scalar::text_from_bytes(&view.to_bytes())?),
        ScalarKind::Char => Value::Text(scalar::char_from_text(view)?),
        ScalarKind::Bytea => Value::Bytea(scalar::bytea_from_text(view)?),
        ScalarKind::Date => Value::Date(datetime::date_from_text(data)?),
        ScalarKind::Time => Value::Time(datetime::time_from_text(data)?),
        ScalarKind::TimeTz => Value::TimeTz(datetime::timetz_from_text(data)?),
        ScalarKind::Timestamp => Value::Timestamp(datetime::timestamp_from_text(data)?),
        ScalarKind::TimestampTz => Value::TimestampTz(datetime::timestamptz_from_text(data)?),
        ScalarKind::Interval => Value::Interval(datetime::interval_from_text(data)?),
        ScalarKind::Uuid => Value::Uuid(scalar::uuid_from_text(data)?),
        ScalarKind::Json => Value::Json(scalar::text_from_bytes(&view.to_bytes())?),
        ScalarKind::Jsonb => Value::Jsonb(scalar::text_from_bytes(&view.to_bytes())?),
        // A reg* type prints the object's name, which only the server can map back.
        ScalarKind::RegOid | ScalarKind::Enum | ScalarKind::Other => {
            other_text(ty, &view.to_bytes())?
        }
    })
}

#[inline(always)]
fn value_from_binary(ty: &TypeInfo, view: BytesView<'_>) -> Result<Value, DecodeErrorKind> {
    let data = view.as_slice();
    let kind = match &ty.kind {
        TypeKind::Scalar(kind) => *kind,
        TypeKind::Array(array) => {
            return Ok(Value::Array(Box::new(array::array_from_binary(
                array,
                &view.to_bytes(),
                value_from_binary,
            )?)));
        }
    };
    Ok(match kind {
        ScalarKind::Bool => Value::Bool(scalar::bool_from_binary(data)?),
        ScalarKind::Int2 => Value::Int2(scalar::int2_from_binary(data)?),
        ScalarKind::Int4 => Value::Int4(scalar::int4_from_binary(data)?),
        ScalarKind::Int8 => Value::Int8(scalar::int8_from_binary(data)?),
        ScalarKind::Oid | ScalarKind::RegOid => Value::Oid(scalar::oid_from_binary(data)?),
        ScalarKind::Float4 => Value::Float4(scalar::float4_from_binary(data)?),
        ScalarKind::Float8 => Value::Float8(scalar::float8_from_binary(data)?),
        ScalarKind::Numeric => Value::Numeric(numeric::numeric_from_binary(data)?),
        // textsend, varcharsend, bpcharsend, namesend and json_send send the text itself.
        ScalarKind::Text => Value::Text(scalar::text_from_bytes(&view.to_bytes())?),
        ScalarKind::Char => Value::Text(scalar::char_from_binary(data)?),
        ScalarKind::Bytea => Value::Bytea(view.to_bytes()),
        ScalarKind::Date => Value::Date(datetime::date_from_binary(data)?),
        ScalarKind::Time => Value::Time(datetime::time_from_binary(data)?),
        ScalarKind::TimeTz => Value::TimeTz(datetime::timetz_from_binary(data)?),
        ScalarKind::Timestamp => Value::Timestamp(datetime::timestamp_from_binary(data)?),
        ScalarKind::TimestampTz => Value::TimestampTz(datetime::timestamptz_from_binary(data)?),
        ScalarKind::Interval => Value::Interval(datetime::interval_from_binary(data)?),
        ScalarKind::Uuid => Value::Uuid(scalar::uuid_from_binary(data)?),
        ScalarKind::Json => Value::Json(scalar::text_from_bytes(&view.to_bytes())?),
        ScalarKind::Jsonb => Value::Jsonb(scalar::jsonb_from_binary(view)?),
        // enum_send sends the label.
        ScalarKind::Enum => other_text(ty, &view.to_bytes())?,
        ScalarKind::Other => other(ty, OtherRepr::Binary(view.to_bytes())),
    })
}

#[cfg(test)]
mod tests {
    use cdc_core::value::{Date, Interval, TimestampTz};
    use cdc_core::{Array, ArrayDim, Numeric, Text};

    use super::*;

    fn text(oid: u32, s: &'static str) -> Result<Value, TypeDecodeError> {
        decode_text(&TypeInfo::builtin(oid), &Bytes::from_static(s.as_bytes()))
    }

    fn binary(oid: u32, b: &'static [u8]) -> Result<Value, TypeDecodeError> {
        decode_binary(&TypeInfo::builtin(oid), &Bytes::from_static(b))
    }

    fn t(s: &str) -> Value {
        Value::Text(Text::from(s))
    }

    fn one_dim(element_type: u32, elements: Vec<Value>) -> Value {
        Value::Array(Box::new(Array::one_dimensional(element_type, elements)))
    }

    #[test]
    fn scalars_dispatch_by_type() {
        assert_eq!(
            text(oids::INT8, "-9223372036854775808").unwrap(),
            Value::Int8(i64::MIN)
        );
        assert_eq!(binary(oids::BOOL, b"\x01").unwrap(), Value::Bool(true));
        assert_eq!(text(oids::OID, "4294967295").unwrap(), Value::Oid(u32::MAX));
        assert_eq!(text(oids::XID, "731").unwrap(), Value::Oid(731));
        assert_eq!(binary(oids::CID, b"\0\0\0\x07").unwrap(), Value::Oid(7));
        assert_eq!(text(oids::FLOAT8, "NaN").unwrap(), Value::Float8(f64::NAN));
        assert_eq!(
            text(oids::NUMERIC, "Infinity").unwrap(),
            Value::Numeric(Numeric::PosInfinity)
        );
        assert_eq!(text(oids::BPCHAR, "ab  ").unwrap(), t("ab  "));
        assert_eq!(binary(oids::NAME, b"pg_class").unwrap(), t("pg_class"));
        assert_eq!(binary(oids::CHAR, b"\xe9").unwrap(), t("\\351"));
        assert_eq!(
            text(oids::DATE, "infinity").unwrap(),
            Value::Date(Date::Infinity)
        );
        assert_eq!(
            text(oids::TIMESTAMPTZ, "2000-01-01 05:30:00+05:30").unwrap(),
            Value::TimestampTz(TimestampTz::Micros(0))
        );
        assert_eq!(
            text(oids::INTERVAL, "-1 mons").unwrap(),
            Value::Interval(Interval {
                months: -1,
                days: 0,
                micros: 0
            })
        );
        assert_eq!(
            text(oids::JSON, "{\"a\" : 1}").unwrap(),
            Value::Json(Text::from("{\"a\" : 1}"))
        );
        assert_eq!(
            binary(oids::JSONB, b"\x01{\"a\": 1}").unwrap(),
            Value::Jsonb(Text::from("{\"a\": 1}"))
        );
        assert_eq!(
            binary(oids::BYTEA, b"\x00\xff").unwrap(),
            Value::Bytea(Bytes::from_static(b"\x00\xff"))
        );
    }

    #[test]
    fn text_values_share_the_input_buffer() {
        let data = Bytes::from(b"some longer text value".to_vec());
        let Value::Text(v) = decode_text(&TypeInfo::builtin(oids::TEXT), &data).unwrap() else {
            panic!()
        };
        assert_eq!(v.as_bytes().as_ptr(), data.as_ptr());
        let Value::Jsonb(v) = decode_text(&TypeInfo::builtin(oids::JSONB), &data).unwrap() else {
            panic!()
        };
        assert_eq!(v.as_bytes().as_ptr(), data.as_ptr());
    }

    #[test]
    fn reg_types_are_names_in_text_and_oids_in_binary() {
        let Value::Other(o) = text(oids::REGCLASS, "public.t").unwrap() else {
            panic!()
        };
        assert_eq!(o.type_oid, oids::REGCLASS);
        assert_eq!(o.type_name.as_deref(), Some("pg_catalog.regclass"));
        assert_eq!(o.repr, OtherRepr::Text(Text::from("public.t")));
        assert_eq!(
            binary(oids::REGCLASS, b"\0\0\x04\xeb").unwrap(),
            Value::Oid(1259)
        );
    }

    #[test]
    fn other_types_keep_text_or_binary_with_type_identity() {
        let Value::Other(o) = text(oids::INET, "10.0.0.1/8").unwrap() else {
            panic!()
        };
        assert_eq!(o.type_name.as_deref(), Some("pg_catalog.inet"));
        assert_eq!(o.repr, OtherRepr::Text(Text::from("10.0.0.1/8")));
        let Value::Other(o) = binary(oids::INT4RANGE, b"\x02").unwrap() else {
            panic!()
        };
        assert_eq!(o.repr, OtherRepr::Binary(Bytes::from_static(b"\x02")));
        let Value::Other(o) = text(77_777, "whatever").unwrap() else {
            panic!()
        };
        assert_eq!((o.type_oid, o.type_name), (77_777, None));
    }

    #[test]
    fn enums_are_labels_in_both_formats() {
        let mut registry = TypeRegistry::new();
        registry.define(16_400, Some(Text::from("public.mood")), TypeDef::Enum);
        let ty = registry.resolve(16_400);
        let from_text = decode_text(&ty, &Bytes::from_static(b"happy")).unwrap();
        let from_binary = decode_binary(&ty, &Bytes::from_static(b"happy")).unwrap();
        assert_eq!(from_text, from_binary);
        let Value::Other(o) = from_text else { panic!() };
        assert_eq!(o.type_name.as_deref(), Some("public.mood"));
    }

    #[test]
    fn errors_name_type_and_input() {
        let err = text(oids::INT4, "12x").unwrap_err();
        assert_eq!(err.type_oid, oids::INT4);
        assert_eq!(err.format, Format::Text);
        assert_eq!(err.input, "\"12x\"");
        let err = binary(oids::INT8, b"\x01\x02").unwrap_err();
        assert_eq!(
            err.reason,
            DecodeErrorKind::WrongLength {
                expected: 8,
                actual: 2
            }
        );
        assert!(text(oids::TEXT, "\u{0}ok").is_ok());
        let err = decode_text(
            &TypeInfo::builtin(oids::TEXT),
            &Bytes::from_static(b"\xff\xfe"),
        )
        .unwrap_err();
        assert_eq!(err.reason, DecodeErrorKind::InvalidUtf8);
        let err = binary(oids::JSONB, b"\x02{}").unwrap_err();
        assert_eq!(err.reason, DecodeErrorKind::UnsupportedJsonbVersion(2));
    }

    #[test]
    fn text_arrays_with_quotes_nulls_and_escapes() {
        assert_eq!(
            text(
                oids::TEXT_ARRAY,
                r#"{"a b",NULL,"null","q\"\\","",x\,y,  padded  }"#
            )
            .unwrap(),
            one_dim(
                oids::TEXT,
                vec![
                    t("a b"),
                    Value::Null,
                    t("null"),
                    t("q\"\\"),
                    t(""),
                    t("x,y"),
                    t("padded"),
                ]
            )
        );
        assert_eq!(
            text(oids::INT4_ARRAY, "{}").unwrap(),
            one_dim(oids::INT4, vec![])
        );
        assert_eq!(
            text(oids::CHAR_ARRAY, r#"{"\\351",a,""}"#).unwrap(),
            one_dim(oids::CHAR, vec![t("\\351"), t("a"), t("")])
        );
    }

    #[test]
    fn multidimensional_arrays_with_lower_bounds() {
        let v = text(oids::INT4_ARRAY, "[0:1][-2:-2]={{1},{NULL}}").unwrap();
        let expected = Array {
            element_type: oids::INT4,
            dims: vec![
                ArrayDim {
                    len: 2,
                    lower_bound: 0,
                },
                ArrayDim {
                    len: 1,
                    lower_bound: -2,
                },
            ],
            elements: vec![Value::Int4(1), Value::Null],
        };
        assert_eq!(v, Value::Array(Box::new(expected.clone())));
        // Postgres 15: array_send('[0:1]={1,NULL}'::int[]).
        let v = binary(
            oids::INT4_ARRAY,
            b"\0\0\0\x01\0\0\0\x01\0\0\0\x17\0\0\0\x02\0\0\0\0\0\0\0\x04\0\0\0\x01\xff\xff\xff\xff",
        )
        .unwrap();
        let Value::Array(a) = v else { panic!() };
        assert_eq!(
            a.dims,
            vec![ArrayDim {
                len: 2,
                lower_bound: 0
            }]
        );
        assert_eq!(a.elements, vec![Value::Int4(1), Value::Null]);
        // Postgres 15: array_send('{}'::int[]).
        assert_eq!(
            binary(oids::INT4_ARRAY, b"\0\0\0\0\0\0\0\0\0\0\0\x17").unwrap(),
            one_dim(oids::INT4, vec![])
        );
        let v = text(oids::INT4_ARRAY, "{{1,2},{3,4}}").unwrap();
        let Value::Array(a) = v else { panic!() };
        assert_eq!(a.dims.iter().map(|d| d.len).collect::<Vec<_>>(), [2, 2]);
    }

    #[test]
    fn box_arrays_use_semicolons() {
        let v = text(oids::BOX_ARRAY, "{(3,4),(1,2);(1,1),(0,0)}").unwrap();
        let Value::Array(a) = v else { panic!() };
        assert_eq!(a.elements.len(), 2);
        let Value::Other(o) = &a.elements[0] else {
            panic!()
        };
        assert_eq!(o.repr, OtherRepr::Text(Text::from("(3,4),(1,2)")));
    }

    #[test]
    fn malformed_arrays_are_errors() {
        for bad in [
            "",
            "{",
            "}",
            "{1,}",
            "{,1}",
            "{1,,2}",
            "{{1},2}",
            "{1,{2}}",
            "{{1,2},{3}}",
            "{{}}",
            "{1} x",
            "{\"a}",
            "{a\"b}",
            "[1:2]={1}",
            "[1:1]{1}",
            "{{{{{{{1}}}}}}}",
            "{1 2}",
            "{\\}",
        ] {
            let err = text(oids::INT4_ARRAY, bad).unwrap_err();
            assert_eq!(err.type_oid, oids::INT4_ARRAY, "{bad}");
        }
        let err = text(oids::INT4_ARRAY, "{1,x}").unwrap_err();
        let DecodeErrorKind::Element(inner) = err.reason else {
            panic!("{err}")
        };
        assert_eq!(inner.type_oid, oids::INT4);
        assert_eq!(inner.input, "\"x\"");
        // Wrong element type in a binary header.
        let err = binary(oids::INT4_ARRAY, b"\0\0\0\0\0\0\0\0\0\0\0\x14").unwrap_err();
        assert_eq!(
            err.reason,
            DecodeErrorKind::WrongElementType {
                expected: 23,
                actual: 20
            }
        );
    }

    #[test]
    fn arrays_of_other_types_hold_other_values() {
        let v = text(oids::INET_ARRAY, "{10.0.0.1,NULL}").unwrap();
        let Value::Array(a) = v else { panic!() };
        assert_eq!(a.element_type, oids::INET);
        assert!(matches!(&a.elements[0], Value::Other(o) if o.type_oid == oids::INET));
        assert_eq!(a.elements[1], Value::Null);
    }

    #[test]
    fn domain_arrays_from_type_messages() {
        let mut registry = TypeRegistry::new();
        // A domain over int4[] arrives as (oid, pg_catalog, _int4).
        registry.register_type_message(16_700, "pg_catalog", "_int4");
        let ty = registry.resolve(16_700);
        assert_eq!(
            decode_text(&ty, &Bytes::from_static(b"{1,2}")).unwrap(),
            one_dim(oids::INT4, vec![Value::Int4(1), Value::Int4(2)])
        );
    }
}
