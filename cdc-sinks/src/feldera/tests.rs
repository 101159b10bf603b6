//! Golden tests (one expected JSON line per value kind and policy), envelope rules, and
//! round trips through serde_json.

use cdc_core::value::{
    Date, Interval, POSTGRES_EPOCH_JDATE, Time, TimeTz, Timestamp, TimestampTz, USECS_PER_DAY,
    USECS_PER_SEC, ymd_to_julian,
};
use cdc_core::{
    Array, ArrayDim, ChangeEvent, ErrorKind, EventKind, Numeric, OtherRepr, OtherValue,
    ReplicaIdentity, SchemaRef, Text, Value,
};

use super::*;
use crate::testing::{self, delete, insert, old_full, old_key, pos, text, update};

fn encoder(policies: Policies) -> FelderaEncoder {
    FelderaEncoder::new(EncoderOptions {
        policies,
        table_key: false,
    })
}

fn one_column() -> SchemaRef {
    testing::table("t", &[("v", 0)], &[], ReplicaIdentity::Default)
}

/// The line an insert of `value` into `public.t(v)` produces under `policies`.
fn line_with(policies: Policies, value: Value) -> Result<String, cdc_core::Error> {
    let mut enc = encoder(policies);
    let mut frame = Frame::new(Framing::Lines);
    enc.encode_event(&insert(pos(16, 1), &one_column(), vec![value]), &mut frame)?;
    Ok(String::from_utf8(frame.bytes().to_vec()).unwrap())
}

fn line(value: Value) -> String {
    line_with(Policies::default(), value).unwrap()
}

fn golden(value: Value, json: &str) {
    assert_eq!(line(value), format!("{{\"insert\":{{\"v\":{json}}}}}\n"));
}

fn days(y: i64, m: u32, d: u32) -> i32 {
    (ymd_to_julian(y, m, d) - POSTGRES_EPOCH_JDATE) as i32
}

fn micros(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64, us: i64) -> i64 {
    i64::from(days(y, mo, d)) * USECS_PER_DAY + ((h * 60 + mi) * 60 + s) * USECS_PER_SEC + us
}

fn numeric(s: &str) -> Value {
    Value::Numeric(s.parse().unwrap())
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

fn other_text(name: &str, repr: &str) -> Value {
    Value::Other(Box::new(OtherValue {
        type_oid: 869,
        type_name: Some(Text::from(name)),
        repr: OtherRepr::Text(Text::from(repr)),
    }))
}

#[test]
fn golden_scalars() {
    golden(Value::Null, "null");
    golden(Value::Bool(true), "true");
    golden(Value::Bool(false), "false");
    golden(Value::Int2(-5), "-5");
    golden(Value::Int4(i32::MAX), "2147483647");
    golden(Value::Int8(i64::MIN), "-9223372036854775808");
    golden(Value::Oid(u32::MAX), "4294967295");
    golden(Value::Float4(1.1), "1.1");
    golden(Value::Float8(0.1 + 0.2), "0.30000000000000004");
    golden(Value::Float8(1e300), "1e300");
    golden(Value::Float8(-0.0), "-0.0");
    golden(numeric("-12.3400"), "\"-12.3400\"");
    let digits = "9".repeat(200);
    golden(numeric(&format!("{digits}.5")), &format!("\"{digits}.5\""));
    golden(text("a\"b\\\n\t☃"), r#""a\"b\\\n\t☃""#);
    golden(
        Value::Bytea(bytes::Bytes::from_static(&[222, 173, 190, 239, 0, 7])),
        "[222,173,190,239,0,7]",
    );
    golden(Value::Bytea(bytes::Bytes::new()), "[]");
}

#[test]
fn golden_dates_and_times() {
    golden(Value::Date(Date::Days(days(2024, 2, 29))), "\"2024-02-29\"");
    golden(Value::Date(Date::Days(days(1, 1, 1))), "\"0001-01-01\"");
    golden(
        Value::Date(Date::Days(days(9999, 12, 31))),
        "\"9999-12-31\"",
    );
    golden(Value::Time(Time(3_723_000_004)), "\"01:02:03.000004\"");
    golden(Value::Time(Time(0)), "\"00:00:00.000000\"");
    golden(
        Value::TimeTz(TimeTz {
            time: Time(3_723_000_001),
            offset_seconds: 19_800,
        }),
        "\"01:02:03.000001+05:30\"",
    );
    golden(
        Value::Timestamp(Timestamp::Micros(micros(2024, 1, 2, 3, 4, 5, 0))),
        "\"2024-01-02 03:04:05.000000\"",
    );
    golden(
        Value::Timestamp(Timestamp::Micros(micros(1969, 12, 31, 23, 59, 59, 999_999))),
        "\"1969-12-31 23:59:59.999999\"",
    );
    golden(
        Value::TimestampTz(TimestampTz::Micros(micros(2024, 1, 2, 3, 4, 5, 600))),
        "\"2024-01-02T03:04:05.000600Z\"",
    );
    golden(
        Value::Interval(Interval {
            months: 14,
            days: 3,
            micros: 14_706_789_000,
        }),
        "\"1 year 2 mons 3 days 04:05:06.789\"",
    );
}

/// Every day of 0001–9999 as a date, a timestamp and a timestamptz, against chrono's
/// formatting of the same instant: the values are built through chrono, not through our
/// calendar arithmetic, so a shared mistake cannot cancel out (the Feb 29 of years
/// divisible by 400 once came out as March 1).
#[test]
fn every_day_of_years_1_to_9999_is_written_as_chrono_formats_it() {
    use super::format::{ColumnCtx, write_value};
    let epoch = chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    let table = cdc_core::TableName::new("public", "t");
    let ctx = ColumnCtx {
        table: &table,
        relation_id: 1,
        column: "v",
        index: 0,
        position: pos(16, 1),
    };
    let policies = Policies::default();
    let mut log = PolicyLog::default();
    let mut out = Vec::new();
    let mut write = |value: Value| -> String {
        out.clear();
        write_value(&mut out, &value, &policies, &mut log, &ctx).unwrap();
        String::from_utf8(out.clone()).unwrap()
    };
    let mut day = chrono::NaiveDate::from_ymd_opt(1, 1, 1).unwrap();
    let last = chrono::NaiveDate::from_ymd_opt(9999, 12, 31).unwrap();
    let mut n: u32 = 0;
    loop {
        // A different time of day each day, microseconds included.
        let time = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
            n.wrapping_mul(7919) % 86_400,
            n.wrapping_mul(104_729) % 1_000_000 * 1000,
        )
        .unwrap();
        let instant = day.and_time(time);
        let micros = (instant - epoch).num_microseconds().unwrap();
        let date_days = i32::try_from((day - epoch.date()).num_days()).unwrap();
        assert_eq!(
            write(Value::Date(Date::Days(date_days))),
            format!("\"{}\"", day.format("%Y-%m-%d"))
        );
        assert_eq!(
            write(Value::Timestamp(Timestamp::Micros(micros))),
            format!("\"{}\"", instant.format("%Y-%m-%d %H:%M:%S%.6f"))
        );
        assert_eq!(
            write(Value::TimestampTz(TimestampTz::Micros(micros))),
            format!("\"{}\"", instant.format("%Y-%m-%dT%H:%M:%S%.6fZ"))
        );
        if day == last {
            break;
        }
        day = day.succ_opt().unwrap();
        n += 1;
    }
    assert_eq!(n, 3_652_058);
}

#[test]
fn golden_uuid_json_arrays_and_other_types() {
    golden(
        Value::Uuid("67E55044-10B1-426F-9247-BB680E5FE0C8".parse().unwrap()),
        "\"67e55044-10b1-426f-9247-bb680e5fe0c8\"",
    );
    golden(
        Value::Json(Text::from(
            "{\"b\": [1, 2],\n  \"a\": \"x y\", \"b\": null}",
        )),
        r#"{"b":[1,2],"a":"x y","b":null}"#,
    );
    golden(
        Value::Jsonb(Text::from("{\"a\": 1.50, \"n\": {\"x\": true}}")),
        r#"{"a":1.50,"n":{"x":true}}"#,
    );
    golden(
        array(&[(3, 1)], vec![Value::Int4(1), Value::Null, Value::Int4(3)]),
        "[1,null,3]",
    );
    golden(
        array(
            &[(2, 1), (2, 1)],
            vec![
                Value::Int4(1),
                Value::Int4(2),
                Value::Int4(3),
                Value::Int4(4),
            ],
        ),
        "[[1,2],[3,4]]",
    );
    golden(array(&[], vec![]), "[]");
    golden(array(&[(1, 1)], vec![text("a,b")]), r#"["a,b"]"#);
    golden(
        other_text("pg_catalog.inet", "192.168.0.1/24"),
        "\"192.168.0.1/24\"",
    );
    golden(other_text("public.mood", "happy"), "\"happy\"");
}

fn rejected(policies: Policies, value: Value) -> String {
    let err = line_with(policies, value).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("public.t") && message.contains("\"v\"") && message.contains("0/10#1"),
        "{message}"
    );
    message
}

#[test]
fn values_without_json_form_are_rejected_with_table_column_and_position() {
    rejected(Policies::default(), Value::Unchanged);
    let binary = Value::Other(Box::new(OtherValue {
        type_oid: 600,
        type_name: Some(Text::from("pg_catalog.point")),
        repr: OtherRepr::Binary(bytes::Bytes::from_static(b"\x01")),
    }));
    assert!(rejected(Policies::default(), binary).contains("pg_catalog.point"));
    rejected(Policies::default(), array(&[(3, 1)], vec![Value::Int4(1)]));
    rejected(
        Policies::default(),
        array(&[(1, 1)], vec![Value::Unchanged]),
    );
    rejected(Policies::default(), Value::Json(Text::from("{\"a\": ")));
    let deep = Value::Array(Box::new(Array {
        element_type: 23,
        dims: vec![
            ArrayDim {
                len: 1,
                lower_bound: 1
            };
            7
        ],
        elements: vec![Value::Int4(1)],
    }));
    assert!(rejected(Policies::default(), deep).contains("7 dimensions"));
}

fn with_non_finite(p: NonFinitePolicy) -> Policies {
    Policies {
        non_finite: p,
        ..Policies::default()
    }
}

fn with_range(p: OutOfRangePolicy) -> Policies {
    Policies {
        out_of_range: p,
        ..Policies::default()
    }
}

fn with_bounds(p: ArrayBoundsPolicy) -> Policies {
    Policies {
        array_bounds: p,
        ..Policies::default()
    }
}

fn policy_line(policies: Policies, value: Value) -> String {
    line_with(policies, value).unwrap()
}

#[test]
fn non_finite_policies() {
    for v in [
        Value::Float8(f64::NAN),
        Value::Float4(f32::INFINITY),
        Value::Numeric(Numeric::NegInfinity),
    ] {
        assert!(rejected(Policies::default(), v.clone()).contains("non-finite policy"));
        assert_eq!(
            policy_line(with_non_finite(NonFinitePolicy::Null), v),
            "{\"insert\":{\"v\":null}}\n"
        );
    }
    let s = |v| policy_line(with_non_finite(NonFinitePolicy::String), v);
    assert_eq!(s(Value::Float8(f64::NAN)), "{\"insert\":{\"v\":\"NaN\"}}\n");
    assert_eq!(
        s(Value::Float4(f32::NEG_INFINITY)),
        "{\"insert\":{\"v\":\"-Infinity\"}}\n"
    );
    assert_eq!(
        s(Value::Numeric(Numeric::PosInfinity)),
        "{\"insert\":{\"v\":\"Infinity\"}}\n"
    );
    assert_eq!(
        s(Value::Numeric(Numeric::NaN)),
        "{\"insert\":{\"v\":\"NaN\"}}\n"
    );
    // Policies apply inside arrays too.
    assert_eq!(
        s(array(
            &[(2, 1)],
            vec![Value::Float8(1.5), Value::Float8(f64::NAN)]
        )),
        "{\"insert\":{\"v\":[1.5,\"NaN\"]}}\n"
    );
}

#[test]
fn out_of_range_policies() {
    let bc = Value::Date(Date::Days(days(-43, 3, 15)));
    let far = Value::Date(Date::Days(days(12345, 6, 7)));
    let cases = [
        (Value::Date(Date::Infinity), "infinity"),
        (Value::Date(Date::NegInfinity), "-infinity"),
        (bc, "0044-03-15 BC"),
        (far, "12345-06-07"),
        (Value::Time(Time(USECS_PER_DAY)), "24:00:00"),
        (Value::Timestamp(Timestamp::Infinity), "infinity"),
        (
            Value::Timestamp(Timestamp::Micros(micros(0, 1, 1, 0, 0, 0, 0))),
            "0001-01-01 00:00:00 BC",
        ),
        (Value::TimestampTz(TimestampTz::NegInfinity), "-infinity"),
        (
            Value::TimestampTz(TimestampTz::Micros(micros(10000, 1, 1, 12, 0, 0, 500_000))),
            "10000-01-01 12:00:00.5+00",
        ),
    ];
    for (value, pg_text) in cases {
        assert!(rejected(Policies::default(), value.clone()).contains("out-of-range policy"));
        assert_eq!(
            policy_line(with_range(OutOfRangePolicy::Null), value.clone()),
            "{\"insert\":{\"v\":null}}\n"
        );
        assert_eq!(
            policy_line(with_range(OutOfRangePolicy::String), value),
            format!("{{\"insert\":{{\"v\":\"{pg_text}\"}}}}\n")
        );
    }
}

#[test]
fn array_bounds_policies() {
    let v = array(&[(2, 0)], vec![Value::Int4(1), Value::Int4(2)]);
    assert!(rejected(Policies::default(), v.clone()).contains("array-bounds policy"));
    assert_eq!(
        policy_line(with_bounds(ArrayBoundsPolicy::DropBounds), v.clone()),
        "{\"insert\":{\"v\":[1,2]}}\n"
    );
    assert_eq!(
        policy_line(with_bounds(ArrayBoundsPolicy::String), v),
        "{\"insert\":{\"v\":\"[0:1]={1,2}\"}}\n"
    );
}

#[test]
fn policy_applications_are_counted_per_column() {
    let schema = testing::table(
        "t",
        &[("a", 701), ("b", 701)],
        &[],
        ReplicaIdentity::Default,
    );
    let mut enc = encoder(with_non_finite(NonFinitePolicy::Null));
    let mut frame = Frame::new(Framing::Lines);
    for i in 0..3 {
        let row = vec![
            Value::Float8(f64::NAN),
            Value::Float8(if i == 0 { f64::INFINITY } else { 1.0 }),
        ];
        enc.encode_event(&insert(pos(16, i), &schema, row), &mut frame)
            .unwrap();
    }
    let counts = enc.policy_log().counts();
    assert_eq!(counts.len(), 2);
    assert_eq!(
        (counts[0].column.as_str(), counts[0].count, counts[0].action),
        ("a", 3, "null")
    );
    assert_eq!((counts[1].column.as_str(), counts[1].count), ("b", 1));
    assert_eq!(enc.policy_log().total(), 4);
}

fn keyed() -> SchemaRef {
    testing::table(
        "k",
        &[("id", 23), ("body", 25), ("n", 23)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

fn keyless_full() -> SchemaRef {
    testing::table("f", &[("a", 23), ("body", 25)], &[], ReplicaIdentity::Full)
}

fn encode_all(options: EncoderOptions, events: &[ChangeEvent]) -> Result<String, cdc_core::Error> {
    let mut enc = FelderaEncoder::new(options);
    let mut frame = Frame::new(Framing::Lines);
    for e in events {
        enc.encode_event(e, &mut frame)?;
    }
    Ok(String::from_utf8(frame.bytes().to_vec()).unwrap())
}

fn encode(events: &[ChangeEvent]) -> Result<String, cdc_core::Error> {
    encode_all(EncoderOptions::default(), events)
}

#[test]
fn update_with_same_key_is_a_partial_update_without_unchanged_columns() {
    let k = keyed();
    let out = encode(&[update(
        pos(16, 1),
        &k,
        None,
        vec![Value::Int4(1), Value::Unchanged, Value::Int4(5)],
    )])
    .unwrap();
    assert_eq!(out, "{\"update\":{\"id\":1,\"n\":5}}\n");
    // REPLICA IDENTITY FULL on a keyed table, key unchanged: still a partial update.
    let out = encode(&[update(
        pos(16, 2),
        &k,
        old_full(vec![Value::Int4(1), text("old"), Value::Int4(4)]),
        vec![Value::Int4(1), text("new"), Value::Int4(4)],
    )])
    .unwrap();
    assert_eq!(out, "{\"update\":{\"id\":1,\"body\":\"new\",\"n\":4}}\n");
}

#[test]
fn update_that_changes_the_key_is_delete_then_insert() {
    let k = keyed();
    let out = encode(&[update(
        pos(16, 1),
        &k,
        old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
        vec![Value::Int4(2), text("b"), Value::Null],
    )])
    .unwrap();
    assert_eq!(
        out,
        "{\"delete\":{\"id\":1}}\n{\"insert\":{\"id\":2,\"body\":\"b\",\"n\":null}}\n"
    );
    // With a full old row, unchanged TOAST values of the new row come from it.
    let out = encode(&[update(
        pos(16, 2),
        &k,
        old_full(vec![Value::Int4(1), text("big"), Value::Int4(7)]),
        vec![Value::Int4(2), Value::Unchanged, Value::Int4(8)],
    )])
    .unwrap();
    assert_eq!(
        out,
        "{\"delete\":{\"id\":1}}\n{\"insert\":{\"id\":2,\"body\":\"big\",\"n\":8}}\n"
    );
}

#[test]
fn key_change_with_unchanged_toast_and_only_old_key_is_rejected_whole() {
    let k = keyed();
    let err = encode(&[update(
        pos(16, 3),
        &k,
        old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
        vec![Value::Int4(2), Value::Unchanged, Value::Int4(1)],
    )])
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected);
    let m = err.to_string();
    assert!(
        m.contains("public.k")
            && m.contains("\"body\"")
            && m.contains("0/10#3")
            && m.contains("REPLICA IDENTITY FULL"),
        "{m}"
    );
}

#[test]
fn keyless_table_update_is_delete_of_full_old_row_then_insert() {
    let f = keyless_full();
    let out = encode(&[update(
        pos(16, 1),
        &f,
        old_full(vec![Value::Int4(1), text("x")]),
        vec![Value::Int4(2), Value::Unchanged],
    )])
    .unwrap();
    assert_eq!(
        out,
        "{\"delete\":{\"a\":1,\"body\":\"x\"}}\n{\"insert\":{\"a\":2,\"body\":\"x\"}}\n"
    );
}

#[test]
fn keyless_updates_and_deletes_that_cannot_be_expressed_are_rejected() {
    let f = keyless_full();
    let unchanged_old = encode(&[update(
        pos(16, 1),
        &f,
        old_full(vec![Value::Int4(1), Value::Unchanged]),
        vec![Value::Int4(2), Value::Unchanged],
    )])
    .unwrap_err();
    assert!(
        unchanged_old.to_string().contains("\"body\""),
        "{unchanged_old}"
    );
    let nothing = testing::table("n", &[("a", 23)], &[], ReplicaIdentity::Nothing);
    for event in [
        update(pos(16, 2), &nothing, None, vec![Value::Int4(1)]),
        delete(pos(16, 3), &nothing, None),
    ] {
        let err = encode(&[event]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Rejected);
        assert!(
            err.to_string().contains("REPLICA IDENTITY NOTHING"),
            "{err}"
        );
    }
    let err = encode(&[delete(pos(16, 4), &keyed(), None)]).unwrap_err();
    assert!(err.to_string().contains("public.k"), "{err}");
}

#[test]
fn deletes_carry_the_key_or_the_full_row() {
    let out = encode(&[
        delete(
            pos(16, 1),
            &keyed(),
            old_key(vec![Value::Int4(9), Value::Null, Value::Null]),
        ),
        delete(
            pos(16, 2),
            &keyless_full(),
            old_full(vec![Value::Int4(3), text("y")]),
        ),
    ])
    .unwrap();
    assert_eq!(
        out,
        "{\"delete\":{\"id\":9}}\n{\"delete\":{\"a\":3,\"body\":\"y\"}}\n"
    );
}

/// Issue 44, case 3: with a replica identity index that lacks the primary key, old rows
/// hold NULL where the key is. No envelope names a row by a NULL key.
#[test]
fn an_old_row_without_its_key_value_is_rejected_not_deleted_by_null() {
    let k = keyed();
    for event in [
        delete(
            pos(16, 1),
            &k,
            old_key(vec![Value::Null, Value::Null, Value::Int4(5)]),
        ),
        update(
            pos(16, 1),
            &k,
            old_key(vec![Value::Null, Value::Null, Value::Int4(5)]),
            vec![Value::Int4(1), text("b"), Value::Int4(6)],
        ),
    ] {
        let err = encode(std::slice::from_ref(&event)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Rejected);
        let m = err.to_string();
        assert!(
            m.contains("public.k")
                && m.contains("\"id\"")
                && m.contains("REPLICA IDENTITY DEFAULT"),
            "{m}"
        );
    }
}

#[test]
fn truncate_policies() {
    let k = keyed();
    let t = ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(16, 1),
        kind: EventKind::Truncate {
            tables: vec![k.clone(), keyless_full()],
            cascade: true,
            restart_identity: false,
        },
    };
    let err = encode(std::slice::from_ref(&t)).unwrap_err();
    assert!(err.to_string().contains("public.k, public.f"), "{err}");
    let options = |truncate| EncoderOptions {
        policies: Policies {
            truncate,
            ..Policies::default()
        },
        table_key: true,
    };
    let mut enc = FelderaEncoder::new(options(TruncatePolicy::Skip));
    let mut frame = Frame::new(Framing::Lines);
    enc.encode_event(&t, &mut frame).unwrap();
    assert!(frame.is_empty());
    assert_eq!(enc.stats().truncates_skipped, 1);
    assert_eq!(enc.policy_log().counts().len(), 2);
    assert_eq!(
        encode_all(options(TruncatePolicy::Marker), &[t]).unwrap(),
        "{\"table\":\"public.k\",\"truncate\":{\"cascade\":true,\"restart_identity\":false}}\n\
         {\"table\":\"public.f\",\"truncate\":{\"cascade\":true,\"restart_identity\":false}}\n"
    );
}

#[test]
fn table_key_and_array_framing() {
    let k = keyed();
    let mut enc = FelderaEncoder::new(EncoderOptions {
        policies: Policies::default(),
        table_key: true,
    });
    let mut frame = Frame::new(Framing::ArrayPerTransaction);
    enc.encode_event(&testing::begin(16), &mut frame).unwrap();
    enc.encode_event(
        &insert(pos(16, 1), &k, vec![Value::Int4(1), text("a"), Value::Null]),
        &mut frame,
    )
    .unwrap();
    enc.encode_event(
        &delete(
            pos(16, 2),
            &k,
            old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
        ),
        &mut frame,
    )
    .unwrap();
    enc.encode_event(&testing::commit(16, 3), &mut frame)
        .unwrap();
    frame.end_batch();
    assert_eq!(
        String::from_utf8(frame.bytes().to_vec()).unwrap(),
        "[{\"table\":\"public.k\",\"insert\":{\"id\":1,\"body\":\"a\",\"n\":null}},{\"table\":\"public.k\",\"delete\":{\"id\":1}}]\n"
    );
}

#[test]
fn a_failing_event_leaves_the_frame_as_before() {
    let k = keyed();
    let mut enc = encoder(Policies::default());
    let mut frame = Frame::new(Framing::ArrayPerBatch);
    enc.encode_event(
        &insert(pos(16, 1), &k, vec![Value::Int4(1), text("a"), Value::Null]),
        &mut frame,
    )
    .unwrap();
    let before = frame.bytes().to_vec();
    let bad = update(
        pos(16, 2),
        &k,
        old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
        vec![Value::Int4(2), text("b"), Value::Float8(f64::NAN)],
    );
    assert!(enc.encode_event(&bad, &mut frame).is_err());
    assert_eq!(frame.bytes(), &before[..]);
    assert_eq!(enc.stats().envelopes, 1);
    frame.end_batch();
    assert_eq!(
        frame.bytes(),
        b"[{\"insert\":{\"id\":1,\"body\":\"a\",\"n\":null}}]\n"
    );
}

#[test]
fn schema_change_switches_column_names() {
    let v1 = testing::table("s", &[("a", 23)], &[], ReplicaIdentity::Default);
    let v2 = testing::table("s", &[("a", 23), ("b", 25)], &[], ReplicaIdentity::Default);
    let change = ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(16, 2),
        kind: EventKind::SchemaChange {
            old: Some(v1.clone()),
            new: v2.clone(),
        },
    };
    let out = encode(&[
        insert(pos(16, 1), &v1, vec![Value::Int4(1)]),
        change,
        insert(pos(16, 3), &v2, vec![Value::Int4(2), text("x")]),
    ])
    .unwrap();
    assert_eq!(
        out,
        "{\"insert\":{\"a\":1}}\n{\"insert\":{\"a\":2,\"b\":\"x\"}}\n"
    );
}
