//! `Value`: one column value, faithful to Postgres.

mod datetime;
mod numeric;
mod pg_text;
mod text;

use std::hash::{Hash, Hasher};

use bytes::Bytes;

pub use datetime::{
    Date, Interval, POSTGRES_EPOCH_JDATE, Time, TimeTz, Timestamp, TimestampTz,
    UNIX_TO_POSTGRES_EPOCH_DAYS, USECS_PER_DAY, USECS_PER_SEC, julian_to_ymd, ymd_to_julian,
};
pub use numeric::{Numeric, ParseNumericError};
pub use pg_text::{format_float4, format_float8};
pub use text::Text;

/// A Postgres type OID (`pg_type.oid`).
pub type TypeOid = u32;

/// One column value as Postgres holds it.
///
/// Nothing is narrowed or rounded on the way in: floats keep NaN and ±Infinity, numerics
/// keep every digit, dates and timestamps keep ±infinity, BC years and years past 9999.
/// Types without a dedicated variant arrive as [`Value::Other`] with their type identity
/// and exact Postgres representation.
///
/// Equality treats floats by bit pattern (so `NaN == NaN` and `0.0 != -0.0`), which makes
/// `Value` usable as a key and comparable in tests; it is not SQL equality.
#[derive(Clone, Debug)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// `boolean`.
    Bool(bool),
    /// `smallint`.
    Int2(i16),
    /// `integer`.
    Int4(i32),
    /// `bigint`.
    Int8(i64),
    /// `oid` and the other 32-bit unsigned identifier types (`xid`, `cid`, `regclass`, …,
    /// when decoded from binary).
    Oid(u32),
    /// `real`, including NaN and ±Infinity.
    Float4(f32),
    /// `double precision`, including NaN and ±Infinity.
    Float8(f64),
    /// `numeric`, exact.
    Numeric(Numeric),
    /// `text`, `varchar`, `bpchar` (with its padding), `name`, `"char"`.
    Text(Text),
    /// `bytea`: the raw bytes.
    Bytea(Bytes),
    /// `date`.
    Date(Date),
    /// `time`.
    Time(Time),
    /// `timetz`.
    TimeTz(TimeTz),
    /// `timestamp`.
    Timestamp(Timestamp),
    /// `timestamptz`.
    TimestampTz(TimestampTz),
    /// `interval`.
    Interval(Interval),
    /// `uuid`.
    Uuid(uuid::Uuid),
    /// `json`: the document text exactly as stored (whitespace and key order kept).
    Json(Text),
    /// `jsonb`: the document in Postgres's normalized text form.
    Jsonb(Text),
    /// An array of any dimension, with NULL elements.
    Array(Box<Array>),
    /// An unchanged TOASTed value that Postgres did not send (an update that did not touch
    /// the column). Never the same as NULL: the column keeps its previous value.
    Unchanged,
    /// Any other type (enum, domain over an unlisted type, range, multirange, geometric,
    /// network, bit string, money, xml, tsvector, composite, extension types): its type
    /// identity and its exact Postgres representation.
    Other(Box<OtherValue>),
}

/// An array value: dimensions with lower bounds, and the elements in row-major order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Array {
    /// OID of the element type (e.g. 23 for `int4[]`).
    pub element_type: TypeOid,
    /// One entry per dimension, outermost first. Empty for an empty array.
    pub dims: Vec<ArrayDim>,
    /// Elements in row-major order; their count is the product of the dimension lengths.
    /// Elements may be `Value::Null`.
    pub elements: Vec<Value>,
}

/// One dimension of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArrayDim {
    /// Number of elements along this dimension.
    pub len: u32,
    /// Index of the first element (Postgres's default is 1).
    pub lower_bound: i32,
}

/// A value of a type without a dedicated [`Value`] variant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OtherValue {
    /// The type's OID.
    pub type_oid: TypeOid,
    /// The type's qualified name when known (e.g. `public.mood`, `pg_catalog.inet`).
    pub type_name: Option<Text>,
    /// The value as Postgres sent it.
    pub repr: OtherRepr,
}

/// How an [`OtherValue`] is represented.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OtherRepr {
    /// Postgres's text output of the value (the type's output function), exactly.
    Text(Text),
    /// Postgres's binary send format of the value (binary replication of a type we do not
    /// decode); pass it back with the same type OID to restore the value.
    Binary(Bytes),
}

impl Array {
    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// A one-dimensional array with lower bound 1.
    pub fn one_dimensional(element_type: TypeOid, elements: Vec<Value>) -> Self {
        let dims = if elements.is_empty() {
            Vec::new()
        } else {
            vec![ArrayDim {
                len: u32::try_from(elements.len()).unwrap_or(u32::MAX),
                lower_bound: 1,
            }]
        };
        Array {
            element_type,
            dims,
            elements,
        }
    }

    /// Whether the dimensions agree with the element count.
    pub fn is_well_formed(&self) -> bool {
        let product = self
            .dims
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(u64::from(d.len)));
        match product {
            _ if self.dims.is_empty() => self.elements.is_empty(),
            Some(n) => n == self.elements.len() as u64,
            None => false,
        }
    }
}

impl Value {
    /// Whether the value is SQL NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Whether the value is an unchanged TOAST placeholder.
    pub fn is_unchanged(&self) -> bool {
        matches!(self, Value::Unchanged)
    }

    /// A short name of the variant, for error messages (`"float8"`, `"array"`, …).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int2(_) => "int2",
            Value::Int4(_) => "int4",
            Value::Int8(_) => "int8",
            Value::Oid(_) => "oid",
            Value::Float4(_) => "float4",
            Value::Float8(_) => "float8",
            Value::Numeric(_) => "numeric",
            Value::Text(_) => "text",
            Value::Bytea(_) => "bytea",
            Value::Date(_) => "date",
            Value::Time(_) => "time",
            Value::TimeTz(_) => "timetz",
            Value::Timestamp(_) => "timestamp",
            Value::TimestampTz(_) => "timestamptz",
            Value::Interval(_) => "interval",
            Value::Uuid(_) => "uuid",
            Value::Json(_) => "json",
            Value::Jsonb(_) => "jsonb",
            Value::Array(_) => "array",
            Value::Unchanged => "unchanged-toast",
            Value::Other(_) => "other",
        }
    }

    /// Approximate memory held by this value in bytes (inline size plus owned heap data),
    /// used to bound batches by bytes. Shared buffers are counted in full for each value
    /// slicing them, which over- rather than under-estimates.
    pub fn approx_size(&self) -> usize {
        let inline = std::mem::size_of::<Value>();
        inline
            + match self {
                Value::Numeric(Numeric::Finite(t)) => t.len(),
                Value::Text(t) | Value::Json(t) | Value::Jsonb(t) => t.len(),
                Value::Bytea(b) => b.len(),
                Value::Array(a) => {
                    std::mem::size_of::<Array>()
                        + a.dims.len() * std::mem::size_of::<ArrayDim>()
                        + a.elements.iter().map(Value::approx_size).sum::<usize>()
                }
                Value::Other(o) => {
                    std::mem::size_of::<OtherValue>()
                        + o.type_name.as_ref().map_or(0, Text::len)
                        + match &o.repr {
                            OtherRepr::Text(t) => t.len(),
                            OtherRepr::Binary(b) => b.len(),
                        }
                }
                _ => 0,
            }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (Null, Null) | (Unchanged, Unchanged) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int2(a), Int2(b)) => a == b,
            (Int4(a), Int4(b)) => a == b,
            (Int8(a), Int8(b)) => a == b,
            (Oid(a), Oid(b)) => a == b,
            (Float4(a), Float4(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            (Float8(a), Float8(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            (Numeric(a), Numeric(b)) => a == b,
            (Text(a), Text(b)) | (Json(a), Json(b)) | (Jsonb(a), Jsonb(b)) => a == b,
            (Bytea(a), Bytea(b)) => a == b,
            (Date(a), Date(b)) => a == b,
            (Time(a), Time(b)) => a == b,
            (TimeTz(a), TimeTz(b)) => a == b,
            (Timestamp(a), Timestamp(b)) => a == b,
            (TimestampTz(a), TimestampTz(b)) => a == b,
            (Interval(a), Interval(b)) => a == b,
            (Uuid(a), Uuid(b)) => a == b,
            (Array(a), Array(b)) => a == b,
            (Other(a), Other(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Value::Null | Value::Unchanged => {}
            Value::Bool(v) => v.hash(state),
            Value::Int2(v) => v.hash(state),
            Value::Int4(v) => v.hash(state),
            Value::Int8(v) => v.hash(state),
            Value::Oid(v) => v.hash(state),
            // All NaNs are equal, so they must hash alike.
            Value::Float4(v) => (if v.is_nan() { f32::NAN } else { *v })
                .to_bits()
                .hash(state),
            Value::Float8(v) => (if v.is_nan() { f64::NAN } else { *v })
                .to_bits()
                .hash(state),
            Value::Numeric(v) => v.hash(state),
            Value::Text(v) | Value::Json(v) | Value::Jsonb(v) => v.hash(state),
            Value::Bytea(v) => v.hash(state),
            Value::Date(v) => v.hash(state),
            Value::Time(v) => v.hash(state),
            Value::TimeTz(v) => v.hash(state),
            Value::Timestamp(v) => v.hash(state),
            Value::TimestampTz(v) => v.hash(state),
            Value::Interval(v) => v.hash(state),
            Value::Uuid(v) => v.hash(state),
            Value::Array(v) => v.hash(state),
            Value::Other(v) => v.hash(state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_equals_nan_but_signed_zeros_differ() {
        assert_eq!(Value::Float8(f64::NAN), Value::Float8(-f64::NAN));
        assert_ne!(Value::Float8(0.0), Value::Float8(-0.0));
        assert_ne!(Value::Null, Value::Unchanged);
    }

    #[test]
    fn array_shape_check() {
        let a = Array {
            element_type: 23,
            dims: vec![
                ArrayDim {
                    len: 2,
                    lower_bound: 1,
                },
                ArrayDim {
                    len: 2,
                    lower_bound: 0,
                },
            ],
            elements: vec![Value::Int4(1), Value::Null, Value::Int4(3), Value::Int4(4)],
        };
        assert!(a.is_well_formed());
        assert!(Array::one_dimensional(23, vec![]).is_well_formed());
    }

    #[test]
    fn value_stays_small() {
        assert!(
            std::mem::size_of::<Value>() <= 40,
            "{}",
            std::mem::size_of::<Value>()
        );
    }
}
