//! Errors of the protocol layer: what went wrong, in which message, at which byte.

/// Which protocol message a [`DecodeError`] is about.
///
/// `PgOutput` and `Replication` stand for "a message of that protocol whose tag was not
/// (yet) recognised": an empty payload or an unknown tag byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageKind {
    /// A pgoutput message whose tag is unknown or missing.
    PgOutput,
    /// pgoutput `B`.
    Begin,
    /// pgoutput `C`.
    Commit,
    /// pgoutput `O`.
    Origin,
    /// pgoutput `R`.
    Relation,
    /// pgoutput `Y`.
    Type,
    /// pgoutput `I`.
    Insert,
    /// pgoutput `U`.
    Update,
    /// pgoutput `D`.
    Delete,
    /// pgoutput `T`.
    Truncate,
    /// pgoutput `M`.
    Message,
    /// pgoutput `S`.
    StreamStart,
    /// pgoutput `E`.
    StreamStop,
    /// pgoutput `c`.
    StreamCommit,
    /// pgoutput `A`.
    StreamAbort,
    /// pgoutput `b`.
    BeginPrepare,
    /// pgoutput `P`.
    Prepare,
    /// pgoutput `K`.
    CommitPrepared,
    /// pgoutput `r`.
    RollbackPrepared,
    /// pgoutput `p`.
    StreamPrepare,
    /// A replication CopyData message whose tag is unknown or missing.
    Replication,
    /// Replication `w`.
    XLogData,
    /// Replication `k`.
    PrimaryKeepalive,
    /// Replication `r`.
    StandbyStatusUpdate,
    /// Replication `h`.
    HotStandbyFeedback,
}

impl MessageKind {
    /// The message's name as the PostgreSQL documentation spells it.
    pub const fn name(self) -> &'static str {
        match self {
            MessageKind::PgOutput => "pgoutput",
            MessageKind::Begin => "Begin",
            MessageKind::Commit => "Commit",
            MessageKind::Origin => "Origin",
            MessageKind::Relation => "Relation",
            MessageKind::Type => "Type",
            MessageKind::Insert => "Insert",
            MessageKind::Update => "Update",
            MessageKind::Delete => "Delete",
            MessageKind::Truncate => "Truncate",
            MessageKind::Message => "Message",
            MessageKind::StreamStart => "Stream Start",
            MessageKind::StreamStop => "Stream Stop",
            MessageKind::StreamCommit => "Stream Commit",
            MessageKind::StreamAbort => "Stream Abort",
            MessageKind::BeginPrepare => "Begin Prepare",
            MessageKind::Prepare => "Prepare",
            MessageKind::CommitPrepared => "Commit Prepared",
            MessageKind::RollbackPrepared => "Rollback Prepared",
            MessageKind::StreamPrepare => "Stream Prepare",
            MessageKind::Replication => "replication CopyData",
            MessageKind::XLogData => "XLogData",
            MessageKind::PrimaryKeepalive => "primary keepalive",
            MessageKind::StandbyStatusUpdate => "standby status update",
            MessageKind::HotStandbyFeedback => "hot standby feedback",
        }
    }
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What was wrong with the bytes (or with their place in the message sequence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeProblem {
    /// The message ended before a field was complete.
    #[error("truncated: needed {needed} bytes, {available} available")]
    Truncated {
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the message.
        available: usize,
    },
    /// A NUL-terminated string has no terminating NUL before the end of the message.
    #[error("string is not NUL-terminated before the end of the message")]
    UnterminatedString,
    /// The first byte is not the tag of any message this layer knows.
    #[error("unknown message tag {:?}", char::from(*.0))]
    UnknownTag(u8),
    /// A tuple column is not `n`, `u`, `t` or `b`.
    #[error("unknown tuple column kind {:?}", char::from(*.0))]
    UnknownColumnKind(u8),
    /// A tuple marker (`N`, `K`, `O`) other than the ones allowed here.
    #[error("unexpected tuple marker {:?}, expected {expected}", char::from(*.found))]
    UnexpectedTupleMarker {
        /// The byte found.
        found: u8,
        /// The markers allowed at this point, for the message.
        expected: &'static str,
    },
    /// A Relation's replica identity is not `d`, `n`, `f` or `i`.
    #[error("unknown replica identity {:?}", char::from(*.0))]
    UnknownReplicaIdentity(u8),
    /// A boolean byte that is neither 0 nor 1.
    #[error("field {field} must be 0 or 1, found {value}")]
    InvalidBoolean {
        /// The field's name.
        field: &'static str,
        /// The byte found.
        value: u8,
    },
    /// A string is not valid UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// A length or count field is negative.
    #[error("negative length or count {0}")]
    NegativeLength(i32),
    /// The message is complete but bytes are left over.
    #[error("{0} trailing bytes after a complete message")]
    TrailingBytes(usize),
    /// A message that only exists inside a stream (Stream Stop) arrived outside one.
    #[error("only valid between Stream Start and Stream Stop, but no stream is open")]
    OutsideStream,
    /// A message that must not appear inside a stream (Stream Start, a transaction boundary)
    /// arrived between Stream Start and Stream Stop.
    #[error("not valid inside the open stream of transaction {stream_xid}")]
    InsideStream {
        /// The xid of the stream that is open.
        stream_xid: u32,
    },
    /// The message needs a newer protocol version than the one negotiated.
    #[error("needs protocol version {required}, but version {negotiated} was negotiated")]
    UnsupportedByProtocolVersion {
        /// The first protocol version that has this message.
        required: u32,
        /// The version the decoder was configured with.
        negotiated: u32,
    },
}

/// A message could not be decoded: which message, at which byte offset of the payload handed
/// to the decoder, and what was wrong.
///
/// A decoder that returns this error has not changed its state; the caller decides whether the
/// stream is still usable (normally it is not: the connection should be dropped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {message} message at byte {offset}: {problem}")]
pub struct DecodeError {
    /// The message being decoded.
    pub message: MessageKind,
    /// Byte offset, from the start of the payload, of the field that was wrong.
    pub offset: usize,
    /// What was wrong.
    pub problem: DecodeProblem,
}

/// A message value cannot be represented on the wire. Encoders leave their output buffer as it
/// was before the call when they return this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A string field contains a NUL byte, which a NUL-terminated protocol string cannot carry.
    #[error("{field} contains a NUL byte, which a protocol string cannot carry")]
    NulInString {
        /// The field's name.
        field: &'static str,
    },
    /// A length or count is larger than its wire field can hold.
    #[error("{field} is {len}, larger than the protocol's limit of {max}")]
    TooLarge {
        /// The field's name.
        field: &'static str,
        /// The length or count the value has.
        len: usize,
        /// The largest the wire format allows.
        max: usize,
    },
}
