//! Binary encoders: a [`Value`] in the send format of its type, the inverse of
//! [`decode_binary`](super::decode_binary). For test doubles (a fake walsender that sends
//! binary tuples) and round-trip tests.

use bytes::{BufMut, BytesMut};
use cdc_core::{OtherRepr, Value};

use super::error::TypeEncodeError;
use super::oids::ScalarKind;
use super::registry::{TypeInfo, TypeKind};
use super::{array, datetime, numeric, scalar};

/// Appends `value` to `out` in the binary (send) format of `ty`, without a length
/// prefix. Decoding the bytes with [`decode_binary`](super::decode_binary) and the same
/// `ty` gives `value` back.
///
/// Fails when the value does not belong to the type (an `Int4` for a `text` column),
/// when it is NULL or an unchanged TOAST value (which a tuple marks instead of encoding),
/// and for a [`Value::Other`] whose binary form only the server knows (one held as text,
/// except enum labels). On error `out` is left as it was.
pub fn encode_binary(
    ty: &TypeInfo,
    value: &Value,
    out: &mut BytesMut,
) -> Result<(), TypeEncodeError> {
    let start = out.len();
    encode(ty, value, out).map_err(|reason| {
        // Leave `out` as it was, not holding half an array.
        out.truncate(start);
        TypeEncodeError {
            type_oid: ty.oid,
            type_name: ty.name.clone(),
            value_kind: value.kind_name(),
            reason,
        }
    })
}

fn encode(ty: &TypeInfo, value: &Value, out: &mut BytesMut) -> Result<(), &'static str> {
    let kind = match (&ty.kind, value) {
        (_, Value::Null | Value::Unchanged) => {
            return Err("NULL and unchanged TOAST values have no binary form");
        }
        (TypeKind::Array(array), Value::Array(v)) => {
            return array::array_to_binary(array, v, out, &encode);
        }
        (TypeKind::Array(_), _) => return Err("the type is an array type"),
        (TypeKind::Scalar(kind), _) => *kind,
    };
    match (kind, value) {
        (ScalarKind::Bool, Value::Bool(v)) => scalar::bool_to_binary(*v, out),
        (ScalarKind::Int2, Value::Int2(v)) => out.put_i16(*v),
        (ScalarKind::Int4, Value::Int4(v)) => out.put_i32(*v),
        (ScalarKind::Int8, Value::Int8(v)) => out.put_i64(*v),
        (ScalarKind::Oid | ScalarKind::RegOid, Value::Oid(v)) => out.put_u32(*v),
        (ScalarKind::Float4, Value::Float4(v)) => out.put_u32(v.to_bits()),
        (ScalarKind::Float8, Value::Float8(v)) => out.put_u64(v.to_bits()),
        (ScalarKind::Numeric, Value::Numeric(v)) => numeric::numeric_to_binary(v, out)?,
        (ScalarKind::Text, Value::Text(v)) | (ScalarKind::Json, Value::Json(v)) => {
            out.put_slice(v.as_bytes());
        }
        (ScalarKind::Char, Value::Text(v)) => {
            out.put_u8(scalar::char_to_byte(v).ok_or("not the text of a \"char\" value")?);
        }
        (ScalarKind::Bytea, Value::Bytea(v)) => out.put_slice(v),
        (ScalarKind::Date, Value::Date(v)) => datetime::date_to_binary(*v, out),
        (ScalarKind::Time, Value::Time(v)) => out.put_i64(v.0),
        (ScalarKind::TimeTz, Value::TimeTz(v)) => datetime::timetz_to_binary(*v, out),
        (ScalarKind::Timestamp, Value::Timestamp(v)) => datetime::timestamp_to_binary(*v, out),
        (ScalarKind::TimestampTz, Value::TimestampTz(v)) => {
            datetime::timestamptz_to_binary(*v, out);
        }
        (ScalarKind::Interval, Value::Interval(v)) => datetime::interval_to_binary(*v, out),
        (ScalarKind::Uuid, Value::Uuid(v)) => out.put_slice(v.as_bytes()),
        (ScalarKind::Jsonb, Value::Jsonb(v)) => scalar::jsonb_to_binary(v, out),
        (ScalarKind::Enum | ScalarKind::Other | ScalarKind::RegOid, Value::Other(v)) => {
            match (&v.repr, kind) {
                (OtherRepr::Binary(bytes), _) => out.put_slice(bytes),
                (OtherRepr::Text(label), ScalarKind::Enum) => out.put_slice(label.as_bytes()),
                (OtherRepr::Text(_), _) => {
                    return Err("its binary form is known only to the server");
                }
            }
        }
        _ => return Err("the value does not belong to the type"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use cdc_core::{Array, Text};

    use super::*;
    use crate::types::oids;

    #[test]
    fn mismatches_and_nulls_are_errors() {
        let mut out = BytesMut::new();
        let int4 = TypeInfo::builtin(oids::INT4);
        let err = encode_binary(&int4, &Value::Text(Text::from("1")), &mut out).unwrap_err();
        assert_eq!(err.value_kind, "text");
        assert!(encode_binary(&int4, &Value::Null, &mut out).is_err());
        let char_ty = TypeInfo::builtin(oids::CHAR);
        assert!(encode_binary(&char_ty, &Value::Text(Text::from("ab")), &mut out).is_err());
        let arr = TypeInfo::builtin(oids::INT4_ARRAY);
        let wrong_element =
            Value::Array(Box::new(Array::one_dimensional(20, vec![Value::Int8(1)])));
        assert!(encode_binary(&arr, &wrong_element, &mut out).is_err());
        assert!(out.is_empty());
    }
}
