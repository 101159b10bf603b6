//! Decoding pgoutput messages, one XLogData payload at a time, for a negotiated protocol
//! version. The decoder tracks whether a stream segment is open, because that decides whether
//! data messages carry an xid.

use bytes::Bytes;

use super::messages::{
    Begin, BeginPrepare, Commit, CommitPrepared, Delete, Insert, LogicalMessage, OldTuple, Origin,
    PgOutputMessage, Prepare, Relation, RelationColumn, ReplicaIdentity, RollbackPrepared,
    StreamAbort, StreamAbortInfo, StreamCommit, StreamStart, Truncate, Type, Update, tag,
};
use super::tuple::{TupleData, TupleRef, TupleRepr};
use crate::protocol::error::{DecodeError, DecodeProblem, MessageKind};
use crate::protocol::reader::Reader;

/// A pgoutput `proto_version`. Each version adds messages; a message of a newer version than
/// the negotiated one is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// PostgreSQL 10+: transactions, relations, DML, truncate, logical messages.
    V1,
    /// PostgreSQL 14+: streaming of in-progress transactions.
    V2,
    /// PostgreSQL 15+: two-phase commit.
    V3,
    /// PostgreSQL 16+: parallel streaming (Stream Abort may carry abort LSN and time).
    V4,
}

impl ProtocolVersion {
    /// The number passed as `proto_version` to `START_REPLICATION`.
    pub const fn number(self) -> u32 {
        match self {
            ProtocolVersion::V1 => 1,
            ProtocolVersion::V2 => 2,
            ProtocolVersion::V3 => 3,
            ProtocolVersion::V4 => 4,
        }
    }

    /// The version with this number, or `None` if no such version exists.
    pub const fn from_number(number: u32) -> Option<ProtocolVersion> {
        match number {
            1 => Some(ProtocolVersion::V1),
            2 => Some(ProtocolVersion::V2),
            3 => Some(ProtocolVersion::V3),
            4 => Some(ProtocolVersion::V4),
            _ => None,
        }
    }

    /// The highest version a server of this `server_version_num` (e.g. `160004`) speaks, or
    /// `None` before PostgreSQL 10, which has no pgoutput.
    pub const fn max_for_server(server_version_num: u32) -> Option<ProtocolVersion> {
        match server_version_num {
            160_000.. => Some(ProtocolVersion::V4),
            150_000.. => Some(ProtocolVersion::V3),
            140_000.. => Some(ProtocolVersion::V2),
            100_000.. => Some(ProtocolVersion::V1),
            _ => None,
        }
    }
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

/// How the session was started, which the wire format depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderOptions {
    /// The `proto_version` passed to `START_REPLICATION`.
    pub protocol_version: ProtocolVersion,
    /// Whether `streaming 'parallel'` was requested. With protocol v4 this makes Stream Abort
    /// carry the abort LSN and timestamp; with an older version it has no effect (servers
    /// refuse `parallel` below v4).
    pub parallel_streaming: bool,
}

impl DecoderOptions {
    /// Options for `protocol_version` without parallel streaming.
    pub const fn new(protocol_version: ProtocolVersion) -> Self {
        DecoderOptions {
            protocol_version,
            parallel_streaming: false,
        }
    }

    /// These options with parallel streaming set as given.
    pub const fn with_parallel_streaming(mut self, parallel_streaming: bool) -> Self {
        self.parallel_streaming = parallel_streaming;
        self
    }

    /// Whether Stream Abort carries abort LSN and timestamp in this session.
    pub const fn stream_abort_has_info(self) -> bool {
        self.parallel_streaming && self.protocol_version.number() >= 4
    }
}

/// Decodes the pgoutput messages of one replication session, in order.
///
/// Feed it the payload of every XLogData, in the order received. It knows whether a stream
/// segment is open (between Stream Start and Stream Stop) and so whether data messages carry
/// an xid; callers never pass that in. Start a new decoder for each `START_REPLICATION`.
#[derive(Debug, Clone)]
pub struct PgOutputDecoder {
    options: DecoderOptions,
    stream_xid: Option<u32>,
}

impl PgOutputDecoder {
    /// A decoder at the start of a session (no stream open).
    pub fn new(options: DecoderOptions) -> Self {
        PgOutputDecoder {
            options,
            stream_xid: None,
        }
    }

    /// The options this decoder was built with.
    pub fn options(&self) -> DecoderOptions {
        self.options
    }

    /// The xid of the open stream segment, if one is open.
    pub fn open_stream(&self) -> Option<u32> {
        self.stream_xid
    }

    /// Decodes one XLogData payload.
    ///
    /// Ok means the payload was exactly one well-formed message, valid for the negotiated
    /// protocol version and for the stream state; byte values (column values, message content)
    /// share `payload`'s buffer. On Err the decoder's state is unchanged.
    pub fn decode(&mut self, payload: Bytes) -> Result<PgOutputMessage, DecodeError> {
        let message = decode_message::<TupleData>(&payload, self.options, self.stream_xid)?;
        self.track_stream(&message);
        Ok(message)
    }

    /// Decodes one XLogData payload like [`Self::decode`], but leaves rows in the payload:
    /// Insert, Update and Delete hold [`TupleRef`]s whose columns are borrowed slices,
    /// for consumers that decode every column at once (no reference-counted `Bytes` per
    /// column). Same checks, same errors, same state changes as `decode`.
    pub fn decode_borrowed<'a>(
        &mut self,
        payload: &'a Bytes,
    ) -> Result<PgOutputMessage<TupleRef<'a>>, DecodeError> {
        let message = decode_message::<TupleRef<'a>>(payload, self.options, self.stream_xid)?;
        self.track_stream(&message);
        Ok(message)
    }

    fn track_stream<T>(&mut self, message: &PgOutputMessage<T>) {
        match message {
            PgOutputMessage::StreamStart(start) => self.stream_xid = Some(start.xid),
            PgOutputMessage::StreamStop => self.stream_xid = None,
            _ => {}
        }
    }
}

/// Where in the message sequence a message may appear.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Anywhere; inside a stream it carries the xid after its tag.
    Data,
    /// Anywhere, never with an xid.
    Anywhere,
    /// Only while no stream segment is open (Stream Start, transaction boundaries).
    OutsideStream,
    /// Only while a stream segment is open (Stream Stop).
    InsideStream,
}

fn classify(tag: u8) -> Option<(MessageKind, ProtocolVersion, Place)> {
    use ProtocolVersion::{V1, V2, V3};
    let spec = match tag {
        tag::BEGIN => (MessageKind::Begin, V1, Place::OutsideStream),
        tag::COMMIT => (MessageKind::Commit, V1, Place::OutsideStream),
        tag::ORIGIN => (MessageKind::Origin, V1, Place::Anywhere),
        tag::RELATION => (MessageKind::Relation, V1, Place::Data),
        tag::TYPE => (MessageKind::Type, V1, Place::Data),
        tag::INSERT => (MessageKind::Insert, V1, Place::Data),
        tag::UPDATE => (MessageKind::Update, V1, Place::Data),
        tag::DELETE => (MessageKind::Delete, V1, Place::Data),
        tag::TRUNCATE => (MessageKind::Truncate, V1, Place::Data),
        tag::MESSAGE => (MessageKind::Message, V1, Place::Data),
        tag::STREAM_START => (MessageKind::StreamStart, V2, Place::OutsideStream),
        tag::STREAM_STOP => (MessageKind::StreamStop, V2, Place::InsideStream),
        tag::STREAM_COMMIT => (MessageKind::StreamCommit, V2, Place::OutsideStream),
        tag::STREAM_ABORT => (MessageKind::StreamAbort, V2, Place::OutsideStream),
        tag::BEGIN_PREPARE => (MessageKind::BeginPrepare, V3, Place::OutsideStream),
        tag::PREPARE => (MessageKind::Prepare, V3, Place::OutsideStream),
        tag::COMMIT_PREPARED => (MessageKind::CommitPrepared, V3, Place::OutsideStream),
        tag::ROLLBACK_PREPARED => (MessageKind::RollbackPrepared, V3, Place::OutsideStream),
        tag::STREAM_PREPARE => (MessageKind::StreamPrepare, V3, Place::OutsideStream),
        _ => return None,
    };
    Some(spec)
}

/// Decodes one message given the session's options and the open stream (if any), without
/// changing any state.
fn decode_message<'a, T: TupleRepr<'a>>(
    payload: &'a Bytes,
    options: DecoderOptions,
    stream_xid: Option<u32>,
) -> Result<PgOutputMessage<T>, DecodeError> {
    let mut r = Reader::new(payload, MessageKind::PgOutput);
    let tag = r.u8()?;
    let Some((kind, since, place)) = classify(tag) else {
        return Err(r.error_at(0, DecodeProblem::UnknownTag(tag)));
    };
    r.set_kind(kind);
    if options.protocol_version < since {
        return Err(r.error_at(
            0,
            DecodeProblem::UnsupportedByProtocolVersion {
                required: since.number(),
                negotiated: options.protocol_version.number(),
            },
        ));
    }
    match (place, stream_xid) {
        (Place::OutsideStream, Some(stream_xid)) => {
            return Err(r.error_at(0, DecodeProblem::InsideStream { stream_xid }));
        }
        (Place::InsideStream, None) => return Err(r.error_at(0, DecodeProblem::OutsideStream)),
        _ => {}
    }
    // Not checked against the stream's xid: changes of a subtransaction carry its own xid.
    let xid = if place == Place::Data && stream_xid.is_some() {
        Some(r.u32()?)
    } else {
        None
    };

    let message = match tag {
        tag::BEGIN => PgOutputMessage::Begin(Begin {
            final_lsn: r.lsn()?,
            commit_timestamp: r.i64()?,
            xid: r.u32()?,
        }),
        tag::COMMIT => PgOutputMessage::Commit(Commit {
            flags: r.u8()?,
            commit_lsn: r.lsn()?,
            end_lsn: r.lsn()?,
            commit_timestamp: r.i64()?,
        }),
        tag::ORIGIN => PgOutputMessage::Origin(Origin {
            commit_lsn: r.lsn()?,
            name: r.cstr()?,
        }),
        tag::RELATION => PgOutputMessage::Relation(decode_relation(&mut r, xid)?),
        tag::TYPE => PgOutputMessage::Type(Type {
            xid,
            type_oid: r.u32()?,
            namespace: r.cstr()?,
            name: r.cstr()?,
        }),
        tag::INSERT => {
            let relation_id = r.u32()?;
            expect_marker(&mut r, &[tag::NEW_TUPLE], "'N'")?;
            PgOutputMessage::Insert(Insert {
                xid,
                relation_id,
                new: T::read(&mut r)?,
            })
        }
        tag::UPDATE => {
            let relation_id = r.u32()?;
            let marker = expect_marker(
                &mut r,
                &[tag::OLD_KEY, tag::OLD_FULL, tag::NEW_TUPLE],
                "'K', 'O' or 'N'",
            )?;
            let old = match marker {
                tag::NEW_TUPLE => None,
                _ => {
                    let old = old_tuple(marker, T::read(&mut r)?);
                    expect_marker(&mut r, &[tag::NEW_TUPLE], "'N'")?;
                    Some(old)
                }
            };
            PgOutputMessage::Update(Update {
                xid,
                relation_id,
                old,
                new: T::read(&mut r)?,
            })
        }
        tag::DELETE => {
            let relation_id = r.u32()?;
            let marker = expect_marker(&mut r, &[tag::OLD_KEY, tag::OLD_FULL], "'K' or 'O'")?;
            PgOutputMessage::Delete(Delete {
                xid,
                relation_id,
                old: old_tuple(marker, T::read(&mut r)?),
            })
        }
        tag::TRUNCATE => {
            let count = r.len_i32()?;
            let options = r.u8()?;
            let mut relation_ids = Vec::with_capacity(count.min(r.remaining() / 4));
            for _ in 0..count {
                relation_ids.push(r.u32()?);
            }
            PgOutputMessage::Truncate(Truncate {
                xid,
                options,
                relation_ids,
            })
        }
        tag::MESSAGE => {
            let flags = r.u8()?;
            let lsn = r.lsn()?;
            let prefix = r.cstr()?;
            let len = r.len_i32()?;
            PgOutputMessage::Message(LogicalMessage {
                xid,
                flags,
                lsn,
                prefix,
                content: r.bytes(len)?,
            })
        }
        tag::STREAM_START => PgOutputMessage::StreamStart(StreamStart {
            xid: r.u32()?,
            first_segment: r.bool("first_segment")?,
        }),
        tag::STREAM_STOP => PgOutputMessage::StreamStop,
        tag::STREAM_COMMIT => PgOutputMessage::StreamCommit(StreamCommit {
            xid: r.u32()?,
            flags: r.u8()?,
            commit_lsn: r.lsn()?,
            end_lsn: r.lsn()?,
            commit_timestamp: r.i64()?,
        }),
        tag::STREAM_ABORT => {
            let xid = r.u32()?;
            let subxid = r.u32()?;
            // The wire gives no hint whether the two fields follow; only the session's
            // options say so, hence the decoder option.
            let abort = if options.stream_abort_has_info() {
                Some(StreamAbortInfo {
                    abort_lsn: r.lsn()?,
                    abort_timestamp: r.i64()?,
                })
            } else {
                None
            };
            PgOutputMessage::StreamAbort(StreamAbort { xid, subxid, abort })
        }
        tag::BEGIN_PREPARE => PgOutputMessage::BeginPrepare(BeginPrepare {
            prepare_lsn: r.lsn()?,
            end_lsn: r.lsn()?,
            prepare_timestamp: r.i64()?,
            xid: r.u32()?,
            gid: r.cstr()?,
        }),
        tag::PREPARE => PgOutputMessage::Prepare(decode_prepare(&mut r)?),
        tag::STREAM_PREPARE => PgOutputMessage::StreamPrepare(decode_prepare(&mut r)?),
        tag::COMMIT_PREPARED => PgOutputMessage::CommitPrepared(CommitPrepared {
            flags: r.u8()?,
            commit_lsn: r.lsn()?,
            end_lsn: r.lsn()?,
            commit_timestamp: r.i64()?,
            xid: r.u32()?,
            gid: r.cstr()?,
        }),
        tag::ROLLBACK_PREPARED => PgOutputMessage::RollbackPrepared(RollbackPrepared {
            flags: r.u8()?,
            prepare_end_lsn: r.lsn()?,
            rollback_end_lsn: r.lsn()?,
            prepare_timestamp: r.i64()?,
            rollback_timestamp: r.i64()?,
            xid: r.u32()?,
            gid: r.cstr()?,
        }),
        // classify() accepted only the tags matched above.
        _ => return Err(r.error_at(0, DecodeProblem::UnknownTag(tag))),
    };
    r.finish()?;
    Ok(message)
}

fn decode_relation(r: &mut Reader<'_>, xid: Option<u32>) -> Result<Relation, DecodeError> {
    let relation_id = r.u32()?;
    let namespace = r.cstr()?;
    let name = r.cstr()?;
    let at = r.offset();
    let identity_byte = r.u8()?;
    let replica_identity = ReplicaIdentity::from_char(identity_byte)
        .ok_or_else(|| r.error_at(at, DecodeProblem::UnknownReplicaIdentity(identity_byte)))?;
    let count = r.len_i16()?;
    // flags + name NUL + type OID + modifier: a column is at least 10 bytes.
    let mut columns = Vec::with_capacity(count.min(r.remaining() / 10));
    for _ in 0..count {
        columns.push(RelationColumn {
            flags: r.u8()?,
            name: r.cstr()?,
            type_oid: r.u32()?,
            type_modifier: r.i32()?,
        });
    }
    Ok(Relation {
        xid,
        relation_id,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

fn decode_prepare(r: &mut Reader<'_>) -> Result<Prepare, DecodeError> {
    Ok(Prepare {
        flags: r.u8()?,
        prepare_lsn: r.lsn()?,
        end_lsn: r.lsn()?,
        prepare_timestamp: r.i64()?,
        xid: r.u32()?,
        gid: r.cstr()?,
    })
}

/// Reads a tuple marker and returns it if it is one of `allowed`.
fn expect_marker(
    r: &mut Reader<'_>,
    allowed: &[u8],
    expected: &'static str,
) -> Result<u8, DecodeError> {
    let at = r.offset();
    let found = r.u8()?;
    if allowed.contains(&found) {
        Ok(found)
    } else {
        Err(r.error_at(at, DecodeProblem::UnexpectedTupleMarker { found, expected }))
    }
}

fn old_tuple<T>(marker: u8, tuple: T) -> OldTuple<T> {
    if marker == tag::OLD_FULL {
        OldTuple::Full(tuple)
    } else {
        OldTuple::Key(tuple)
    }
}
