//! The CopyData sub-protocol of `START_REPLICATION`: what the walsender sends (XLogData,
//! primary keepalive) and what the client answers (standby status update, hot standby
//! feedback), decoded from and encoded into the body of one CopyData message.
//!
//! The CopyData framing itself (`d`, Int32 length) belongs to the connection layer; these
//! functions see only the body. Layouts follow the "Streaming Replication Protocol" chapter
//! of the PostgreSQL documentation. Timestamps are raw microseconds since 2000-01-01 (see
//! [`super::timestamp`]).

use bytes::{BufMut, Bytes, BytesMut};
use cdc_core::Lsn;

use super::error::{DecodeError, DecodeProblem, MessageKind};
use super::reader::Reader;

const XLOG_DATA: u8 = b'w';
const PRIMARY_KEEPALIVE: u8 = b'k';
const STANDBY_STATUS_UPDATE: u8 = b'r';
const HOT_STANDBY_FEEDBACK: u8 = b'h';

/// A chunk of the WAL stream (`w`). For logical replication, `data` is one output-plugin
/// message (for pgoutput: one message for [`super::pgoutput::PgOutputDecoder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogData {
    /// Where the WAL data in this message starts.
    pub wal_start: Lsn,
    /// The current end of WAL on the server when it sent this.
    pub wal_end: Lsn,
    /// Server clock at transmission.
    pub server_clock: i64,
    /// The payload: a zero-copy slice of the CopyData body.
    pub data: Bytes,
}

/// A sender keepalive (`k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrimaryKeepalive {
    /// The current end of WAL on the server.
    pub wal_end: Lsn,
    /// Server clock at transmission.
    pub server_clock: i64,
    /// The server will disconnect us after `wal_sender_timeout` unless we send a standby
    /// status update now.
    pub reply_requested: bool,
}

/// A standby status update (`r`). Each LSN is "last byte + 1", i.e. the position up to which
/// (exclusive) the client has written, flushed or applied; for logical replication `flush` is
/// what advances the slot's `confirmed_flush_lsn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandbyStatusUpdate {
    /// Received and written up to here.
    pub write: Lsn,
    /// Durably flushed up to here.
    pub flush: Lsn,
    /// Applied up to here.
    pub apply: Lsn,
    /// Client clock at transmission.
    pub client_clock: i64,
    /// Asks the server to answer with a keepalive at once (a liveness ping).
    pub reply_requested: bool,
}

/// Hot standby feedback (`h`). Transaction ids of 0 mean "none" (the documented way to
/// stop holding back `xmin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotStandbyFeedback {
    /// Client clock at transmission.
    pub client_clock: i64,
    /// The standby's current global xmin.
    pub xmin: u32,
    /// The epoch of `xmin`.
    pub xmin_epoch: u32,
    /// The lowest catalog_xmin of any slot on the standby.
    pub catalog_xmin: u32,
    /// The epoch of `catalog_xmin`.
    pub catalog_xmin_epoch: u32,
}

/// A CopyData body the server sends during replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// `w`.
    XLogData(XLogData),
    /// `k`.
    PrimaryKeepalive(PrimaryKeepalive),
}

/// A CopyData body the client sends during replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMessage {
    /// `r`.
    StandbyStatusUpdate(StandbyStatusUpdate),
    /// `h`.
    HotStandbyFeedback(HotStandbyFeedback),
}

impl ServerMessage {
    /// Decodes one CopyData body sent by the walsender.
    ///
    /// Ok means the body was exactly one well-formed message (no bytes missing or left
    /// over). XLogData's payload is not interpreted and shares `body`'s buffer.
    pub fn decode(body: Bytes) -> Result<ServerMessage, DecodeError> {
        let mut r = Reader::new(&body, MessageKind::Replication);
        let tag = r.u8()?;
        match tag {
            XLOG_DATA => {
                r.set_kind(MessageKind::XLogData);
                let wal_start = r.lsn()?;
                let wal_end = r.lsn()?;
                let server_clock = r.i64()?;
                let data = r.rest_bytes();
                Ok(ServerMessage::XLogData(XLogData {
                    wal_start,
                    wal_end,
                    server_clock,
                    data,
                }))
            }
            PRIMARY_KEEPALIVE => {
                r.set_kind(MessageKind::PrimaryKeepalive);
                let msg = PrimaryKeepalive {
                    wal_end: r.lsn()?,
                    server_clock: r.i64()?,
                    reply_requested: r.bool("reply_requested")?,
                };
                r.finish()?;
                Ok(ServerMessage::PrimaryKeepalive(msg))
            }
            other => Err(r.error_at(0, DecodeProblem::UnknownTag(other))),
        }
    }

    /// Appends the CopyData body for this message to `out` (without the CopyData framing).
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            ServerMessage::XLogData(m) => {
                out.reserve(25 + m.data.len());
                out.put_u8(XLOG_DATA);
                out.put_u64(m.wal_start.0);
                out.put_u64(m.wal_end.0);
                out.put_i64(m.server_clock);
                out.put_slice(&m.data);
            }
            ServerMessage::PrimaryKeepalive(m) => {
                out.put_u8(PRIMARY_KEEPALIVE);
                out.put_u64(m.wal_end.0);
                out.put_i64(m.server_clock);
                out.put_u8(u8::from(m.reply_requested));
            }
        }
    }
}

impl ClientMessage {
    /// Decodes one CopyData body sent by a replication client. Ok means the body was exactly
    /// one well-formed message.
    pub fn decode(body: Bytes) -> Result<ClientMessage, DecodeError> {
        let mut r = Reader::new(&body, MessageKind::Replication);
        let tag = r.u8()?;
        let msg = match tag {
            STANDBY_STATUS_UPDATE => {
                r.set_kind(MessageKind::StandbyStatusUpdate);
                ClientMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                    write: r.lsn()?,
                    flush: r.lsn()?,
                    apply: r.lsn()?,
                    client_clock: r.i64()?,
                    reply_requested: r.bool("reply_requested")?,
                })
            }
            HOT_STANDBY_FEEDBACK => {
                r.set_kind(MessageKind::HotStandbyFeedback);
                ClientMessage::HotStandbyFeedback(HotStandbyFeedback {
                    client_clock: r.i64()?,
                    xmin: r.u32()?,
                    xmin_epoch: r.u32()?,
                    catalog_xmin: r.u32()?,
                    catalog_xmin_epoch: r.u32()?,
                })
            }
            other => return Err(r.error_at(0, DecodeProblem::UnknownTag(other))),
        };
        r.finish()?;
        Ok(msg)
    }

    /// Appends the CopyData body for this message to `out` (without the CopyData framing).
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            ClientMessage::StandbyStatusUpdate(m) => {
                out.put_u8(STANDBY_STATUS_UPDATE);
                out.put_u64(m.write.0);
                out.put_u64(m.flush.0);
                out.put_u64(m.apply.0);
                out.put_i64(m.client_clock);
                out.put_u8(u8::from(m.reply_requested));
            }
            ClientMessage::HotStandbyFeedback(m) => {
                out.put_u8(HOT_STANDBY_FEEDBACK);
                out.put_i64(m.client_clock);
                out.put_u32(m.xmin);
                out.put_u32(m.xmin_epoch);
                out.put_u32(m.catalog_xmin);
                out.put_u32(m.catalog_xmin_epoch);
            }
        }
    }
}

impl From<XLogData> for ServerMessage {
    fn from(m: XLogData) -> Self {
        ServerMessage::XLogData(m)
    }
}

impl From<PrimaryKeepalive> for ServerMessage {
    fn from(m: PrimaryKeepalive) -> Self {
        ServerMessage::PrimaryKeepalive(m)
    }
}

impl From<StandbyStatusUpdate> for ClientMessage {
    fn from(m: StandbyStatusUpdate) -> Self {
        ClientMessage::StandbyStatusUpdate(m)
    }
}

impl From<HotStandbyFeedback> for ClientMessage {
    fn from(m: HotStandbyFeedback) -> Self {
        ClientMessage::HotStandbyFeedback(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(parts: &[&[u8]]) -> Bytes {
        Bytes::from(parts.concat())
    }

    #[test]
    fn xlogdata_fixture_decodes_with_zero_copy_payload() {
        let raw = body(&[
            b"w",
            &0x0000_0016_B374_D848u64.to_be_bytes(),
            &0x0000_0016_B374_D900u64.to_be_bytes(),
            &777_000_111i64.to_be_bytes(),
            b"B\x00payload",
        ]);
        let ServerMessage::XLogData(m) = ServerMessage::decode(raw.clone()).unwrap() else {
            panic!("expected XLogData");
        };
        assert_eq!(m.wal_start, Lsn(0x16_B374_D848));
        assert_eq!(m.wal_end, Lsn(0x16_B374_D900));
        assert_eq!(m.server_clock, 777_000_111);
        assert_eq!(&m.data[..], b"B\x00payload");
        // The payload points into the CopyData body rather than a copy of it.
        assert_eq!(m.data.as_ptr(), raw[25..].as_ptr());

        let mut out = BytesMut::new();
        ServerMessage::XLogData(m).encode(&mut out);
        assert_eq!(out.freeze(), raw);
    }

    #[test]
    fn keepalive_fixture_asking_for_reply() {
        let raw = body(&[b"k", &42u64.to_be_bytes(), &(-5i64).to_be_bytes(), &[1]]);
        let expected = ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end: Lsn(42),
            server_clock: -5,
            reply_requested: true,
        });
        assert_eq!(ServerMessage::decode(raw.clone()).unwrap(), expected);
        let mut out = BytesMut::new();
        expected.encode(&mut out);
        assert_eq!(out.freeze(), raw);
    }

    #[test]
    fn standby_status_update_fixture() {
        let raw = body(&[
            b"r",
            &10u64.to_be_bytes(),
            &9u64.to_be_bytes(),
            &8u64.to_be_bytes(),
            &123i64.to_be_bytes(),
            &[0],
        ]);
        let expected = ClientMessage::StandbyStatusUpdate(StandbyStatusUpdate {
            write: Lsn(10),
            flush: Lsn(9),
            apply: Lsn(8),
            client_clock: 123,
            reply_requested: false,
        });
        assert_eq!(ClientMessage::decode(raw.clone()).unwrap(), expected);
        let mut out = BytesMut::new();
        expected.encode(&mut out);
        assert_eq!(out.freeze(), raw);
    }

    #[test]
    fn hot_standby_feedback_fixture() {
        let raw = body(&[
            b"h",
            &1i64.to_be_bytes(),
            &700u32.to_be_bytes(),
            &2u32.to_be_bytes(),
            &650u32.to_be_bytes(),
            &3u32.to_be_bytes(),
        ]);
        let expected = ClientMessage::HotStandbyFeedback(HotStandbyFeedback {
            client_clock: 1,
            xmin: 700,
            xmin_epoch: 2,
            catalog_xmin: 650,
            catalog_xmin_epoch: 3,
        });
        assert_eq!(ClientMessage::decode(raw.clone()).unwrap(), expected);
        let mut out = BytesMut::new();
        expected.encode(&mut out);
        assert_eq!(out.freeze(), raw);
    }

    #[test]
    fn keepalive_with_trailing_byte_is_rejected() {
        let raw = body(&[b"k", &[0; 16], &[0, 0]]);
        let err = ServerMessage::decode(raw).unwrap_err();
        assert_eq!(err.message, MessageKind::PrimaryKeepalive);
        assert_eq!(
            (err.offset, err.problem),
            (18, DecodeProblem::TrailingBytes(1))
        );
    }

    #[test]
    fn keepalive_with_non_boolean_reply_flag_is_rejected() {
        let raw = body(&[b"k", &[0; 16], &[2]]);
        let err = ServerMessage::decode(raw).unwrap_err();
        assert_eq!(err.offset, 17);
        assert!(matches!(
            err.problem,
            DecodeProblem::InvalidBoolean { value: 2, .. }
        ));
    }

    #[test]
    fn truncated_xlogdata_header_names_field_offset() {
        let raw = body(&[b"w", &[0; 12]]);
        let err = ServerMessage::decode(raw).unwrap_err();
        assert_eq!(err.message, MessageKind::XLogData);
        assert_eq!(err.offset, 9);
        assert_eq!(
            err.problem,
            DecodeProblem::Truncated {
                needed: 8,
                available: 4
            }
        );
    }

    #[test]
    fn unknown_and_empty_bodies_are_errors() {
        let err = ServerMessage::decode(Bytes::from_static(b"r")).unwrap_err();
        assert_eq!(err.problem, DecodeProblem::UnknownTag(b'r'));
        let err = ClientMessage::decode(Bytes::new()).unwrap_err();
        assert_eq!(err.message, MessageKind::Replication);
        assert!(matches!(
            err.problem,
            DecodeProblem::Truncated { needed: 1, .. }
        ));
    }

    fn arb_lsn() -> impl Strategy<Value = Lsn> {
        any::<u64>().prop_map(Lsn)
    }

    fn arb_server_message() -> impl Strategy<Value = ServerMessage> {
        prop_oneof![
            (
                arb_lsn(),
                arb_lsn(),
                any::<i64>(),
                prop::collection::vec(any::<u8>(), 0..64)
            )
                .prop_map(|(wal_start, wal_end, server_clock, data)| {
                    ServerMessage::XLogData(XLogData {
                        wal_start,
                        wal_end,
                        server_clock,
                        data: Bytes::from(data),
                    })
                }),
            (arb_lsn(), any::<i64>(), any::<bool>()).prop_map(
                |(wal_end, server_clock, reply_requested)| {
                    ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
                        wal_end,
                        server_clock,
                        reply_requested,
                    })
                }
            ),
        ]
    }

    fn arb_client_message() -> impl Strategy<Value = ClientMessage> {
        prop_oneof![
            (arb_lsn(), arb_lsn(), arb_lsn(), any::<i64>(), any::<bool>()).prop_map(
                |(write, flush, apply, client_clock, reply_requested)| {
                    ClientMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                        write,
                        flush,
                        apply,
                        client_clock,
                        reply_requested,
                    })
                }
            ),
            (any::<i64>(), any::<[u32; 4]>()).prop_map(|(client_clock, [a, b, c, d])| {
                ClientMessage::HotStandbyFeedback(HotStandbyFeedback {
                    client_clock,
                    xmin: a,
                    xmin_epoch: b,
                    catalog_xmin: c,
                    catalog_xmin_epoch: d,
                })
            }),
        ]
    }

    proptest! {
        #[test]
        fn server_messages_round_trip(msg in arb_server_message()) {
            let mut out = BytesMut::new();
            msg.encode(&mut out);
            prop_assert_eq!(ServerMessage::decode(out.freeze()).unwrap(), msg);
        }

        #[test]
        fn client_messages_round_trip(msg in arb_client_message()) {
            let mut out = BytesMut::new();
            msg.encode(&mut out);
            prop_assert_eq!(ClientMessage::decode(out.freeze()).unwrap(), msg);
        }

        #[test]
        fn arbitrary_bodies_never_panic(
            tag in prop::sample::select(vec![b'w', b'k', b'r', b'h', b'x']),
            tail in prop::collection::vec(any::<u8>(), 0..48),
        ) {
            let mut raw = vec![tag];
            raw.extend_from_slice(&tail);
            let _ = ServerMessage::decode(Bytes::from(raw.clone()));
            let _ = ClientMessage::decode(Bytes::from(raw));
            let _ = ServerMessage::decode(Bytes::from(tail.clone()));
            let _ = ClientMessage::decode(Bytes::from(tail));
        }

        #[test]
        fn every_proper_prefix_of_a_fixed_size_message_is_rejected(
            msg in arb_client_message(),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut out = BytesMut::new();
            msg.encode(&mut out);
            let raw = out.freeze();
            let cut = cut.index(raw.len());
            prop_assert!(ClientMessage::decode(raw.slice(..cut)).is_err());
        }

        #[test]
        fn mutated_server_messages_never_panic(
            msg in arb_server_message(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut out = BytesMut::new();
            msg.encode(&mut out);
            let mut raw = out.to_vec();
            let i = at.index(raw.len());
            raw[i] = byte;
            let _ = ServerMessage::decode(Bytes::from(raw.clone()));
            raw.truncate(i);
            let _ = ServerMessage::decode(Bytes::from(raw));
        }
    }
}
