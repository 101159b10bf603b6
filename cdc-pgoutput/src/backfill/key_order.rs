//! Primary-key order exactly as PostgreSQL's btree sorts it, for the types where this crate
//! can reproduce it.
//!
//! A chunk of an online snapshot covers a range of primary keys, read with
//! `ORDER BY <key columns>`; deciding whether a streamed row falls inside a chunk means
//! comparing keys as the server did. A wrong answer loses or duplicates rows, so a column
//! is orderable here only when its type's default btree operator class can be reproduced
//! exactly from the decoded [`Value`], and [`KeyColumnOrder::for_column`] refuses every other
//! column, with the reason.
//!
//! # Orderable types
//!
//! - `bool` (false before true), `int2`, `int4`, `int8`, `oid` (unsigned).
//! - `float4`, `float8`: `-Infinity` < finite values < `Infinity` < `NaN`; `-0` equals `0`
//!   and all NaNs are equal (Postgres's `float8_cmp_internal`, not IEEE comparison).
//! - `numeric`: `-Infinity` < finite values < `Infinity` < `NaN`; equal values with
//!   different scales are equal (`1.0 = 1.00`).
//! - `date`, `timestamp`, `timestamptz`: by Postgres's stored integer, so `-infinity` is
//!   first and `infinity` last; `time`: microseconds since midnight (`24:00:00` last).
//! - `uuid`: its 16 bytes, unsigned, in order.
//! - `bytea`: `memcmp` order, a prefix before the longer value.
//! - `text`, `varchar`, `name` and `bpchar` under a collation that sorts bytewise: the
//!   libc `C` and `POSIX` collations and the builtin provider's `C` locale (Postgres 17+).
//!   Strings compare as their UTF-8 bytes (`memcmp`, a prefix first), which is code point
//!   order. `bpchar` ignores trailing spaces, as Postgres's `bpcharcmp` does (`'a ' = 'a'`;
//!   other trailing white space counts).
//!
//! # Not orderable, and why
//!
//! - Strings under any other collation (a libc locale such as `en_US.utf8`, ICU, and also
//!   the builtin `C.UTF-8` and libc `C.UTF-8` locales, which are not proven bytewise on
//!   every platform and version): their order comes from the server's collation library
//!   and its version; reproducing it would need the same library.
//! - `"char"`: the decoded text escapes bytes from 0x80 on (`\351`), so it is not the byte
//!   Postgres compares.
//! - `interval` and `timetz`: their btree order is not the order of their fields
//!   (`interval` makes `'1 mon'` equal to `'30 days'`; `timetz` compares the UTC instant,
//!   then the offset); not reproduced here.
//! - Enums: ordered by `pg_enum.enumsortorder`, catalog data the value does not carry.
//! - `json` (no btree operator class), `jsonb`, arrays, ranges, composite and extension
//!   types, domains (pass the domain's base type and the column's collation instead:
//!   a domain's values sort with its base type's operator class), `xid`/`cid` (no btree
//!   operator class), and every type decoded as [`Value::Other`].

use std::cmp::Ordering;

use cdc_core::value::{Date, Timestamp, TimestampTz};
use cdc_core::{Numeric, TypeOid, Value};

use crate::types::oids;

/// How one key column's values compare: a type whose btree order is reproduced exactly,
/// under a collation that allows it. Only [`KeyColumnOrder::for_column`] makes one, so a
/// column that cannot be ordered exactly never gets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyColumnOrder {
    type_oid: TypeOid,
    kind: Kind,
}

/// The collation a key column compares with, as the catalog describes it.
///
/// Read `pg_attribute.attcollation` of the column; 0 is [`KeyCollation::NotCollatable`];
/// otherwise the collation's provider and locale from `pg_collation` (`collprovider`,
/// `collcollate` for libc, `colllocale` for ICU and builtin on Postgres 17+, `colliculocale`
/// for ICU on 15–16, `collcollate` for ICU before).
///
/// There is deliberately no variant for the database default collation (`"default"`, OID
/// 100, `collprovider = 'd'`): whether it sorts bytewise depends on the database, so the
/// caller must resolve it to the database's own provider and locale
/// (`pg_database.datlocprovider` from Postgres 15 on, always libc before; `datcollate` for
/// libc; `datlocale`, or `daticulocale` on 15–16, otherwise). Without that step there is
/// nothing to pass, so the default collation cannot be mistaken for `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCollation<'a> {
    /// The column's type is not collatable (`attcollation = 0`): integers, dates, `bytea`, …
    NotCollatable,
    /// A libc collation (`collprovider = 'c'`) with this `LC_COLLATE` (`collcollate`, or
    /// the database's `datcollate`). Only `C` and `POSIX` sort bytewise.
    Libc {
        /// The locale name, e.g. `C`, `POSIX`, `en_US.utf8`.
        collate: &'a str,
    },
    /// An ICU collation (`collprovider = 'i'`); never bytewise.
    Icu {
        /// The ICU locale, e.g. `und-x-icu`, `en-US`; only quoted in errors.
        locale: &'a str,
    },
    /// A collation of the builtin provider (`collprovider = 'b'`, Postgres 17+). Only the
    /// locale `C` is accepted.
    Builtin {
        /// The locale, e.g. `C`, `C.UTF-8`.
        locale: &'a str,
    },
}

/// Why a column cannot be a key column of a [`KeyOrder`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnsupportedKeyColumn {
    /// The type's btree order is not reproduced here (see the [module docs](self)).
    #[error(
        "key column of type {}: its btree order is not reproduced by pgcdc",
        type_label(*.type_oid)
    )]
    Type {
        /// The column's type OID.
        type_oid: TypeOid,
    },
    /// A string type under a collation that does not sort bytewise.
    #[error(
        "key column of type {} under {collation}: only collations that sort bytewise \
         (libc C or POSIX, builtin C) are orderable; any other order comes from the \
         server's collation library",
        type_label(*.type_oid)
    )]
    Collation {
        /// The column's type OID.
        type_oid: TypeOid,
        /// The collation, described (e.g. `libc collation "en_US.utf8"`).
        collation: String,
    },
    /// A string type, but [`KeyCollation::NotCollatable`] was given: string columns always
    /// have a collation.
    #[error(
        "key column of type {} has no collation; string columns always have one \
         (pg_attribute.attcollation)",
        type_label(*.type_oid)
    )]
    MissingCollation {
        /// The column's type OID.
        type_oid: TypeOid,
    },
    /// A collation was given for a type that is not collatable: the caller's catalog
    /// reading is off.
    #[error(
        "key column of type {} is not collatable, but {collation} was given",
        type_label(*.type_oid)
    )]
    UnexpectedCollation {
        /// The column's type OID.
        type_oid: TypeOid,
        /// The collation given, described.
        collation: String,
    },
}

/// The order of a whole key: its columns compared one after another (lexicographically),
/// as `ORDER BY col1, col2, …` with each column ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyOrder {
    columns: Vec<KeyColumnOrder>,
    /// Only the server can compare these keys ([`KeyOrder::by_server`]).
    by_server: bool,
}

/// Why two keys could not be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyOrderError {
    /// A key does not have one value per key column.
    #[error("key has {got} values, but the key order has {expected} columns")]
    Arity {
        /// Number of key columns.
        expected: usize,
        /// Number of values in the key.
        got: usize,
    },
    /// The order is [`KeyOrder::by_server`]: only the server can compare these keys.
    #[error("only the server can compare these keys (their order is its collation's or type's)")]
    ByServer,
    /// A key value is NULL. Primary key columns are never NULL, so this is a caller bug.
    #[error("key column {column} is NULL; primary key values are never NULL")]
    Null {
        /// Index of the key column (0-based).
        column: usize,
    },
    /// A key value is not of the column's type (including an unchanged-TOAST placeholder,
    /// which the caller must replace with the old key's value first).
    #[error("key column {column} holds {expected} values, but got a {found} value")]
    TypeMismatch {
        /// Index of the key column (0-based).
        column: usize,
        /// The variant the column's type decodes to ([`Value::kind_name`]).
        expected: &'static str,
        /// The variant found ([`Value::kind_name`]).
        found: &'static str,
    },
    /// A finite numeric whose text is not `[-]digits[.digits]` (possible only for a value
    /// built without [`Numeric::finite`]'s check).
    #[error("key column {column}: numeric {start:?} is not [-]digits[.digits]")]
    InvalidNumeric {
        /// Index of the key column (0-based).
        column: usize,
        /// The start of the text.
        start: String,
    },
}

/// Which comparison a column uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4,
    Float8,
    Numeric,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Uuid,
    Bytea,
    /// `text`, `varchar`, `name` under a bytewise collation.
    Text,
    /// `bpchar` under a bytewise collation: trailing spaces ignored.
    Bpchar,
}

impl KeyColumnOrder {
    /// The order of a key column of type `type_oid` (a built-in type's OID; for a domain,
    /// its base type's) under `collation`, or why it cannot be reproduced exactly.
    ///
    /// String types (`text`, `varchar`, `name`, `bpchar`) need a bytewise collation
    /// ([`KeyCollation::Libc`] `C`/`POSIX` or [`KeyCollation::Builtin`] `C`); the other
    /// orderable types need [`KeyCollation::NotCollatable`]. The module docs list the
    /// orderable types and why the others are not.
    pub fn for_column(
        type_oid: TypeOid,
        collation: KeyCollation<'_>,
    ) -> Result<KeyColumnOrder, UnsupportedKeyColumn> {
        let kind = match type_oid {
            oids::BOOL => Kind::Bool,
            oids::INT2 => Kind::Int2,
            oids::INT4 => Kind::Int4,
            oids::INT8 => Kind::Int8,
            oids::OID => Kind::Oid,
            oids::FLOAT4 => Kind::Float4,
            oids::FLOAT8 => Kind::Float8,
            oids::NUMERIC => Kind::Numeric,
            oids::DATE => Kind::Date,
            oids::TIME => Kind::Time,
            oids::TIMESTAMP => Kind::Timestamp,
            oids::TIMESTAMPTZ => Kind::TimestampTz,
            oids::UUID => Kind::Uuid,
            oids::BYTEA => Kind::Bytea,
            oids::TEXT | oids::VARCHAR | oids::NAME => Kind::Text,
            oids::BPCHAR => Kind::Bpchar,
            _ => return Err(UnsupportedKeyColumn::Type { type_oid }),
        };
        let collatable = matches!(kind, Kind::Text | Kind::Bpchar);
        match (collatable, collation) {
            (false, KeyCollation::NotCollatable) => {}
            (false, other) => {
                return Err(UnsupportedKeyColumn::UnexpectedCollation {
                    type_oid,
                    collation: other.describe(),
                });
            }
            (true, KeyCollation::NotCollatable) => {
                return Err(UnsupportedKeyColumn::MissingCollation { type_oid });
            }
            (true, other) if other.is_bytewise() => {}
            (true, other) => {
                return Err(UnsupportedKeyColumn::Collation {
                    type_oid,
                    collation: other.describe(),
                });
            }
        }
        Ok(KeyColumnOrder { type_oid, kind })
    }

    /// The column's type OID.
    pub fn type_oid(&self) -> TypeOid {
        self.type_oid
    }
}

impl KeyCollation<'_> {
    /// Whether strings under this collation compare as `memcmp` of their bytes. Postgres
    /// takes that path (`collate_is_c`) for libc `C` and `POSIX` and for the builtin `C`.
    fn is_bytewise(&self) -> bool {
        match self {
            KeyCollation::Libc { collate } => matches!(*collate, "C" | "POSIX"),
            KeyCollation::Builtin { locale } => *locale == "C",
            KeyCollation::Icu { .. } | KeyCollation::NotCollatable => false,
        }
    }

    /// For error messages.
    fn describe(&self) -> String {
        match self {
            KeyCollation::NotCollatable => "no collation".to_owned(),
            KeyCollation::Libc { collate } => format!("libc collation {collate:?}"),
            KeyCollation::Icu { locale } => format!("ICU collation {locale:?}"),
            KeyCollation::Builtin { locale } => format!("builtin collation {locale:?}"),
        }
    }
}

/// `pg_catalog.int4 (OID 23)`, or just the OID for a type this crate does not know.
fn type_label(type_oid: TypeOid) -> String {
    match oids::builtin_name(type_oid) {
        Some(name) => format!("{name} (OID {type_oid})"),
        None => format!("OID {type_oid}"),
    }
}

impl KeyOrder {
    /// The order of keys with these columns, in key order. With no columns every two keys
    /// are equal.
    pub fn new(columns: Vec<KeyColumnOrder>) -> KeyOrder {
        KeyOrder {
            columns,
            by_server: false,
        }
    }

    /// The order of keys that only the server can compare: a column whose order is not
    /// reproduced here (text under a linguistic collation, an enum, `inet`, …). Every
    /// [`Self::compare`] is refused; the online snapshot's merge asks the server instead
    /// (`Backfill::comparisons_needed`).
    pub fn by_server() -> KeyOrder {
        KeyOrder {
            columns: Vec::new(),
            by_server: true,
        }
    }

    /// Whether only the server can compare these keys.
    pub fn is_by_server(&self) -> bool {
        self.by_server
    }

    /// The key columns.
    pub fn columns(&self) -> &[KeyColumnOrder] {
        &self.columns
    }

    /// Compares two keys (one value per key column, in key order) as the server's btree
    /// would: the first column that differs decides; `Equal` means the server sees the same
    /// key (which may be a different representation, e.g. `1.0` and `1.00`, `-0` and `0`,
    /// `'a '` and `'a'` as `bpchar`).
    ///
    /// Every value of both keys is checked, also after the deciding column, so a malformed
    /// key is an error whatever the values: a length that is not the number of columns, a
    /// NULL, a value whose variant is not the column's type (including
    /// [`Value::Unchanged`]). Never panics.
    pub fn compare(&self, a: &[Value], b: &[Value]) -> Result<Ordering, KeyOrderError> {
        if self.by_server {
            return Err(KeyOrderError::ByServer);
        }
        for key in [a, b] {
            if key.len() != self.columns.len() {
                return Err(KeyOrderError::Arity {
                    expected: self.columns.len(),
                    got: key.len(),
                });
            }
        }
        let mut result = Ordering::Equal;
        for (column, (order, (x, y))) in self.columns.iter().zip(a.iter().zip(b)).enumerate() {
            let x = sort_key(order.kind, x).map_err(|p| p.at(column))?;
            let y = sort_key(order.kind, y).map_err(|p| p.at(column))?;
            if result == Ordering::Equal {
                result = x.cmp_same_kind(&y);
            }
        }
        Ok(result)
    }
}

/// What is wrong with one value, before the column index is known.
enum Problem {
    Null,
    Mismatch {
        expected: &'static str,
        found: &'static str,
    },
    InvalidNumeric(String),
}

impl Problem {
    fn at(self, column: usize) -> KeyOrderError {
        match self {
            Problem::Null => KeyOrderError::Null { column },
            Problem::Mismatch { expected, found } => KeyOrderError::TypeMismatch {
                column,
                expected,
                found,
            },
            Problem::InvalidNumeric(start) => KeyOrderError::InvalidNumeric { column, start },
        }
    }
}

/// A value reduced to what its column's comparison looks at.
enum SortKey<'v> {
    Bool(bool),
    /// Integers, and dates, times and timestamps as Postgres stores them.
    Int(i64),
    Oid(u32),
    Float4(f32),
    Float8(f64),
    Numeric(NumericKey<'v>),
    /// `uuid`, `bytea` and strings: `memcmp` order, a prefix first.
    Bytes(&'v [u8]),
}

/// A numeric in a form that compares by magnitude without allocating.
#[derive(Clone, Copy)]
enum NumericKey<'v> {
    NegInfinity,
    /// `sign` is -1, 0 or 1; `int` has no leading zeros and `frac` no trailing zeros, so a
    /// value has exactly one form (zero is `sign` 0 with both empty).
    Finite {
        sign: i8,
        int: &'v [u8],
        frac: &'v [u8],
    },
    PosInfinity,
    NaN,
}

/// The sort key of `value` for a column of `kind`.
fn sort_key(kind: Kind, value: &Value) -> Result<SortKey<'_>, Problem> {
    let key = match (kind, value) {
        (Kind::Bool, Value::Bool(v)) => SortKey::Bool(*v),
        (Kind::Int2, Value::Int2(v)) => SortKey::Int(i64::from(*v)),
        (Kind::Int4, Value::Int4(v)) => SortKey::Int(i64::from(*v)),
        (Kind::Int8, Value::Int8(v)) => SortKey::Int(*v),
        (Kind::Oid, Value::Oid(v)) => SortKey::Oid(*v),
        (Kind::Float4, Value::Float4(v)) => SortKey::Float4(*v),
        (Kind::Float8, Value::Float8(v)) => SortKey::Float8(*v),
        (Kind::Numeric, Value::Numeric(n)) => SortKey::Numeric(numeric_key(n)?),
        // Postgres stores -infinity and infinity as the integer type's minimum and maximum,
        // so `Days(i32::MIN)` is -infinity to it as well.
        (Kind::Date, Value::Date(d)) => SortKey::Int(i64::from(match *d {
            Date::NegInfinity => i32::MIN,
            Date::Days(days) => days,
            Date::Infinity => i32::MAX,
        })),
        (Kind::Time, Value::Time(t)) => SortKey::Int(t.0),
        (Kind::Timestamp, Value::Timestamp(t)) => SortKey::Int(match *t {
            Timestamp::NegInfinity => i64::MIN,
            Timestamp::Micros(us) => us,
            Timestamp::Infinity => i64::MAX,
        }),
        (Kind::TimestampTz, Value::TimestampTz(t)) => SortKey::Int(match *t {
            TimestampTz::NegInfinity => i64::MIN,
            TimestampTz::Micros(us) => us,
            TimestampTz::Infinity => i64::MAX,
        }),
        (Kind::Uuid, Value::Uuid(u)) => SortKey::Bytes(u.as_bytes()),
        (Kind::Bytea, Value::Bytea(b)) => SortKey::Bytes(b),
        (Kind::Text, Value::Text(t)) => SortKey::Bytes(t.as_bytes()),
        (Kind::Bpchar, Value::Text(t)) => SortKey::Bytes(trim_trailing_spaces(t.as_bytes())),
        (_, Value::Null) => return Err(Problem::Null),
        (kind, other) => {
            return Err(Problem::Mismatch {
                expected: kind.value_kind(),
                found: other.kind_name(),
            });
        }
    };
    Ok(key)
}

impl Kind {
    /// The [`Value::kind_name`] of the variant this column's values decode to.
    fn value_kind(self) -> &'static str {
        match self {
            Kind::Bool => "bool",
            Kind::Int2 => "int2",
            Kind::Int4 => "int4",
            Kind::Int8 => "int8",
            Kind::Oid => "oid",
            Kind::Float4 => "float4",
            Kind::Float8 => "float8",
            Kind::Numeric => "numeric",
            Kind::Date => "date",
            Kind::Time => "time",
            Kind::Timestamp => "timestamp",
            Kind::TimestampTz => "timestamptz",
            Kind::Uuid => "uuid",
            Kind::Bytea => "bytea",
            Kind::Text | Kind::Bpchar => "text",
        }
    }
}

impl SortKey<'_> {
    /// Compares two keys of the same column. Keys of one column always have the same
    /// variant (`sort_key` maps each kind to one variant); a mixed pair, which cannot occur,
    /// orders by variant rather than panicking.
    fn cmp_same_kind(&self, other: &SortKey<'_>) -> Ordering {
        match (self, other) {
            (SortKey::Bool(a), SortKey::Bool(b)) => a.cmp(b),
            (SortKey::Int(a), SortKey::Int(b)) => a.cmp(b),
            (SortKey::Oid(a), SortKey::Oid(b)) => a.cmp(b),
            (SortKey::Float4(a), SortKey::Float4(b)) => cmp_float(f64::from(*a), f64::from(*b)),
            (SortKey::Float8(a), SortKey::Float8(b)) => cmp_float(*a, *b),
            (SortKey::Numeric(a), SortKey::Numeric(b)) => cmp_numeric(*a, *b),
            (SortKey::Bytes(a), SortKey::Bytes(b)) => a.cmp(b),
            (a, b) => a.variant_rank().cmp(&b.variant_rank()),
        }
    }

    fn variant_rank(&self) -> u8 {
        match self {
            SortKey::Bool(_) => 0,
            SortKey::Int(_) => 1,
            SortKey::Oid(_) => 2,
            SortKey::Float4(_) => 3,
            SortKey::Float8(_) => 4,
            SortKey::Numeric(_) => 5,
            SortKey::Bytes(_) => 6,
        }
    }
}

/// Postgres's float order (`float8_cmp_internal`; `float4_cmp_internal` is the same on
/// `f32`, and widening `f32` to `f64` is exact): NaN equals NaN and is greater than
/// everything else; otherwise numeric order, in which `-0 == 0`.
fn cmp_float(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        // Defined for every pair of non-NaN floats.
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// `sign`/`int`/`frac` of a numeric; see [`NumericKey::Finite`].
fn numeric_key(n: &Numeric) -> Result<NumericKey<'_>, Problem> {
    let text = match n {
        Numeric::NegInfinity => return Ok(NumericKey::NegInfinity),
        Numeric::PosInfinity => return Ok(NumericKey::PosInfinity),
        Numeric::NaN => return Ok(NumericKey::NaN),
        Numeric::Finite(text) => text.as_str(),
    };
    let invalid = || Problem::InvalidNumeric(text.chars().take(32).collect());
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = match unsigned.split_once('.') {
        Some((int, frac)) if !frac.is_empty() => (int, frac),
        Some(_) => return Err(invalid()),
        None => (unsigned, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) {
        return Err(invalid());
    }
    let int = int.trim_start_matches('0').as_bytes();
    let frac = frac.trim_end_matches('0').as_bytes();
    let sign = if int.is_empty() && frac.is_empty() {
        0 // "-0.00" is zero, as in Postgres
    } else if negative {
        -1
    } else {
        1
    };
    Ok(NumericKey::Finite { sign, int, frac })
}

/// Postgres's numeric order (`cmp_numerics`): `-Infinity` < finite < `Infinity` < `NaN`,
/// NaN equal to NaN, finite values by value whatever their scale.
fn cmp_numeric(a: NumericKey<'_>, b: NumericKey<'_>) -> Ordering {
    fn class(n: &NumericKey<'_>) -> u8 {
        match n {
            NumericKey::NegInfinity => 0,
            NumericKey::Finite { .. } => 1,
            NumericKey::PosInfinity => 2,
            NumericKey::NaN => 3,
        }
    }
    match (a, b) {
        (
            NumericKey::Finite {
                sign: sa,
                int: ia,
                frac: fa,
            },
            NumericKey::Finite {
                sign: sb,
                int: ib,
                frac: fb,
            },
        ) => {
            let magnitude = || {
                // Without leading zeros, more integer digits means larger; then digit by
                // digit, and the fractions (without trailing zeros) as digit strings, where
                // a prefix is the smaller number.
                ia.len()
                    .cmp(&ib.len())
                    .then_with(|| ia.cmp(ib))
                    .then_with(|| fa.cmp(fb))
            };
            match sa.cmp(&sb) {
                Ordering::Equal if sa > 0 => magnitude(),
                Ordering::Equal if sa < 0 => magnitude().reverse(),
                other => other,
            }
        }
        (a, b) => class(&a).cmp(&class(&b)),
    }
}

/// `bpchar` comparison ignores trailing spaces (Postgres's `bcTruelen`: only U+0020).
fn trim_trailing_spaces(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    bytes.get(..end).unwrap_or(bytes)
}

#[cfg(test)]
#[path = "key_order_tests.rs"]
mod tests;
