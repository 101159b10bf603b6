//! Assembler tests over messages built with the pgoutput encoder.

use bytes::{Bytes, BytesMut};
use cdc_core::{ChangeEvent, EventKind, Lsn, OldRowKind, Position, TableName, Text, Value};

use super::*;
use crate::protocol::pgoutput::{
    Begin, ColumnValue, Commit, Delete, Insert, LogicalMessage, OldTuple, ProtocolVersion,
    Relation, RelationColumn, ReplicaIdentity, StreamAbort, StreamCommit, Truncate, TupleData,
    Update,
};

fn encode(message: PgOutputMessage) -> Bytes {
    let mut buf = BytesMut::new();
    pgoutput::encode(&message, &mut buf).unwrap();
    buf.freeze()
}

fn relation(id: u32, name: &str, columns: &[(&str, u32)], xid: Option<u32>) -> PgOutputMessage {
    PgOutputMessage::Relation(Relation {
        xid,
        relation_id: id,
        namespace: "public".into(),
        name: name.into(),
        replica_identity: ReplicaIdentity::Default,
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, (n, oid))| RelationColumn {
                flags: u8::from(i == 0),
                name: (*n).into(),
                type_oid: *oid,
                type_modifier: -1,
            })
            .collect(),
    })
}

fn text(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn tuple(values: Vec<ColumnValue>) -> TupleData {
    TupleData::new(values)
}

fn begin(lsn: u64) -> PgOutputMessage {
    PgOutputMessage::Begin(Begin {
        final_lsn: Lsn(lsn),
        commit_timestamp: 42,
        xid: 7,
    })
}

fn commit(lsn: u64) -> PgOutputMessage {
    PgOutputMessage::Commit(Commit {
        flags: 0,
        commit_lsn: Lsn(lsn),
        end_lsn: Lsn(lsn + 8),
        commit_timestamp: 42,
    })
}

fn insert(rel: u32, values: Vec<ColumnValue>, xid: Option<u32>) -> PgOutputMessage {
    PgOutputMessage::Insert(Insert {
        xid,
        relation_id: rel,
        new: tuple(values),
    })
}

fn assembler(version: ProtocolVersion, policy: SchemaChangePolicy) -> ChangeAssembler {
    ChangeAssembler::new(AssemblerConfig {
        decoder: DecoderOptions::new(version),
        routing: TableRouting::tables([TableName::new("public", "t")]),
        schema_policy: policy,
        messages: MessageFilter::All,
        stream_memory_limit: 256,
        spill: MemorySpill::shared(),
    })
}

fn feed(a: &mut ChangeAssembler, messages: Vec<PgOutputMessage>) -> (Vec<ChangeEvent>, Vec<Lsn>) {
    let mut out = Vec::new();
    let mut ends = Vec::new();
    for m in messages {
        if let Some(end) = a.process(encode(m), &mut out).unwrap() {
            ends.push(end);
        }
        while a.replaying() {
            if let Some(end) = a.continue_replay(&mut out, 3).unwrap() {
                ends.push(end);
            }
        }
    }
    (out, ends)
}

fn positions(events: &[ChangeEvent]) -> Vec<(u64, u64)> {
    events
        .iter()
        .map(|e| (e.position.commit_lsn.0, e.position.ordinal))
        .collect()
}

#[test]
fn insert_update_delete_with_positions_and_toast_fill() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let (events, ends) = feed(
        &mut a,
        vec![
            begin(100),
            relation(1, "t", &[("id", 23), ("body", 25)], None),
            insert(1, vec![text("1"), text("hello")], None),
            PgOutputMessage::Update(Update {
                xid: None,
                relation_id: 1,
                old: Some(OldTuple::Full(tuple(vec![text("1"), text("hello")]))),
                new: tuple(vec![text("2"), ColumnValue::UnchangedToast]),
            }),
            PgOutputMessage::Delete(Delete {
                xid: None,
                relation_id: 1,
                old: OldTuple::Key(tuple(vec![text("2"), ColumnValue::Null])),
            }),
            commit(100),
        ],
    );
    assert_eq!(ends, vec![Lsn(108)]);
    assert_eq!(
        positions(&events),
        vec![(100, 0), (100, 2), (100, 4), (100, 6), (100, 8)]
    );
    match &events[2].kind {
        EventKind::Update { new, old, .. } => {
            assert_eq!(
                new[1],
                Value::Text(Text::from("hello")),
                "filled from the full old row"
            );
            assert_eq!(old.as_ref().unwrap().kind, OldRowKind::Full);
        }
        other => panic!("{other:?}"),
    }
    match &events[3].kind {
        EventKind::Delete { old, .. } => {
            let old = old.as_ref().unwrap();
            assert_eq!(old.kind, OldRowKind::Key);
            assert_eq!(old.values[0], Value::Int4(2));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unchanged_toast_without_full_old_row_stays_unchanged() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let (events, _) = feed(
        &mut a,
        vec![
            begin(100),
            relation(1, "t", &[("id", 23), ("body", 25)], None),
            PgOutputMessage::Update(Update {
                xid: None,
                relation_id: 1,
                old: None,
                new: tuple(vec![text("2"), ColumnValue::UnchangedToast]),
            }),
            commit(100),
        ],
    );
    match &events[1].kind {
        EventKind::Update { new, old, .. } => {
            assert!(old.is_none());
            assert_eq!(new[1], Value::Unchanged);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unconfigured_tables_count_in_ordinals_but_are_not_delivered() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let (events, ends) = feed(
        &mut a,
        vec![
            begin(100),
            relation(1, "t", &[("id", 23)], None),
            relation(2, "other", &[("id", 23)], None),
            insert(2, vec![text("1")], None),
            insert(1, vec![text("1")], None),
            commit(100),
            begin(200),
            insert(2, vec![text("2")], None),
            commit(200),
        ],
    );
    assert_eq!(positions(&events), vec![(100, 0), (100, 4), (100, 6)]);
    assert_eq!(
        ends,
        vec![Lsn(108), Lsn(208)],
        "the empty transaction still reports its end"
    );
}

#[test]
fn change_for_unknown_relation_is_an_error() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let mut out = Vec::new();
    a.process(encode(begin(1)), &mut out).unwrap();
    let err = a
        .process(encode(insert(9, vec![text("1")], None)), &mut out)
        .unwrap_err();
    assert!(err.to_string().contains("no Relation message"), "{err}");
}

#[test]
fn column_count_mismatch_is_an_error() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let mut out = Vec::new();
    a.process(encode(begin(1)), &mut out).unwrap();
    a.process(encode(relation(1, "t", &[("id", 23)], None)), &mut out)
        .unwrap();
    let err = a
        .process(
            encode(insert(1, vec![text("1"), text("2")], None)),
            &mut out,
        )
        .unwrap_err();
    assert!(err.to_string().contains("has 2 columns"), "{err}");
}

#[test]
fn bad_value_names_table_column_and_position() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let mut out = Vec::new();
    a.process(encode(begin(1)), &mut out).unwrap();
    a.process(encode(relation(1, "t", &[("id", 23)], None)), &mut out)
        .unwrap();
    let err = a
        .process(encode(insert(1, vec![text("x")], None)), &mut out)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("\"id\"") && msg.contains("public.t") && msg.contains("0/1#2"),
        "{msg}"
    );
    // The typed decode error is the source, for an engine that matches on it.
    let source = std::error::Error::source(&err).expect("a source");
    let typed = source
        .downcast_ref::<crate::types::TypeDecodeError>()
        .expect("a TypeDecodeError");
    assert!(
        matches!(typed.reason, crate::types::DecodeErrorKind::Syntax(_)),
        "{typed:?}"
    );
}

#[test]
fn schema_change_fails_before_any_row_under_the_new_schema() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let mut out = Vec::new();
    for m in [
        begin(1),
        relation(1, "t", &[("id", 23)], None),
        insert(1, vec![text("1")], None),
    ] {
        a.process(encode(m), &mut out).unwrap();
    }
    let before = out.len();
    let err = a
        .process(
            encode(relation(1, "t", &[("id", 23), ("x", 25)], None)),
            &mut out,
        )
        .unwrap_err();
    assert!(err.to_string().contains("column \"x\" added"), "{err}");
    assert_eq!(out.len(), before);
}

#[test]
fn schema_change_evolves_with_an_event_before_the_row() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Evolve);
    let (events, _) = feed(
        &mut a,
        vec![
            begin(1),
            relation(1, "t", &[("id", 23)], None),
            insert(1, vec![text("1")], None),
            relation(1, "t", &[("id", 23), ("x", 25)], None),
            insert(1, vec![text("2"), text("new")], None),
            commit(1),
        ],
    );
    assert_eq!(
        positions(&events),
        vec![(1, 0), (1, 2), (1, 3), (1, 4), (1, 6)]
    );
    assert!(matches!(events[2].kind, EventKind::SchemaChange { .. }));
}

#[test]
fn truncate_of_two_tables_is_one_event() {
    let mut a = ChangeAssembler::new(AssemblerConfig {
        decoder: DecoderOptions::new(ProtocolVersion::V1),
        routing: TableRouting::all(),
        schema_policy: SchemaChangePolicy::Fail,
        messages: MessageFilter::Off,
        stream_memory_limit: 1 << 20,
        spill: MemorySpill::shared(),
    });
    let (events, _) = feed(
        &mut a,
        vec![
            begin(5),
            relation(1, "a", &[("id", 23)], None),
            relation(2, "b", &[("id", 23)], None),
            PgOutputMessage::Truncate(Truncate {
                xid: None,
                options: Truncate::CASCADE,
                relation_ids: vec![1, 2],
            }),
            commit(5),
        ],
    );
    match &events[1].kind {
        EventKind::Truncate {
            tables,
            cascade,
            restart_identity,
        } => {
            assert_eq!(tables.len(), 2);
            assert!(*cascade && !*restart_identity);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn logical_messages_transactional_and_not() {
    let mut a = assembler(ProtocolVersion::V1, SchemaChangePolicy::Fail);
    let (events, _) = feed(
        &mut a,
        vec![
            PgOutputMessage::Message(LogicalMessage {
                xid: None,
                flags: 0,
                lsn: Lsn(50),
                prefix: "hb".into(),
                content: Bytes::from_static(b"x"),
            }),
            begin(60),
            PgOutputMessage::Message(LogicalMessage {
                xid: None,
                flags: LogicalMessage::TRANSACTIONAL,
                lsn: Lsn(55),
                prefix: "audit".into(),
                content: Bytes::from_static(b"y"),
            }),
            commit(60),
        ],
    );
    assert_eq!(positions(&events), vec![(50, 0), (60, 0), (60, 2), (60, 4)]);
}

fn stream_start(xid: u32, first: bool) -> PgOutputMessage {
    PgOutputMessage::StreamStart(crate::protocol::pgoutput::StreamStart {
        xid,
        first_segment: first,
    })
}

#[test]
fn streamed_transaction_with_aborted_subtransaction_spills_and_releases_in_order() {
    let mut a = assembler(ProtocolVersion::V2, SchemaChangePolicy::Fail);
    let mut messages = vec![
        stream_start(900, true),
        relation(1, "t", &[("id", 23)], Some(900)),
    ];
    for i in 0..40 {
        messages.push(insert(1, vec![text(&i.to_string())], Some(900)));
    }
    messages.push(PgOutputMessage::StreamStop);
    messages.push(stream_start(900, false));
    for i in 40..50 {
        messages.push(insert(1, vec![text(&i.to_string())], Some(901)));
    }
    messages.push(PgOutputMessage::StreamStop);
    messages.push(PgOutputMessage::StreamAbort(StreamAbort {
        xid: 900,
        subxid: 901,
        abort: None,
    }));
    // Another streamed transaction that aborts entirely.
    messages.push(stream_start(950, true));
    messages.push(relation(1, "t", &[("id", 23)], Some(950)));
    messages.push(insert(1, vec![text("999")], Some(950)));
    messages.push(PgOutputMessage::StreamStop);
    messages.push(PgOutputMessage::StreamAbort(StreamAbort {
        xid: 950,
        subxid: 950,
        abort: None,
    }));
    messages.push(PgOutputMessage::StreamCommit(StreamCommit {
        xid: 900,
        flags: 0,
        commit_lsn: Lsn(1000),
        end_lsn: Lsn(1010),
        commit_timestamp: 1,
    }));
    let (events, ends) = feed(&mut a, messages);
    assert_eq!(ends, vec![Lsn(1010)]);
    let ids: Vec<Value> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Insert { new, .. } => Some(new[0].clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, (0..40).map(Value::Int4).collect::<Vec<_>>());
    assert_eq!(
        events.first().unwrap().position,
        Position::new(Lsn(1000), 0)
    );
    assert_eq!(
        events.last().unwrap().position,
        Position::new(Lsn(1000), 82)
    );
    assert_eq!(a.buffered_bytes(), 0);
}

// Two-phase transactions (protocol v3).

fn begin_prepare(xid: u32, prepare_lsn: u64) -> PgOutputMessage {
    PgOutputMessage::BeginPrepare(crate::protocol::pgoutput::BeginPrepare {
        prepare_lsn: Lsn(prepare_lsn),
        end_lsn: Lsn(prepare_lsn + 8),
        prepare_timestamp: 40,
        xid,
        gid: format!("g{xid}"),
    })
}

fn prepare_message(xid: u32, prepare_lsn: u64) -> crate::protocol::pgoutput::Prepare {
    crate::protocol::pgoutput::Prepare {
        flags: 0,
        prepare_lsn: Lsn(prepare_lsn),
        end_lsn: Lsn(prepare_lsn + 8),
        prepare_timestamp: 40,
        xid,
        gid: format!("g{xid}"),
    }
}

fn commit_prepared(xid: u32, commit_lsn: u64) -> PgOutputMessage {
    PgOutputMessage::CommitPrepared(crate::protocol::pgoutput::CommitPrepared {
        flags: 0,
        commit_lsn: Lsn(commit_lsn),
        end_lsn: Lsn(commit_lsn + 8),
        commit_timestamp: 50,
        xid,
        gid: format!("g{xid}"),
    })
}

fn rollback_prepared(xid: u32, prepare_lsn: u64, rollback_lsn: u64) -> PgOutputMessage {
    PgOutputMessage::RollbackPrepared(crate::protocol::pgoutput::RollbackPrepared {
        flags: 0,
        prepare_end_lsn: Lsn(prepare_lsn + 8),
        rollback_end_lsn: Lsn(rollback_lsn + 8),
        prepare_timestamp: 40,
        rollback_timestamp: 60,
        xid,
        gid: format!("g{xid}"),
    })
}

fn inserted_ids(events: &[ChangeEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Insert { new, .. } => Some(format!("{:?}", new[0])),
            _ => None,
        })
        .collect()
}

#[test]
fn a_prepared_transaction_is_delivered_at_commit_prepared_and_holds_the_slot_meanwhile() {
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Fail);
    let (events, ends) = feed(
        &mut a,
        vec![
            begin_prepare(9, 300),
            relation(1, "t", &[("id", 23)], None),
            insert(1, vec![text("1")], None),
            insert(1, vec![text("2")], None),
            PgOutputMessage::Prepare(prepare_message(9, 300)),
        ],
    );
    assert!(events.is_empty() && ends.is_empty());
    assert_eq!(a.confirm_hold(), Some(Lsn(300)));
    assert!(!a.in_transaction());
    assert_eq!(a.prepared_waiting(), 1);
    // A later transaction uses the relation without a Relation message of its own
    // (pgoutput sent it inside the prepared transaction).
    let (events, ends) = feed(
        &mut a,
        vec![begin(400), insert(1, vec![text("3")], None), commit(400)],
    );
    assert_eq!(positions(&events), [(400, 0), (400, 2), (400, 4)]);
    assert_eq!(ends, [Lsn(408)]);
    assert_eq!(a.confirm_hold(), Some(Lsn(300)));
    let (events, ends) = feed(&mut a, vec![commit_prepared(9, 500)]);
    assert_eq!(positions(&events), [(500, 0), (500, 2), (500, 4), (500, 6)]);
    assert_eq!(inserted_ids(&events).len(), 2);
    assert!(matches!(
        &events[3].kind,
        EventKind::Commit(c) if c.end_lsn == Lsn(508) && c.commit_time_micros == 50
    ));
    assert_eq!(ends, [Lsn(508)]);
    assert_eq!((a.confirm_hold(), a.prepared_waiting()), (None, 0));
}

#[test]
fn rollback_prepared_delivers_nothing_and_releases_the_hold() {
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Fail);
    let (events, ends) = feed(
        &mut a,
        vec![
            begin_prepare(9, 300),
            relation(1, "t", &[("id", 23)], None),
            insert(1, vec![text("1")], None),
            PgOutputMessage::Prepare(prepare_message(9, 300)),
            begin_prepare(10, 320),
            insert(1, vec![text("2")], None),
            PgOutputMessage::Prepare(prepare_message(10, 320)),
            rollback_prepared(9, 300, 400),
        ],
    );
    assert!(events.is_empty());
    assert_eq!(ends, [Lsn(408)]);
    assert_eq!(a.confirm_hold(), Some(Lsn(320)));
    // A rollback of a transaction prepared before two-phase decoding was on: nothing to do.
    let (events, _) = feed(&mut a, vec![rollback_prepared(77, 100, 450)]);
    assert!(events.is_empty());
    let (events, _) = feed(&mut a, vec![commit_prepared(10, 500)]);
    assert_eq!(positions(&events), [(500, 0), (500, 2), (500, 4)]);
    assert_eq!(a.confirm_hold(), None);
    // A new session forgets what it held: the server sends it again.
    feed(
        &mut a,
        vec![
            begin_prepare(11, 600),
            insert(1, vec![text("3")], None),
            PgOutputMessage::Prepare(prepare_message(11, 600)),
        ],
    );
    a.reset_session();
    assert_eq!(a.confirm_hold(), None);
}

#[test]
fn commit_prepared_of_an_unseen_prepare_is_a_resync_unless_it_was_delivered() {
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Fail);
    let err = a
        .process(encode(commit_prepared(9, 500)), &mut Vec::new())
        .unwrap_err();
    assert_eq!(err.kind(), cdc_core::ErrorKind::ResyncRequired, "{err}");
    assert!(err.to_string().contains("COMMIT PREPARED"), "{err}");
    // Nor when what was delivered ends before the transaction's commit.
    a.set_delivered(Some(Position::new(Lsn(499), 7)), Some(Lsn(507)));
    let err = a
        .process(encode(commit_prepared(9, 500)), &mut Vec::new())
        .unwrap_err();
    assert_eq!(err.kind(), cdc_core::ErrorKind::ResyncRequired, "{err}");
    // A session that began past its PREPARE, after the transaction was delivered (the
    // slot was confirmed past the PREPARE only then): its COMMIT PREPARED comes alone
    // and ends it, delivering nothing again.
    // (One that carried no events is reached by how far the batches are complete.)
    for (delivered, complete) in [
        (Some(Position::new(Lsn(500), 3)), None),
        (Some(Position::new(Lsn(700), 0)), None),
        (None, Some(Lsn(508))),
    ] {
        a.set_delivered(delivered, complete);
        let mut events = Vec::new();
        let end = a
            .process(encode(commit_prepared(9, 500)), &mut events)
            .unwrap();
        assert_eq!((events.len(), end), (0, Some(Lsn(508))));
    }
    // Malformed sequences are protocol errors.
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Fail);
    assert!(
        a.process(
            encode(PgOutputMessage::Prepare(prepare_message(9, 300))),
            &mut Vec::new()
        )
        .is_err()
    );
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Fail);
    feed(&mut a, vec![begin_prepare(9, 300)]);
    assert!(a.in_transaction());
    assert!(
        a.process(encode(begin(400)), &mut Vec::new()).is_err(),
        "Begin inside a prepare"
    );
}

#[test]
fn a_schema_change_inside_a_prepared_transaction_is_delivered_inside_it() {
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Evolve);
    feed(
        &mut a,
        vec![
            begin(100),
            relation(1, "t", &[("id", 23)], None),
            insert(1, vec![text("1")], None),
            commit(100),
        ],
    );
    let (events, _) = feed(
        &mut a,
        vec![
            begin_prepare(9, 300),
            relation(1, "t", &[("id", 23), ("extra", 25)], None),
            insert(1, vec![text("2"), text("x")], None),
            PgOutputMessage::Prepare(prepare_message(9, 300)),
            commit_prepared(9, 500),
        ],
    );
    assert_eq!(positions(&events), [(500, 0), (500, 1), (500, 2), (500, 4)]);
    assert!(matches!(events[1].kind, EventKind::SchemaChange { .. }));
}

#[test]
fn a_streamed_transaction_that_is_prepared_waits_for_commit_prepared() {
    let mut a = assembler(ProtocolVersion::V3, SchemaChangePolicy::Fail);
    let mut messages = vec![
        stream_start(11, true),
        relation(1, "t", &[("id", 23)], Some(11)),
    ];
    for i in 0..50 {
        messages.push(insert(1, vec![text(&i.to_string())], Some(11)));
    }
    messages.push(PgOutputMessage::StreamStop);
    messages.push(PgOutputMessage::StreamPrepare(prepare_message(11, 600)));
    let (events, ends) = feed(&mut a, messages);
    assert!(events.is_empty() && ends.is_empty());
    assert_eq!(a.confirm_hold(), Some(Lsn(600)));
    let (events, ends) = feed(&mut a, vec![commit_prepared(11, 700)]);
    assert_eq!(inserted_ids(&events).len(), 50);
    assert_eq!(
        events.first().map(|e| e.position),
        Some(Position::new(Lsn(700), 0))
    );
    assert_eq!(ends, [Lsn(708)]);
    assert_eq!(a.confirm_hold(), None);
}
