//! Events covering every event kind, every [`Value`] variant and the edge cases of both
//! renderings (escapes, non-finite and out-of-range values, unchanged TOAST columns, old
//! keys and rows), shared by the text and JSON renderers' golden tests.

use std::sync::Arc;

use bytes::Bytes;
use cdc_core::value::{Date, Interval, Time, TimeTz, Timestamp, TimestampTz};
use cdc_core::{
    Array, ArrayDim, ChangeEvent, ColumnSchema, ColumnType, EventKind, Lsn, Numeric, OtherRepr,
    OtherValue, ReplicaIdentity, SchemaRef, SnapshotMarker, TableName, TableSchema, Text, TxBegin,
    TxCommit, Value,
};

use crate::testing::{delete, insert, old_full, old_key, pos, text, update};

/// A schema with `columns` as `(name, type oid, type name, part of key)`.
fn schema(
    name: TableName,
    columns: &[(&str, u32, Option<&str>, bool)],
    identity: ReplicaIdentity,
) -> SchemaRef {
    Arc::new(TableSchema {
        name,
        relation_id: 16_400,
        columns: columns
            .iter()
            .map(|(n, oid, type_name, key)| ColumnSchema {
                name: (*n).to_owned(),
                column_type: ColumnType {
                    oid: *oid,
                    modifier: -1,
                    name: type_name.map(str::to_owned),
                    definition: Default::default(),
                },
                nullable: !key,
                part_of_key: *key,
                generated: false,
            })
            .collect(),
        replica_identity: identity,
        primary_key: columns
            .iter()
            .filter(|c| c.3)
            .map(|c| c.0.to_owned())
            .collect(),
    })
}

fn numeric(s: &str) -> Value {
    Value::Numeric(s.parse::<Numeric>().unwrap())
}

fn array(dims: &[(u32, i32)], elements: Vec<Value>) -> Value {
    Value::Array(Box::new(Array {
        element_type: 23,
        dims: dims
            .iter()
            .map(|&(len, lower_bound)| ArrayDim { len, lower_bound })
            .collect(),
        elements,
    }))
}

fn other(type_name: Option<&str>, repr: OtherRepr) -> Value {
    Value::Other(Box::new(OtherValue {
        type_oid: 869,
        type_name: type_name.map(Text::from),
        repr,
    }))
}

/// Every character class a JSON or SQL string escape treats specially: quotes,
/// backslash, the named and unnamed control characters, DEL, and non-ASCII including a
/// supplementary-plane character and the JavaScript line separators.
pub(super) const TRICKY: &str =
    "it's \"q\" \\ /\n\t\r\u{8}\u{c}\u{0}\u{1}\u{1f}\u{7f} é ☃ 😀 \u{2028}\u{2029}";

/// One column per scalar value kind.
fn scalars() -> SchemaRef {
    schema(
        TableName::new("public", "scalars"),
        &[
            ("id", 20, Some("pg_catalog.int8"), true),
            ("b", 16, None, false),
            ("i2", 21, None, false),
            ("i4", 23, None, false),
            ("o", 26, None, false),
            ("f4", 700, None, false),
            ("f8", 701, None, false),
            ("n", 1700, None, false),
            ("t", 25, None, false),
            ("by", 17, None, false),
            ("d", 1082, None, false),
            ("tm", 1083, None, false),
            ("ttz", 1266, None, false),
            ("ts", 1114, None, false),
            ("tstz", 1184, None, false),
            ("iv", 1186, None, false),
            ("u", 2950, None, false),
            ("inet", 869, None, false),
        ],
        ReplicaIdentity::Default,
    )
}

/// Finite, in-range values, with the extremes of each integer type.
fn scalars_finite() -> Vec<Value> {
    vec![
        Value::Int8(i64::MAX),
        Value::Bool(true),
        Value::Int2(i16::MIN),
        Value::Int4(-1),
        Value::Oid(u32::MAX),
        Value::Float4(1.5),
        Value::Float8(0.1),
        numeric("-12.3400"),
        text(TRICKY),
        Value::Bytea(Bytes::from_static(&[0, 1, 9, 10, 99, 100, 127, 128, 255])),
        Value::Date(Date::Days(0)),
        Value::Time(Time(45_296_789_012)),
        Value::TimeTz(TimeTz {
            time: Time(3_600_000_000),
            offset_seconds: 19_800,
        }),
        Value::Timestamp(Timestamp::Micros(-1)),
        Value::TimestampTz(TimestampTz::Micros(1_234_567_890_123_456)),
        Value::Interval(Interval {
            months: 14,
            days: -3,
            micros: 3_723_000_004,
        }),
        Value::Uuid(uuid::Uuid::from_u128(
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        )),
        other(
            Some("pg_catalog.inet"),
            OtherRepr::Text(Text::from("10.0.0.1/8")),
        ),
    ]
}

/// The other end of each range: the lossless policies' strings (non-finite floats and
/// numerics, ±infinity and out-of-range dates and times), negative zero, subnormals.
fn scalars_edges() -> Vec<Value> {
    vec![
        Value::Int8(i64::MIN),
        Value::Bool(false),
        Value::Int2(i16::MAX),
        Value::Int4(i32::MIN),
        Value::Oid(0),
        Value::Float4(f32::NAN),
        Value::Float8(f64::NAN),
        numeric("NaN"),
        text(""),
        Value::Bytea(Bytes::new()),
        Value::Date(Date::Infinity),
        Value::Time(Time(86_400_000_000)),
        Value::TimeTz(TimeTz {
            time: Time(0),
            offset_seconds: -34_200,
        }),
        Value::Timestamp(Timestamp::NegInfinity),
        Value::TimestampTz(TimestampTz::Infinity),
        Value::Interval(Interval::default()),
        Value::Uuid(uuid::Uuid::nil()),
        other(None, OtherRepr::Text(Text::from("'quoted' \"text\""))),
    ]
}

fn scalars_more_edges() -> Vec<Value> {
    vec![
        Value::Int8(0),
        Value::Null,
        Value::Int2(0),
        Value::Int4(i32::MAX),
        Value::Oid(1),
        Value::Float4(f32::INFINITY),
        Value::Float8(f64::NEG_INFINITY),
        numeric("Infinity"),
        text("ascii only"),
        Value::Null,
        Value::Date(Date::Days(-1_000_000)),
        Value::Time(Time(0)),
        Value::Null,
        Value::Timestamp(Timestamp::Micros(i64::MAX)),
        Value::TimestampTz(TimestampTz::NegInfinity),
        Value::Interval(Interval {
            months: -1,
            days: 0,
            micros: -1,
        }),
        Value::Null,
        Value::Null,
    ]
}

fn scalars_float_edges() -> Vec<Value> {
    vec![
        Value::Int8(-1),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Float4(f32::NEG_INFINITY),
        Value::Float8(f64::INFINITY),
        numeric("-Infinity"),
        Value::Null,
        Value::Null,
        Value::Date(Date::NegInfinity),
        Value::Null,
        Value::Null,
        Value::Timestamp(Timestamp::Infinity),
        Value::TimestampTz(TimestampTz::Micros(i64::MIN)),
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

fn scalars_float_digits() -> Vec<Value> {
    vec![
        Value::Int8(1),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Float4(-0.0),
        Value::Float8(-0.0),
        numeric("0"),
        Value::Null,
        Value::Null,
        Value::Date(Date::Days(2_921_939)),
        Value::Null,
        Value::Null,
        Value::Timestamp(Timestamp::Micros(252_455_615_999_999_999)),
        Value::TimestampTz(TimestampTz::Micros(-63_082_281_600_000_000)),
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

fn scalars_float_tiny() -> Vec<Value> {
    vec![
        Value::Int8(2),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Float4(f32::MIN_POSITIVE),
        Value::Float8(5e-324),
        numeric("123456789012345678901234567890.000000000000000000001"),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

fn scalars_float_big() -> Vec<Value> {
    vec![
        Value::Int8(3),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Float4(f32::MAX),
        Value::Float8(1e300),
        numeric("-0.5"),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

/// Arrays and JSON documents.
fn composites() -> SchemaRef {
    schema(
        TableName::new("public", "composites"),
        &[
            ("id", 23, None, true),
            ("ints", 1007, Some("pg_catalog._int4"), false),
            ("grid", 1009, None, false),
            ("empty", 1007, None, false),
            ("bounded", 1007, None, false),
            ("floats", 1022, None, false),
            ("j", 114, Some("pg_catalog.json"), false),
            ("jb", 3802, None, false),
        ],
        ReplicaIdentity::Default,
    )
}

fn composite_values() -> Vec<Value> {
    vec![
        Value::Int4(1),
        array(
            &[(3, 1)],
            vec![Value::Int4(1), Value::Null, Value::Int4(-3)],
        ),
        array(
            &[(2, 1), (2, 1)],
            vec![text("a"), text("b,c"), text("\"q\"\n"), Value::Null],
        ),
        array(&[], vec![]),
        array(&[(2, 0)], vec![Value::Int4(1), Value::Int4(2)]),
        array(
            &[(4, 1)],
            vec![
                Value::Float8(f64::NAN),
                Value::Float8(f64::INFINITY),
                Value::Float8(-0.0),
                Value::Float8(2.5),
            ],
        ),
        Value::Json(Text::from(
            "{\"b\": 1,\n \"a\" : [1, 2.50, 1e400, \"x y\\n\\u00e9\"], \"b\": null}",
        )),
        Value::Jsonb(Text::from(
            "{\"a\": {\"b\": [true, false, null, \"\\\"\"]}}",
        )),
    ]
}

fn composite_scalar_json() -> Vec<Value> {
    vec![
        Value::Int4(2),
        array(&[(1, 1)], vec![Value::Int4(0)]),
        array(&[(1, -2), (2, 1)], vec![Value::Int4(7), Value::Null]),
        Value::Null,
        Value::Null,
        array(&[(1, 1)], vec![Value::Null]),
        Value::Json(Text::from("  \"just a string\" ")),
        Value::Jsonb(Text::from("12.50e3")),
    ]
}

/// A table whose names need quoting in SQL and escaping in JSON.
fn odd_names() -> SchemaRef {
    schema(
        TableName::new("My Schema", "t\"x\\y"),
        &[
            ("Key \"1\"", 23, None, true),
            (
                "col\nwith\tcontrols\u{1}",
                25,
                Some("pg_catalog.text"),
                false,
            ),
            ("ünï☃", 25, None, false),
        ],
        ReplicaIdentity::Default,
    )
}

/// Replica identity FULL: every column is part of the old row.
fn full() -> SchemaRef {
    schema(
        TableName::new("public", "full"),
        &[
            ("id", 23, None, true),
            ("big", 25, None, true),
            ("x", 701, None, true),
        ],
        ReplicaIdentity::Full,
    )
}

fn event(lsn: u64, ordinal: u64, kind: EventKind) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(lsn, ordinal),
        kind,
    }
}

fn snapshot(ordinal: u64, marker: SnapshotMarker) -> ChangeEvent {
    event(0x1_0000_0000, ordinal, EventKind::Snapshot(marker))
}

/// The events, in an order no source would produce (each is rendered on its own).
pub(super) fn events() -> Vec<ChangeEvent> {
    let (s, c, o, f) = (scalars(), composites(), odd_names(), full());
    let lsn = 0x16B_3748;
    let mut renamed = (*o).clone();
    renamed.name = TableName::new("My Schema", "renamed");
    renamed.columns.truncate(2);
    renamed.columns[1].column_type.name = Some("pg_catalog.varchar".to_owned());
    vec![
        event(
            lsn,
            0,
            EventKind::Begin(TxBegin {
                final_lsn: Lsn(lsn),
                commit_time_micros: 0,
                xid: u32::MAX,
            }),
        ),
        event(
            lsn,
            0,
            EventKind::Begin(TxBegin {
                final_lsn: Lsn(u64::MAX),
                commit_time_micros: i64::MAX,
                xid: 0,
            }),
        ),
        insert(pos(lsn, 1), &s, scalars_finite()),
        insert(pos(lsn, 2), &s, scalars_edges()),
        insert(pos(lsn, 3), &s, scalars_more_edges()),
        insert(pos(lsn, 4), &s, scalars_float_edges()),
        insert(pos(lsn, 5), &s, scalars_float_digits()),
        insert(pos(lsn, 6), &s, scalars_float_tiny()),
        insert(pos(lsn, 7), &s, scalars_float_big()),
        insert(pos(lsn, 8), &c, composite_values()),
        insert(pos(lsn, 9), &c, composite_scalar_json()),
        insert(
            pos(lsn, 10),
            &o,
            vec![Value::Int4(1), text(TRICKY), text("ü")],
        ),
        // No old row; an unchanged TOAST column is left out of `new` and listed.
        update(
            pos(lsn, 11),
            &o,
            None,
            vec![Value::Int4(1), Value::Unchanged, Value::Null],
        ),
        // Key changed: the old key, with NULL placeholders for the other columns.
        update(
            pos(lsn, 12),
            &o,
            old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
            vec![Value::Int4(2), text("x"), Value::Unchanged],
        ),
        // FULL: unchanged columns are left out of both rows.
        update(
            pos(lsn, 13),
            &f,
            old_full(vec![Value::Int4(1), Value::Unchanged, Value::Float8(0.5)]),
            vec![Value::Int4(1), Value::Unchanged, Value::Float8(f64::NAN)],
        ),
        update(
            pos(lsn, 14),
            &f,
            old_full(vec![Value::Int4(1), text("big"), Value::Null]),
            vec![Value::Unchanged, Value::Unchanged, Value::Unchanged],
        ),
        delete(pos(lsn, 15), &o, None),
        delete(
            pos(lsn, 16),
            &o,
            old_key(vec![Value::Int4(2), Value::Null, Value::Null]),
        ),
        delete(
            pos(lsn, 17),
            &f,
            old_full(vec![Value::Int4(1), Value::Unchanged, Value::Float8(-0.0)]),
        ),
        event(
            lsn,
            18,
            EventKind::Truncate {
                tables: vec![s.clone()],
                cascade: false,
                restart_identity: false,
            },
        ),
        event(
            lsn,
            19,
            EventKind::Truncate {
                tables: vec![s.clone(), o.clone()],
                cascade: true,
                restart_identity: true,
            },
        ),
        event(
            lsn,
            20,
            EventKind::Truncate {
                tables: vec![],
                cascade: false,
                restart_identity: true,
            },
        ),
        event(
            lsn,
            21,
            EventKind::SchemaChange {
                old: None,
                new: o.clone(),
            },
        ),
        event(
            lsn,
            22,
            EventKind::SchemaChange {
                old: Some(o.clone()),
                new: Arc::new(renamed),
            },
        ),
        event(
            lsn,
            23,
            EventKind::Message {
                transactional: true,
                prefix: TRICKY.to_owned(),
                content: Bytes::from_static(TRICKY.as_bytes()),
            },
        ),
        event(
            lsn,
            24,
            EventKind::Message {
                transactional: false,
                prefix: String::new(),
                content: Bytes::from_static(&[0, 0x41, 0xff, 0xc3]),
            },
        ),
        event(
            lsn,
            25,
            EventKind::Message {
                transactional: false,
                prefix: "p".to_owned(),
                content: Bytes::new(),
            },
        ),
        event(
            lsn,
            26,
            EventKind::Commit(TxCommit {
                commit_lsn: Lsn(lsn),
                end_lsn: Lsn(lsn + 0x38),
                commit_time_micros: -86_400_000_001,
            }),
        ),
        event(
            lsn,
            27,
            EventKind::Commit(TxCommit {
                commit_lsn: Lsn(0),
                end_lsn: Lsn(1),
                commit_time_micros: i64::MIN,
            }),
        ),
        snapshot(0, SnapshotMarker::Started),
        snapshot(1, SnapshotMarker::Restarted),
        snapshot(2, SnapshotMarker::TableStarted(o.name.clone())),
        snapshot(
            3,
            SnapshotMarker::TableCompleted {
                table: s.name.clone(),
                rows: u64::MAX,
            },
        ),
        snapshot(
            4,
            SnapshotMarker::Completed {
                consistent_point: Lsn(0x1_0000_0028),
            },
        ),
    ]
}

/// Events the JSON rendering rejects: values with no JSON form, and an unchanged TOAST
/// value where a full row is needed.
pub(super) fn rejected_events() -> Vec<ChangeEvent> {
    let o = odd_names();
    vec![
        insert(
            pos(1, 1),
            &o,
            vec![
                Value::Int4(1),
                other(
                    Some("public.thing"),
                    OtherRepr::Binary(Bytes::from_static(&[1, 2])),
                ),
                Value::Null,
            ],
        ),
        insert(
            pos(1, 2),
            &o,
            vec![Value::Int4(1), Value::Unchanged, Value::Null],
        ),
        insert(
            pos(1, 3),
            &o,
            vec![
                Value::Int4(1),
                Value::Json(Text::from("[1, 2")),
                Value::Null,
            ],
        ),
    ]
}
