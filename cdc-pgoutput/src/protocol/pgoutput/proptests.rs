//! Properties over generated sessions: every message of every protocol version round-trips
//! through encode and decode, and no input, however mangled, panics the decoder.

use bytes::{Bytes, BytesMut};
use cdc_core::Lsn;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};

use super::*;
use crate::protocol::error::DecodeProblem;

fn arb_lsn() -> impl Strategy<Value = Lsn> {
    any::<u64>().prop_map(Lsn)
}

/// Protocol strings cannot contain NUL; anything else, including non-ASCII, is fair.
fn arb_string() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,10}"
}

fn arb_bytes() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn arb_options() -> impl Strategy<Value = DecoderOptions> {
    (1u32..=4, any::<bool>()).prop_map(|(n, parallel)| {
        let version = ProtocolVersion::from_number(n).unwrap_or(ProtocolVersion::V1);
        DecoderOptions::new(version).with_parallel_streaming(parallel)
    })
}

fn arb_column_value() -> impl Strategy<Value = ColumnValue> {
    prop_oneof![
        Just(ColumnValue::Null),
        Just(ColumnValue::UnchangedToast),
        arb_bytes().prop_map(ColumnValue::Text),
        arb_bytes().prop_map(ColumnValue::Binary),
    ]
}

fn arb_tuple() -> impl Strategy<Value = TupleData> {
    prop::collection::vec(arb_column_value(), 0..6).prop_map(TupleData::new)
}

fn arb_old_tuple() -> impl Strategy<Value = OldTuple> {
    prop_oneof![
        arb_tuple().prop_map(OldTuple::Key),
        arb_tuple().prop_map(OldTuple::Full),
    ]
}

fn arb_replica_identity() -> impl Strategy<Value = ReplicaIdentity> {
    prop::sample::select(vec![
        ReplicaIdentity::Default,
        ReplicaIdentity::Nothing,
        ReplicaIdentity::Full,
        ReplicaIdentity::Index,
    ])
}

fn arb_relation_column() -> impl Strategy<Value = RelationColumn> {
    (any::<u8>(), arb_string(), any::<u32>(), any::<i32>()).prop_map(
        |(flags, name, type_oid, type_modifier)| RelationColumn {
            flags,
            name,
            type_oid,
            type_modifier,
        },
    )
}

/// Messages that may appear both inside and outside a stream; `in_stream` decides whether
/// the xid-bearing ones carry an xid.
fn arb_data_message(in_stream: bool) -> BoxedStrategy<PgOutputMessage> {
    let xid = move || {
        if in_stream {
            any::<u32>().prop_map(Some).boxed()
        } else {
            Just(None).boxed()
        }
    };
    prop_oneof![
        (arb_lsn(), arb_string())
            .prop_map(|(commit_lsn, name)| PgOutputMessage::Origin(Origin { commit_lsn, name })),
        (
            xid(),
            any::<u32>(),
            arb_string(),
            arb_string(),
            arb_replica_identity(),
            prop::collection::vec(arb_relation_column(), 0..5),
        )
            .prop_map(
                |(xid, relation_id, namespace, name, replica_identity, columns)| {
                    PgOutputMessage::Relation(Relation {
                        xid,
                        relation_id,
                        namespace,
                        name,
                        replica_identity,
                        columns,
                    })
                }
            ),
        (xid(), any::<u32>(), arb_string(), arb_string()).prop_map(
            |(xid, type_oid, namespace, name)| PgOutputMessage::Type(Type {
                xid,
                type_oid,
                namespace,
                name,
            })
        ),
        (xid(), any::<u32>(), arb_tuple()).prop_map(|(xid, relation_id, new)| {
            PgOutputMessage::Insert(Insert {
                xid,
                relation_id,
                new,
            })
        }),
        (
            xid(),
            any::<u32>(),
            prop::option::of(arb_old_tuple()),
            arb_tuple()
        )
            .prop_map(|(xid, relation_id, old, new)| {
                PgOutputMessage::Update(Update {
                    xid,
                    relation_id,
                    old,
                    new,
                })
            }),
        (xid(), any::<u32>(), arb_old_tuple()).prop_map(|(xid, relation_id, old)| {
            PgOutputMessage::Delete(Delete {
                xid,
                relation_id,
                old,
            })
        }),
        (
            xid(),
            any::<u8>(),
            prop::collection::vec(any::<u32>(), 0..5)
        )
            .prop_map(|(xid, options, relation_ids)| {
                PgOutputMessage::Truncate(Truncate {
                    xid,
                    options,
                    relation_ids,
                })
            }),
        (xid(), any::<u8>(), arb_lsn(), arb_string(), arb_bytes()).prop_map(
            |(xid, flags, lsn, prefix, content)| PgOutputMessage::Message(LogicalMessage {
                xid,
                flags,
                lsn,
                prefix,
                content,
            })
        ),
    ]
    .boxed()
}

fn arb_transaction_boundary() -> BoxedStrategy<PgOutputMessage> {
    prop_oneof![
        (arb_lsn(), any::<i64>(), any::<u32>()).prop_map(|(final_lsn, commit_timestamp, xid)| {
            PgOutputMessage::Begin(Begin {
                final_lsn,
                commit_timestamp,
                xid,
            })
        }),
        (any::<u8>(), arb_lsn(), arb_lsn(), any::<i64>()).prop_map(
            |(flags, commit_lsn, end_lsn, commit_timestamp)| PgOutputMessage::Commit(Commit {
                flags,
                commit_lsn,
                end_lsn,
                commit_timestamp,
            })
        ),
    ]
    .boxed()
}

/// One stream segment: Stream Start, data messages with xids, Stream Stop.
fn arb_stream_segment() -> BoxedStrategy<Vec<PgOutputMessage>> {
    (
        any::<u32>(),
        any::<bool>(),
        prop::collection::vec(arb_data_message(true), 0..5),
    )
        .prop_map(|(xid, first_segment, data)| {
            let mut segment = vec![PgOutputMessage::StreamStart(StreamStart {
                xid,
                first_segment,
            })];
            segment.extend(data);
            segment.push(PgOutputMessage::StreamStop);
            segment
        })
        .boxed()
}

fn arb_stream_end(options: DecoderOptions) -> BoxedStrategy<PgOutputMessage> {
    let abort_info = if options.stream_abort_has_info() {
        (arb_lsn(), any::<i64>())
            .prop_map(|(abort_lsn, abort_timestamp)| {
                Some(StreamAbortInfo {
                    abort_lsn,
                    abort_timestamp,
                })
            })
            .boxed()
    } else {
        Just(None).boxed()
    };
    prop_oneof![
        (
            any::<u32>(),
            any::<u8>(),
            arb_lsn(),
            arb_lsn(),
            any::<i64>()
        )
            .prop_map(|(xid, flags, commit_lsn, end_lsn, commit_timestamp)| {
                PgOutputMessage::StreamCommit(StreamCommit {
                    xid,
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_timestamp,
                })
            }),
        (any::<u32>(), any::<u32>(), abort_info).prop_map(|(xid, subxid, abort)| {
            PgOutputMessage::StreamAbort(StreamAbort { xid, subxid, abort })
        }),
    ]
    .boxed()
}

fn arb_prepare() -> impl Strategy<Value = Prepare> {
    (
        any::<u8>(),
        arb_lsn(),
        arb_lsn(),
        any::<i64>(),
        any::<u32>(),
        arb_string(),
    )
        .prop_map(
            |(flags, prepare_lsn, end_lsn, prepare_timestamp, xid, gid)| Prepare {
                flags,
                prepare_lsn,
                end_lsn,
                prepare_timestamp,
                xid,
                gid,
            },
        )
}

fn arb_two_phase() -> BoxedStrategy<PgOutputMessage> {
    prop_oneof![
        arb_prepare().prop_map(|p| PgOutputMessage::BeginPrepare(BeginPrepare {
            prepare_lsn: p.prepare_lsn,
            end_lsn: p.end_lsn,
            prepare_timestamp: p.prepare_timestamp,
            xid: p.xid,
            gid: p.gid,
        })),
        arb_prepare().prop_map(PgOutputMessage::Prepare),
        arb_prepare().prop_map(PgOutputMessage::StreamPrepare),
        arb_prepare().prop_map(|p| PgOutputMessage::CommitPrepared(CommitPrepared {
            flags: p.flags,
            commit_lsn: p.prepare_lsn,
            end_lsn: p.end_lsn,
            commit_timestamp: p.prepare_timestamp,
            xid: p.xid,
            gid: p.gid,
        })),
        (arb_prepare(), arb_lsn(), any::<i64>()).prop_map(|(p, rollback_end_lsn, ts)| {
            PgOutputMessage::RollbackPrepared(RollbackPrepared {
                flags: p.flags,
                prepare_end_lsn: p.end_lsn,
                rollback_end_lsn,
                prepare_timestamp: p.prepare_timestamp,
                rollback_timestamp: ts,
                xid: p.xid,
                gid: p.gid,
            })
        }),
    ]
    .boxed()
}

/// A message sequence a server of these options could send (as far as the decoder checks).
fn arb_session(options: DecoderOptions) -> impl Strategy<Value = Vec<PgOutputMessage>> {
    let mut items: Vec<BoxedStrategy<Vec<PgOutputMessage>>> = vec![
        arb_data_message(false).prop_map(|m| vec![m]).boxed(),
        arb_transaction_boundary().prop_map(|m| vec![m]).boxed(),
    ];
    if options.protocol_version >= ProtocolVersion::V2 {
        items.push(arb_stream_segment());
        items.push(arb_stream_end(options).prop_map(|m| vec![m]).boxed());
    }
    if options.protocol_version >= ProtocolVersion::V3 {
        items.push(arb_two_phase().prop_map(|m| vec![m]).boxed());
    }
    prop::collection::vec(Union::new(items), 0..10)
        .prop_map(|items| items.into_iter().flatten().collect())
}

fn arb_options_and_session() -> impl Strategy<Value = (DecoderOptions, Vec<PgOutputMessage>)> {
    arb_options().prop_flat_map(|options| (Just(options), arb_session(options)))
}

fn encode_to_bytes(message: &PgOutputMessage) -> Bytes {
    let mut out = BytesMut::new();
    encode(message, &mut out).unwrap();
    out.freeze()
}

fn all_tags() -> Vec<u8> {
    b"BCORYIUDTMSEcAbPKrpZ\0".to_vec()
}

proptest! {
    #[test]
    fn every_message_round_trips_in_every_version((options, session) in arb_options_and_session()) {
        let mut decoder = PgOutputDecoder::new(options);
        for message in &session {
            let bytes = encode_to_bytes(message);
            let decoded = decoder.decode(bytes.clone());
            prop_assert_eq!(decoded.as_ref(), Ok(message));
            // Re-encoding what was decoded gives the same bytes: nothing was normalised.
            prop_assert_eq!(encode_to_bytes(&decoded.unwrap()), bytes);
        }
        prop_assert_eq!(decoder.open_stream(), None);
    }

    #[test]
    fn every_proper_prefix_and_any_extension_is_rejected(
        (options, session) in arb_options_and_session(),
        cut in any::<prop::sample::Index>(),
        extra in any::<u8>(),
    ) {
        let mut decoder = PgOutputDecoder::new(options);
        for message in &session {
            let bytes = encode_to_bytes(message);
            let mut probe = decoder.clone();
            let prefix = bytes.slice(..cut.index(bytes.len()));
            prop_assert!(probe.decode(prefix).is_err());
            prop_assert_eq!(probe.open_stream(), decoder.open_stream());

            let mut longer = bytes.to_vec();
            longer.push(extra);
            let err = probe.decode(Bytes::from(longer)).unwrap_err();
            prop_assert!(matches!(err.problem, DecodeProblem::TrailingBytes(1)));
            prop_assert_eq!(probe.open_stream(), decoder.open_stream());

            decoder.decode(bytes).unwrap();
        }
    }

    #[test]
    fn arbitrary_payloads_never_panic(
        options in arb_options(),
        open_stream in any::<bool>(),
        tag in prop::sample::select(all_tags()),
        tail in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut decoder = PgOutputDecoder::new(options);
        if open_stream && options.protocol_version >= ProtocolVersion::V2 {
            decoder.decode(Bytes::from_static(b"S\0\0\0\x01\x01")).unwrap();
        }
        let mut payload = vec![tag];
        payload.extend_from_slice(&tail);
        let _ = decoder.decode(Bytes::from(payload));
        let _ = decoder.decode(Bytes::from(tail));
    }

    #[test]
    fn mutated_sessions_never_panic(
        (options, session) in arb_options_and_session(),
        mutations in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u8>(), 0u8..4),
            1..8,
        ),
    ) {
        let mut decoder = PgOutputDecoder::new(options);
        let mut payloads: Vec<Vec<u8>> = session.iter().map(|m| encode_to_bytes(m).to_vec()).collect();
        if payloads.is_empty() {
            payloads.push(Vec::new());
        }
        for (which, at, byte, how) in mutations {
            let i = which.index(payloads.len());
            let payload = &mut payloads[i];
            match how {
                0 if !payload.is_empty() => {
                    let j = at.index(payload.len());
                    payload[j] = byte;
                }
                1 => {
                    let j = at.index(payload.len() + 1);
                    payload.truncate(j);
                }
                2 => {
                    let j = at.index(payload.len() + 1);
                    payload.insert(j, byte);
                }
                _ => payload.push(byte),
            }
        }
        for payload in payloads {
            let _ = decoder.decode(Bytes::from(payload));
        }
    }
}
