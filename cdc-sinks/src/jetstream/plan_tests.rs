//! The planner: messages, headers, replay skipping, chunks as one message, transaction
//! ends marked across batches.

use cdc_core::{ChangeEvent, EventKind, ReplicaIdentity, SnapshotMarker, TableName, Value};

use super::headers as h;
use super::plan::{Grouping, OutMessage, Planner};
use super::subject::{DEFAULT_SUBJECT_TEMPLATE, SubjectTemplate};
use crate::feldera::{EncoderOptions, PolicyLog};
use crate::testing::{begin, commit, insert, pos, table, text, token};

fn planner(grouping: Grouping, max: usize) -> Planner {
    Planner::new(
        SubjectTemplate::parse(DEFAULT_SUBJECT_TEMPLATE).unwrap(),
        grouping,
        EncoderOptions::default(),
        PolicyLog::default(),
        max,
        None,
    )
}

fn header<'m>(m: &'m OutMessage, name: &str) -> Option<&'m str> {
    m.headers
        .iter()
        .rev()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

fn orders() -> cdc_core::SchemaRef {
    table(
        "orders",
        &[("id", 20), ("note", 25)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

fn row(id: i64) -> Vec<Value> {
    vec![Value::Int8(id), text("x")]
}

fn marker(lsn: u64, ordinal: u64, m: SnapshotMarker) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(lsn, ordinal),
        kind: EventKind::Snapshot(m),
    }
}

#[test]
fn one_message_per_change_with_headers_and_the_token_on_the_last() {
    let t = orders();
    let mut p = planner(Grouping::Event, 1 << 20);
    let events = vec![
        begin(100),
        insert(pos(100, 1), &t, row(1)),
        insert(pos(100, 2), &t, row(2)),
        commit(100, 3),
    ];
    let tok = token(Some(pos(100, 3)));
    let out = p.plan(&events, &tok).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].subject, "pgcdc.test.public.orders");
    assert_eq!(out[0].payload, b"{\"insert\":{\"id\":1,\"note\":\"x\"}}\n");
    assert_eq!(header(&out[0], h::ORIGIN), Some("stream"));
    assert_eq!(header(&out[0], h::POSITION), Some("0/64#1"));
    assert_eq!(
        header(&out[0], h::NATS_MSG_ID),
        Some("7000000000000000001/test/pgcdc_test/0/64#1/0")
    );
    assert_eq!(header(&out[0], h::TX_LAST), None);
    assert_eq!(header(&out[0], h::TOKEN), None);
    assert_eq!(header(&out[1], h::TX_LAST), Some("true"));
    assert_eq!(header(&out[1], h::XID), Some("1"));
    assert_eq!(header(&out[1], h::TOKEN), Some(tok.to_json().as_str()));
    // The Feldera JSON parser reads a message's lines as records.
    for m in &out {
        let records: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&m.payload)
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records.len(), 1);
    }
}

#[test]
fn replayed_events_are_skipped() {
    let t = orders();
    let mut p = planner(Grouping::Event, 1 << 20);
    p.applied_through = Some(pos(100, 1));
    let events = vec![
        begin(100),
        insert(pos(100, 1), &t, row(1)),
        insert(pos(100, 2), &t, row(2)),
        commit(100, 3),
    ];
    let out = p.plan(&events, &token(Some(pos(100, 3)))).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(header(&out[0], h::POSITION), Some("0/64#2"));
    assert_eq!(p.skipped, 2);
}

#[test]
fn a_transaction_ended_in_a_later_batch_gets_an_empty_end_marker() {
    let t = orders();
    let mut p = planner(Grouping::Event, 1 << 20);
    let first = vec![begin(100), insert(pos(100, 1), &t, row(1))];
    let out = p.plan(&first, &token(Some(pos(100, 1)))).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(header(&out[0], h::TX_LAST), None);
    let out = p
        .plan(&[commit(100, 2)], &token(Some(pos(100, 2))))
        .unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].payload.is_empty());
    assert_eq!(out[0].subject, "pgcdc.test.public.orders");
    assert_eq!(header(&out[0], h::TX_LAST), Some("true"));
    assert!(header(&out[0], h::TOKEN).is_some());
}

#[test]
fn an_online_chunk_is_one_message_even_when_grouping_by_event() {
    let t = orders();
    let name = TableName::new("public", "orders");
    let mut p = planner(Grouping::Event, 1 << 20);
    let events = vec![
        marker(
            50,
            0,
            SnapshotMarker::ChunkStarted {
                table: name.clone(),
                chunk: 3,
            },
        ),
        insert(pos(50, 1), &t, row(1)),
        insert(pos(50, 2), &t, row(2)),
        insert(pos(50, 3), &t, row(3)),
        marker(
            50,
            4,
            SnapshotMarker::ChunkCompleted {
                table: name,
                chunk: 3,
                rows: 3,
            },
        ),
    ];
    let out = p.plan(&events, &token(Some(pos(50, 4)))).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(header(&out[0], h::ORIGIN), Some("backfill"));
    assert_eq!(header(&out[0], h::CHUNK), Some("3"));
    assert_eq!(header(&out[0], h::LAST_POSITION), Some("0/32#3"));
    assert!(header(&out[0], h::TOKEN).is_some());
    assert_eq!(out[0].payload.iter().filter(|&&b| b == b'\n').count(), 3);
}

#[test]
fn a_chunk_over_the_size_limit_is_an_error_naming_the_fix() {
    let t = orders();
    let name = TableName::new("public", "orders");
    let mut p = planner(Grouping::Event, 200);
    let mut events = vec![marker(
        50,
        0,
        SnapshotMarker::ChunkStarted {
            table: name.clone(),
            chunk: 0,
        },
    )];
    for i in 1..20 {
        events.push(insert(pos(50, i), &t, row(i as i64)));
    }
    events.push(marker(
        50,
        20,
        SnapshotMarker::ChunkCompleted {
            table: name,
            chunk: 0,
            rows: 19,
        },
    ));
    let err = p.plan(&events, &token(Some(pos(50, 20)))).unwrap_err();
    assert!(err.to_string().contains("--chunk-rows"), "{err}");
}

#[test]
fn transaction_grouping_joins_a_tables_run_up_to_the_limit() {
    let t = orders();
    let other = table("items", &[("id", 20)], &["id"], ReplicaIdentity::Default);
    let mut p = planner(Grouping::Transaction, 1 << 20);
    let events = vec![
        begin(100),
        insert(pos(100, 1), &t, row(1)),
        insert(pos(100, 2), &t, row(2)),
        insert(pos(100, 3), &other, vec![Value::Int8(9)]),
        insert(pos(100, 4), &t, row(3)),
        commit(100, 5),
    ];
    let out = p.plan(&events, &token(Some(pos(100, 5)))).unwrap();
    let subjects: Vec<&str> = out.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "pgcdc.test.public.orders",
            "pgcdc.test.public.items",
            "pgcdc.test.public.orders"
        ]
    );
    assert_eq!(header(&out[0], h::LAST_POSITION), Some("0/64#2"));
    assert_eq!(header(&out[2], h::TX_LAST), Some("true"));
}

#[test]
fn a_restarted_consistent_snapshot_is_an_error() {
    let mut p = planner(Grouping::Event, 1 << 20);
    let err = p
        .plan(
            &[marker(1, 0, SnapshotMarker::Restarted)],
            &token(Some(pos(1, 0))),
        )
        .unwrap_err();
    assert!(err.to_string().contains("cannot be withdrawn"), "{err}");
}
