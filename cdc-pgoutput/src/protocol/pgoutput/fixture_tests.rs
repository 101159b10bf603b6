//! Hand-written byte fixtures laid out field by field from the documented message formats,
//! independent of the encoder, checked in both directions.

use bytes::{Bytes, BytesMut};
use cdc_core::Lsn;

use super::*;
use crate::protocol::error::{DecodeProblem, EncodeError, MessageKind};

fn raw(parts: &[&[u8]]) -> Bytes {
    Bytes::from(parts.concat())
}

fn u32be(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

fn u64be(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

fn i64be(v: i64) -> [u8; 8] {
    v.to_be_bytes()
}

fn decoder(version: ProtocolVersion) -> PgOutputDecoder {
    PgOutputDecoder::new(DecoderOptions::new(version))
}

/// Decoding `bytes` gives `expected`, and encoding `expected` gives `bytes` back.
fn check_fixture(decoder: &mut PgOutputDecoder, bytes: Bytes, expected: PgOutputMessage) {
    assert_eq!(decoder.decode(bytes.clone()).unwrap(), expected);
    let mut out = BytesMut::new();
    encode(&expected, &mut out).unwrap();
    assert_eq!(out.freeze(), bytes);
}

fn text(s: &'static str) -> ColumnValue {
    ColumnValue::Text(Bytes::from_static(s.as_bytes()))
}

const LSN: u64 = 0x16_B374_D848;
const TS: i64 = 774_140_400_123_456;

#[test]
fn begin_fixture() {
    let bytes = raw(&[b"B", &u64be(LSN), &i64be(TS), &u32be(731)]);
    let expected = PgOutputMessage::Begin(Begin {
        final_lsn: Lsn(LSN),
        commit_timestamp: TS,
        xid: 731,
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn commit_fixture() {
    let bytes = raw(&[b"C", &[0], &u64be(LSN), &u64be(LSN + 48), &i64be(TS)]);
    let expected = PgOutputMessage::Commit(Commit {
        flags: 0,
        commit_lsn: Lsn(LSN),
        end_lsn: Lsn(LSN + 48),
        commit_timestamp: TS,
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn origin_fixture() {
    let bytes = raw(&[b"O", &u64be(LSN), b"node_a\0"]);
    let expected = PgOutputMessage::Origin(Origin {
        commit_lsn: Lsn(LSN),
        name: "node_a".into(),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn relation_with_two_columns() {
    let bytes = raw(&[
        b"R",
        &u32be(16_385),
        b"public\0",
        b"users\0",
        b"d",
        &[0, 2],
        &[1],
        b"id\0",
        &u32be(23),
        &(-1i32).to_be_bytes(),
        &[0],
        b"name\0",
        &u32be(1043),
        &68i32.to_be_bytes(),
    ]);
    let expected = PgOutputMessage::Relation(Relation {
        xid: None,
        relation_id: 16_385,
        namespace: "public".into(),
        name: "users".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: vec![
            RelationColumn {
                flags: 1,
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
            },
            RelationColumn {
                flags: 0,
                name: "name".into(),
                type_oid: 1043,
                type_modifier: 68,
            },
        ],
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected.clone());
    let PgOutputMessage::Relation(rel) = expected else {
        unreachable!()
    };
    assert!(rel.columns[0].is_key() && !rel.columns[1].is_key());
    assert_eq!(rel.schema(), "public");
}

#[test]
fn type_in_pg_catalog_has_empty_namespace() {
    let bytes = raw(&[b"Y", &u32be(3802), b"\0", b"jsonb\0"]);
    let expected = PgOutputMessage::Type(Type {
        xid: None,
        type_oid: 3802,
        namespace: String::new(),
        name: "jsonb".into(),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected.clone());
    let PgOutputMessage::Type(t) = expected else {
        unreachable!()
    };
    assert_eq!(t.schema(), "pg_catalog");
}

#[test]
fn insert_with_every_column_kind() {
    let bytes = raw(&[
        b"I",
        &u32be(16_385),
        b"N",
        &[0, 4],
        b"t",
        &u32be(2),
        b"42",
        b"n",
        b"u",
        b"b",
        &u32be(3),
        &[0, 1, 2],
    ]);
    let expected = PgOutputMessage::Insert(Insert {
        xid: None,
        relation_id: 16_385,
        new: TupleData::new(vec![
            text("42"),
            ColumnValue::Null,
            ColumnValue::UnchangedToast,
            ColumnValue::Binary(Bytes::from_static(&[0, 1, 2])),
        ]),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn update_with_old_key() {
    let bytes = raw(&[
        b"U",
        &u32be(7),
        b"K",
        &[0, 2],
        b"t",
        &u32be(1),
        b"1",
        b"n",
        b"N",
        &[0, 2],
        b"t",
        &u32be(1),
        b"2",
        b"u",
    ]);
    let expected = PgOutputMessage::Update(Update {
        xid: None,
        relation_id: 7,
        old: Some(OldTuple::Key(TupleData::new(vec![
            text("1"),
            ColumnValue::Null,
        ]))),
        new: TupleData::new(vec![text("2"), ColumnValue::UnchangedToast]),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn update_with_old_full_row() {
    let bytes = raw(&[
        b"U",
        &u32be(7),
        b"O",
        &[0, 1],
        b"t",
        &u32be(3),
        b"old",
        b"N",
        &[0, 1],
        b"t",
        &u32be(3),
        b"new",
    ]);
    let expected = PgOutputMessage::Update(Update {
        xid: None,
        relation_id: 7,
        old: Some(OldTuple::Full(TupleData::new(vec![text("old")]))),
        new: TupleData::new(vec![text("new")]),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn update_without_old_tuple() {
    let bytes = raw(&[b"U", &u32be(7), b"N", &[0, 1], b"n"]);
    let expected = PgOutputMessage::Update(Update {
        xid: None,
        relation_id: 7,
        old: None,
        new: TupleData::new(vec![ColumnValue::Null]),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn delete_with_old_key() {
    let bytes = raw(&[b"D", &u32be(7), b"K", &[0, 1], b"t", &u32be(1), b"9"]);
    let expected = PgOutputMessage::Delete(Delete {
        xid: None,
        relation_id: 7,
        old: OldTuple::Key(TupleData::new(vec![text("9")])),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected);
}

#[test]
fn truncate_with_cascade_and_restart_identity() {
    let bytes = raw(&[b"T", &u32be(2), &[3], &u32be(16_385), &u32be(16_390)]);
    let expected = PgOutputMessage::Truncate(Truncate {
        xid: None,
        options: Truncate::CASCADE | Truncate::RESTART_IDENTITY,
        relation_ids: vec![16_385, 16_390],
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes, expected.clone());
    let PgOutputMessage::Truncate(t) = expected else {
        unreachable!()
    };
    assert!(t.cascade() && t.restart_identity());
}

#[test]
fn transactional_logical_message_content_is_zero_copy() {
    let bytes = raw(&[b"M", &[1], &u64be(LSN), b"app\0", &u32be(5), b"hello"]);
    let expected = PgOutputMessage::Message(LogicalMessage {
        xid: None,
        flags: LogicalMessage::TRANSACTIONAL,
        lsn: Lsn(LSN),
        prefix: "app".into(),
        content: Bytes::from_static(b"hello"),
    });
    check_fixture(&mut decoder(ProtocolVersion::V1), bytes.clone(), expected);
    let PgOutputMessage::Message(m) = decoder(ProtocolVersion::V1).decode(bytes.clone()).unwrap()
    else {
        unreachable!()
    };
    assert!(m.is_transactional());
    assert_eq!(m.content.as_ptr(), bytes[bytes.len() - 5..].as_ptr());
}

#[test]
fn data_messages_inside_a_stream_carry_an_xid() {
    let mut d = decoder(ProtocolVersion::V2);
    check_fixture(
        &mut d,
        raw(&[b"S", &u32be(900), &[1]]),
        PgOutputMessage::StreamStart(StreamStart {
            xid: 900,
            first_segment: true,
        }),
    );
    assert_eq!(d.open_stream(), Some(900));
    // Origin never carries an xid, even in a stream.
    check_fixture(
        &mut d,
        raw(&[b"O", &u64be(1), b"o\0"]),
        PgOutputMessage::Origin(Origin {
            commit_lsn: Lsn(1),
            name: "o".into(),
        }),
    );
    // A subtransaction's change carries the subtransaction's xid, not the stream's.
    check_fixture(
        &mut d,
        raw(&[b"I", &u32be(901), &u32be(16_385), b"N", &[0, 1], b"n"]),
        PgOutputMessage::Insert(Insert {
            xid: Some(901),
            relation_id: 16_385,
            new: TupleData::new(vec![ColumnValue::Null]),
        }),
    );
    check_fixture(
        &mut d,
        raw(&[b"T", &u32be(900), &u32be(1), &[0], &u32be(16_385)]),
        PgOutputMessage::Truncate(Truncate {
            xid: Some(900),
            options: 0,
            relation_ids: vec![16_385],
        }),
    );
    check_fixture(&mut d, raw(&[b"E"]), PgOutputMessage::StreamStop);
    assert_eq!(d.open_stream(), None);
    check_fixture(
        &mut d,
        raw(&[
            b"c",
            &u32be(900),
            &[0],
            &u64be(LSN),
            &u64be(LSN + 8),
            &i64be(TS),
        ]),
        PgOutputMessage::StreamCommit(StreamCommit {
            xid: 900,
            flags: 0,
            commit_lsn: Lsn(LSN),
            end_lsn: Lsn(LSN + 8),
            commit_timestamp: TS,
        }),
    );
}

#[test]
fn stream_abort_v4_parallel_carries_abort_lsn_and_timestamp() {
    let options = DecoderOptions::new(ProtocolVersion::V4).with_parallel_streaming(true);
    let bytes = raw(&[b"A", &u32be(900), &u32be(905), &u64be(LSN), &i64be(TS)]);
    let expected = PgOutputMessage::StreamAbort(StreamAbort {
        xid: 900,
        subxid: 905,
        abort: Some(StreamAbortInfo {
            abort_lsn: Lsn(LSN),
            abort_timestamp: TS,
        }),
    });
    check_fixture(&mut PgOutputDecoder::new(options), bytes.clone(), expected);

    // Without parallel streaming the same bytes are the short form plus 16 stray bytes.
    let err = decoder(ProtocolVersion::V4).decode(bytes).unwrap_err();
    assert_eq!(err.message, MessageKind::StreamAbort);
    assert_eq!(
        (err.offset, err.problem),
        (9, DecodeProblem::TrailingBytes(16))
    );
}

#[test]
fn stream_abort_without_parallel_streaming_is_xid_and_subxid_only() {
    let bytes = raw(&[b"A", &u32be(900), &u32be(900)]);
    let expected = PgOutputMessage::StreamAbort(StreamAbort {
        xid: 900,
        subxid: 900,
        abort: None,
    });
    for version in [
        ProtocolVersion::V2,
        ProtocolVersion::V3,
        ProtocolVersion::V4,
    ] {
        check_fixture(&mut decoder(version), bytes.clone(), expected.clone());
    }
    // v2/v3 servers cannot stream in parallel, so the option changes nothing there.
    let options = DecoderOptions::new(ProtocolVersion::V3).with_parallel_streaming(true);
    check_fixture(&mut PgOutputDecoder::new(options), bytes, expected);
}

#[test]
fn two_phase_messages() {
    let mut d = decoder(ProtocolVersion::V3);
    let gid = b"gid-1\0";
    check_fixture(
        &mut d,
        raw(&[
            b"b",
            &u64be(LSN),
            &u64be(LSN + 1),
            &i64be(TS),
            &u32be(5),
            gid,
        ]),
        PgOutputMessage::BeginPrepare(BeginPrepare {
            prepare_lsn: Lsn(LSN),
            end_lsn: Lsn(LSN + 1),
            prepare_timestamp: TS,
            xid: 5,
            gid: "gid-1".into(),
        }),
    );
    let prepare = Prepare {
        flags: 0,
        prepare_lsn: Lsn(LSN),
        end_lsn: Lsn(LSN + 1),
        prepare_timestamp: TS,
        xid: 5,
        gid: "gid-1".into(),
    };
    let prepare_body: &[&[u8]] = &[
        &[0],
        &u64be(LSN),
        &u64be(LSN + 1),
        &i64be(TS),
        &u32be(5),
        gid,
    ];
    check_fixture(
        &mut d,
        raw(&[b"P", &prepare_body.concat()]),
        PgOutputMessage::Prepare(prepare.clone()),
    );
    check_fixture(
        &mut d,
        raw(&[b"p", &prepare_body.concat()]),
        PgOutputMessage::StreamPrepare(prepare),
    );
    check_fixture(
        &mut d,
        raw(&[
            b"K",
            &[0],
            &u64be(LSN + 2),
            &u64be(LSN + 3),
            &i64be(TS + 1),
            &u32be(5),
            gid,
        ]),
        PgOutputMessage::CommitPrepared(CommitPrepared {
            flags: 0,
            commit_lsn: Lsn(LSN + 2),
            end_lsn: Lsn(LSN + 3),
            commit_timestamp: TS + 1,
            xid: 5,
            gid: "gid-1".into(),
        }),
    );
    check_fixture(
        &mut d,
        raw(&[
            b"r",
            &[0],
            &u64be(LSN + 1),
            &u64be(LSN + 4),
            &i64be(TS),
            &i64be(TS + 2),
            &u32be(5),
            gid,
        ]),
        PgOutputMessage::RollbackPrepared(RollbackPrepared {
            flags: 0,
            prepare_end_lsn: Lsn(LSN + 1),
            rollback_end_lsn: Lsn(LSN + 4),
            prepare_timestamp: TS,
            rollback_timestamp: TS + 2,
            xid: 5,
            gid: "gid-1".into(),
        }),
    );
}

#[test]
fn stream_stop_outside_a_stream_is_rejected() {
    let err = decoder(ProtocolVersion::V2)
        .decode(raw(&[b"E"]))
        .unwrap_err();
    assert_eq!(err.message, MessageKind::StreamStop);
    assert_eq!((err.offset, err.problem), (0, DecodeProblem::OutsideStream));
}

#[test]
fn stream_start_inside_a_stream_is_rejected_and_state_kept() {
    let mut d = decoder(ProtocolVersion::V2);
    d.decode(raw(&[b"S", &u32be(1), &[1]])).unwrap();
    let err = d.decode(raw(&[b"S", &u32be(2), &[0]])).unwrap_err();
    assert_eq!(err.problem, DecodeProblem::InsideStream { stream_xid: 1 });
    assert_eq!(d.open_stream(), Some(1));
}

#[test]
fn transaction_boundaries_inside_a_stream_are_rejected() {
    let mut d = decoder(ProtocolVersion::V3);
    d.decode(raw(&[b"S", &u32be(1), &[1]])).unwrap();
    let begin = raw(&[b"B", &u64be(LSN), &i64be(TS), &u32be(2)]);
    let abort = raw(&[b"A", &u32be(1), &u32be(1)]);
    for bytes in [begin, abort] {
        let err = d.decode(bytes).unwrap_err();
        assert_eq!(err.problem, DecodeProblem::InsideStream { stream_xid: 1 });
    }
}

#[test]
fn failed_stream_start_leaves_no_stream_open() {
    let mut d = decoder(ProtocolVersion::V2);
    let err = d.decode(raw(&[b"S", &u32be(1), &[7]])).unwrap_err();
    assert!(matches!(
        err.problem,
        DecodeProblem::InvalidBoolean { value: 7, .. }
    ));
    assert_eq!(d.open_stream(), None);
}

#[test]
fn messages_newer_than_the_negotiated_version_are_rejected() {
    let err = decoder(ProtocolVersion::V1)
        .decode(raw(&[b"S", &u32be(1), &[1]]))
        .unwrap_err();
    assert_eq!(
        err.problem,
        DecodeProblem::UnsupportedByProtocolVersion {
            required: 2,
            negotiated: 1
        }
    );
    let err = decoder(ProtocolVersion::V2)
        .decode(raw(&[b"P", &[0; 29], b"g\0"]))
        .unwrap_err();
    assert_eq!(err.message, MessageKind::Prepare);
    assert_eq!(
        err.problem,
        DecodeProblem::UnsupportedByProtocolVersion {
            required: 3,
            negotiated: 2
        }
    );
}

#[test]
fn unknown_tag_and_empty_payload_are_rejected() {
    let err = decoder(ProtocolVersion::V4)
        .decode(raw(&[b"Z"]))
        .unwrap_err();
    assert_eq!(err.message, MessageKind::PgOutput);
    assert_eq!(err.problem, DecodeProblem::UnknownTag(b'Z'));
    let err = decoder(ProtocolVersion::V4)
        .decode(Bytes::new())
        .unwrap_err();
    assert!(matches!(
        err.problem,
        DecodeProblem::Truncated {
            needed: 1,
            available: 0
        }
    ));
}

#[test]
fn truncated_begin_names_the_missing_field() {
    let err = decoder(ProtocolVersion::V1)
        .decode(raw(&[b"B", &u64be(LSN), &[0, 0, 0]]))
        .unwrap_err();
    assert_eq!(err.message, MessageKind::Begin);
    assert_eq!(err.offset, 9);
    assert_eq!(
        err.problem,
        DecodeProblem::Truncated {
            needed: 8,
            available: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "invalid Begin message at byte 9: truncated: needed 8 bytes, 3 available"
    );
}

#[test]
fn trailing_bytes_after_commit_are_rejected() {
    let bytes = raw(&[b"C", &[0], &u64be(1), &u64be(2), &i64be(3), b"x"]);
    let err = decoder(ProtocolVersion::V1).decode(bytes).unwrap_err();
    assert_eq!(
        (err.offset, err.problem),
        (26, DecodeProblem::TrailingBytes(1))
    );
}

#[test]
fn relation_with_invalid_utf8_name_is_rejected() {
    let bytes = raw(&[b"R", &u32be(1), b"public\0", b"us\xc3rs\0", b"d", &[0, 0]]);
    let err = decoder(ProtocolVersion::V1).decode(bytes).unwrap_err();
    assert_eq!((err.offset, err.problem), (14, DecodeProblem::InvalidUtf8));
}

#[test]
fn relation_with_unknown_replica_identity_is_rejected() {
    let bytes = raw(&[b"R", &u32be(1), b"s\0", b"t\0", b"x", &[0, 0]]);
    let err = decoder(ProtocolVersion::V1).decode(bytes).unwrap_err();
    assert_eq!(
        (err.offset, err.problem),
        (9, DecodeProblem::UnknownReplicaIdentity(b'x'))
    );
}

#[test]
fn wrong_tuple_markers_are_rejected() {
    let insert_with_old = raw(&[b"I", &u32be(1), b"K", &[0, 0]]);
    let err = decoder(ProtocolVersion::V1)
        .decode(insert_with_old)
        .unwrap_err();
    assert_eq!(err.offset, 5);
    assert!(matches!(
        err.problem,
        DecodeProblem::UnexpectedTupleMarker { found: b'K', .. }
    ));

    let update_old_then_old = raw(&[b"U", &u32be(1), b"K", &[0, 0], b"O", &[0, 0]]);
    let err = decoder(ProtocolVersion::V1)
        .decode(update_old_then_old)
        .unwrap_err();
    assert_eq!(err.offset, 8);

    let delete_with_new = raw(&[b"D", &u32be(1), b"N", &[0, 0]]);
    let err = decoder(ProtocolVersion::V1)
        .decode(delete_with_new)
        .unwrap_err();
    assert!(matches!(
        err.problem,
        DecodeProblem::UnexpectedTupleMarker { found: b'N', .. }
    ));
}

#[test]
fn huge_truncate_count_is_truncation_not_allocation() {
    let bytes = raw(&[b"T", &u32be(i32::MAX as u32), &[0], &u32be(1)]);
    let err = decoder(ProtocolVersion::V1).decode(bytes).unwrap_err();
    assert!(matches!(
        err.problem,
        DecodeProblem::Truncated {
            needed: 4,
            available: 0
        }
    ));
}

#[test]
fn negative_message_length_is_rejected() {
    let bytes = raw(&[b"M", &[0], &u64be(1), b"p\0", &(-3i32).to_be_bytes()]);
    let err = decoder(ProtocolVersion::V1).decode(bytes).unwrap_err();
    assert_eq!(
        (err.offset, err.problem),
        (12, DecodeProblem::NegativeLength(-3))
    );
}

#[test]
fn strings_with_nul_cannot_be_encoded_and_leave_the_buffer_untouched() {
    let mut out = BytesMut::from(&b"prefix"[..]);
    let msg = PgOutputMessage::Origin(Origin {
        commit_lsn: Lsn(1),
        name: "a\0b".into(),
    });
    assert_eq!(
        encode(&msg, &mut out),
        Err(EncodeError::NulInString {
            field: "origin name"
        })
    );
    assert_eq!(&out[..], b"prefix");
}

#[test]
fn protocol_version_follows_server_version() {
    assert_eq!(ProtocolVersion::max_for_server(90_600), None);
    assert_eq!(
        ProtocolVersion::max_for_server(130_012),
        Some(ProtocolVersion::V1)
    );
    assert_eq!(
        ProtocolVersion::max_for_server(140_000),
        Some(ProtocolVersion::V2)
    );
    assert_eq!(
        ProtocolVersion::max_for_server(150_007),
        Some(ProtocolVersion::V3)
    );
    assert_eq!(
        ProtocolVersion::max_for_server(170_002),
        Some(ProtocolVersion::V4)
    );
    for n in 1..=4 {
        assert_eq!(ProtocolVersion::from_number(n).map(|v| v.number()), Some(n));
    }
    assert_eq!(ProtocolVersion::from_number(5), None);
}
