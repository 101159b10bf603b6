//! The values of pgoutput messages, one struct per message of the PostgreSQL documentation's
//! "Logical Replication Message Formats".
//!
//! Fields keep the wire's own representation (raw flags, raw timestamps, the empty namespace
//! that means `pg_catalog`) so that decoding and re-encoding is lossless; helper methods give
//! the interpretation. `xid: Option<u32>` on data messages is the transaction id pgoutput adds
//! inside a streamed transaction (between Stream Start and Stream Stop): `Some` exactly there.
//! It may be a subtransaction's xid, not the stream's.

use bytes::Bytes;
use cdc_core::Lsn;

use super::tuple::TupleData;
use crate::protocol::error::MessageKind;

/// Message tags (the first byte of each message).
pub(crate) mod tag {
    pub const BEGIN: u8 = b'B';
    pub const COMMIT: u8 = b'C';
    pub const ORIGIN: u8 = b'O';
    pub const RELATION: u8 = b'R';
    pub const TYPE: u8 = b'Y';
    pub const INSERT: u8 = b'I';
    pub const UPDATE: u8 = b'U';
    pub const DELETE: u8 = b'D';
    pub const TRUNCATE: u8 = b'T';
    pub const MESSAGE: u8 = b'M';
    pub const STREAM_START: u8 = b'S';
    pub const STREAM_STOP: u8 = b'E';
    pub const STREAM_COMMIT: u8 = b'c';
    pub const STREAM_ABORT: u8 = b'A';
    pub const BEGIN_PREPARE: u8 = b'b';
    pub const PREPARE: u8 = b'P';
    pub const COMMIT_PREPARED: u8 = b'K';
    pub const ROLLBACK_PREPARED: u8 = b'r';
    pub const STREAM_PREPARE: u8 = b'p';

    /// Tuple markers inside Insert, Update and Delete.
    pub const NEW_TUPLE: u8 = b'N';
    pub const OLD_KEY: u8 = b'K';
    pub const OLD_FULL: u8 = b'O';
}

/// Start of a (non-streamed) transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// The final LSN of the transaction (its commit record).
    pub final_lsn: Lsn,
    /// Commit timestamp (microseconds since 2000-01-01).
    pub commit_timestamp: i64,
    /// The transaction's xid.
    pub xid: u32,
}

/// End of a (non-streamed) transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// Currently always 0; kept raw so an unknown future flag is visible, not dropped.
    pub flags: u8,
    /// The LSN of the commit record.
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction: the position to confirm once it is processed.
    pub end_lsn: Lsn,
    /// Commit timestamp (microseconds since 2000-01-01).
    pub commit_timestamp: i64,
}

/// The replication origin a transaction came from (sent after Begin, or after Stream Start).
/// Carries no xid even inside a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The LSN of the commit on the origin server.
    pub commit_lsn: Lsn,
    /// The origin's name.
    pub name: String,
}

/// A Relation's `REPLICA IDENTITY` setting (the model's type; the wire byte is
/// [`ReplicaIdentity::as_char`]).
pub use cdc_core::ReplicaIdentity;

/// One column of a Relation message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Column flags; bit 0 marks a replica identity (key) column. See [`Self::is_key`].
    pub flags: u8,
    /// Column name.
    pub name: String,
    /// The column type's OID.
    pub type_oid: u32,
    /// The type modifier (`atttypmod`), -1 when the type has none.
    pub type_modifier: i32,
}

impl RelationColumn {
    /// Flag bit: the column is part of the replica identity.
    pub const FLAG_KEY: u8 = 1;

    /// Whether the column is part of the replica identity (the key an old-key tuple carries).
    pub const fn is_key(&self) -> bool {
        self.flags & Self::FLAG_KEY != 0
    }
}

/// The shape of a table, sent before the first change to it in a session and again whenever
/// it may have changed. Columns are in the order tuples carry them (dropped and generated
/// columns are absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// The relation's OID, which Insert/Update/Delete/Truncate refer to.
    pub relation_id: u32,
    /// Schema name; empty means `pg_catalog` (see [`Self::schema`]).
    pub namespace: String,
    /// Table name.
    pub name: String,
    /// The table's replica identity setting.
    pub replica_identity: ReplicaIdentity,
    /// The published columns.
    pub columns: Vec<RelationColumn>,
}

impl Relation {
    /// The schema name, with the wire's empty string resolved to `pg_catalog`.
    pub fn schema(&self) -> &str {
        if self.namespace.is_empty() {
            "pg_catalog"
        } else {
            &self.namespace
        }
    }
}

/// The name of a data type a following Relation uses (sent for non-built-in types).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Type {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// The type's OID.
    pub type_oid: u32,
    /// Schema name; empty means `pg_catalog` (see [`Self::schema`]).
    pub namespace: String,
    /// Type name.
    pub name: String,
}

impl Type {
    /// The schema name, with the wire's empty string resolved to `pg_catalog`.
    pub fn schema(&self) -> &str {
        if self.namespace.is_empty() {
            "pg_catalog"
        } else {
            &self.namespace
        }
    }
}

/// A row inserted into a relation.
#[derive(Debug, Clone, PartialEq, Eq)]
///
/// `T` is how the row is held: [`TupleData`] (owned, the default) or
/// [`super::TupleRef`] (borrowed from the message, see
/// [`super::PgOutputDecoder::decode_borrowed`]).
pub struct Insert<T = TupleData> {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// The Relation this row belongs to.
    pub relation_id: u32,
    /// The new row.
    pub new: T,
}

/// The old row an Update or Delete carries, as the table's replica identity decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple<T = TupleData> {
    /// `K`: only the key columns have values; the others are null in the tuple.
    Key(T),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Full(T),
}

impl<T> OldTuple<T> {
    /// The tuple, whichever kind it is.
    pub fn tuple(&self) -> &T {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }
}

/// A row updated in a relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<T = TupleData> {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// The Relation this row belongs to.
    pub relation_id: u32,
    /// The old key or row: absent when the key did not change and identity is not FULL.
    pub old: Option<OldTuple<T>>,
    /// The new row; unchanged TOASTed values appear as `ColumnValue::UnchangedToast`.
    pub new: T,
}

/// A row deleted from a relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete<T = TupleData> {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// The Relation this row belongs to.
    pub relation_id: u32,
    /// The old key or row.
    pub old: OldTuple<T>,
}

/// One `TRUNCATE` statement over one or more relations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// Option bits: [`Self::CASCADE`], [`Self::RESTART_IDENTITY`].
    pub options: u8,
    /// The truncated relations.
    pub relation_ids: Vec<u32>,
}

impl Truncate {
    /// Option bit for `CASCADE`.
    pub const CASCADE: u8 = 1;
    /// Option bit for `RESTART IDENTITY`.
    pub const RESTART_IDENTITY: u8 = 2;

    /// Whether the statement said `CASCADE`.
    pub const fn cascade(&self) -> bool {
        self.options & Self::CASCADE != 0
    }

    /// Whether the statement said `RESTART IDENTITY`.
    pub const fn restart_identity(&self) -> bool {
        self.options & Self::RESTART_IDENTITY != 0
    }
}

/// A logical decoding message (`pg_logical_emit_message`), sent when the `messages` option is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalMessage {
    /// Stream xid (see module docs).
    pub xid: Option<u32>,
    /// Flag bits; [`Self::TRANSACTIONAL`] is the only one defined.
    pub flags: u8,
    /// The LSN of the message.
    pub lsn: Lsn,
    /// The prefix the emitter chose.
    pub prefix: String,
    /// The content, as a zero-copy slice of the payload.
    pub content: Bytes,
}

impl LogicalMessage {
    /// Flag bit: the message belongs to the surrounding transaction (else it was emitted
    /// immediately, outside any Begin/Commit).
    pub const TRANSACTIONAL: u8 = 1;

    /// Whether the message is transactional.
    pub const fn is_transactional(&self) -> bool {
        self.flags & Self::TRANSACTIONAL != 0
    }
}

/// Start of one segment of a streamed in-progress transaction (protocol v2+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStart {
    /// The streamed transaction's xid.
    pub xid: u32,
    /// Whether this is the transaction's first segment.
    pub first_segment: bool,
}

/// Commit of a streamed transaction (protocol v2+), sent outside any stream segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCommit {
    /// The streamed transaction's xid.
    pub xid: u32,
    /// Currently always 0; kept raw.
    pub flags: u8,
    /// The LSN of the commit record.
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction: the position to confirm once it is processed.
    pub end_lsn: Lsn,
    /// Commit timestamp (microseconds since 2000-01-01).
    pub commit_timestamp: i64,
}

/// Abort position and time, sent in Stream Abort only with protocol v4 and
/// `streaming = parallel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAbortInfo {
    /// The LSN of the abort.
    pub abort_lsn: Lsn,
    /// Abort timestamp (microseconds since 2000-01-01).
    pub abort_timestamp: i64,
}

/// Abort of a streamed transaction or of one of its subtransactions (protocol v2+), sent
/// outside any stream segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamAbort {
    /// The streamed (top-level) transaction's xid.
    pub xid: u32,
    /// The aborted subtransaction's xid; equal to `xid` when the whole transaction aborted.
    pub subxid: u32,
    /// Present exactly when the decoder runs protocol v4 with parallel streaming.
    pub abort: Option<StreamAbortInfo>,
}

impl StreamAbort {
    /// Whether the whole transaction aborted (rather than one subtransaction).
    pub const fn is_top_level(&self) -> bool {
        self.xid == self.subxid
    }
}

/// Start of a prepared transaction's changes (protocol v3+, two-phase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginPrepare {
    /// The LSN of the prepare.
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare timestamp (microseconds since 2000-01-01).
    pub prepare_timestamp: i64,
    /// The transaction's xid.
    pub xid: u32,
    /// The user-chosen global transaction identifier.
    pub gid: String,
}

/// `PREPARE TRANSACTION` (tag `P`), or for a streamed transaction Stream Prepare (tag `p`);
/// both have this layout (protocol v3+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare {
    /// Currently always 0; kept raw.
    pub flags: u8,
    /// The LSN of the prepare.
    pub prepare_lsn: Lsn,
    /// The end LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare timestamp (microseconds since 2000-01-01).
    pub prepare_timestamp: i64,
    /// The transaction's xid.
    pub xid: u32,
    /// The global transaction identifier.
    pub gid: String,
}

/// `COMMIT PREPARED` (protocol v3+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPrepared {
    /// Currently always 0; kept raw.
    pub flags: u8,
    /// The LSN of the commit.
    pub commit_lsn: Lsn,
    /// The end LSN of the commit prepared transaction.
    pub end_lsn: Lsn,
    /// Commit timestamp (microseconds since 2000-01-01).
    pub commit_timestamp: i64,
    /// The transaction's xid.
    pub xid: u32,
    /// The global transaction identifier.
    pub gid: String,
}

/// `ROLLBACK PREPARED` (protocol v3+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPrepared {
    /// Currently always 0; kept raw.
    pub flags: u8,
    /// The end LSN of the prepared transaction.
    pub prepare_end_lsn: Lsn,
    /// The end LSN of the rollback prepared transaction.
    pub rollback_end_lsn: Lsn,
    /// Prepare timestamp (microseconds since 2000-01-01).
    pub prepare_timestamp: i64,
    /// Rollback timestamp (microseconds since 2000-01-01).
    pub rollback_timestamp: i64,
    /// The transaction's xid.
    pub xid: u32,
    /// The global transaction identifier.
    pub gid: String,
}

/// One pgoutput message: the payload of one XLogData.
///
/// `T` is how rows are held: [`TupleData`] (owned, the default, what
/// [`super::PgOutputDecoder::decode`] returns and [`super::encode`] takes) or
/// [`super::TupleRef`] (borrowed from the payload, from
/// [`super::PgOutputDecoder::decode_borrowed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgOutputMessage<T = TupleData> {
    /// `B`.
    Begin(Begin),
    /// `C`.
    Commit(Commit),
    /// `O`.
    Origin(Origin),
    /// `R`.
    Relation(Relation),
    /// `Y`.
    Type(Type),
    /// `I`.
    Insert(Insert<T>),
    /// `U`.
    Update(Update<T>),
    /// `D`.
    Delete(Delete<T>),
    /// `T`.
    Truncate(Truncate),
    /// `M`.
    Message(LogicalMessage),
    /// `S` (v2+).
    StreamStart(StreamStart),
    /// `E` (v2+).
    StreamStop,
    /// `c` (v2+).
    StreamCommit(StreamCommit),
    /// `A` (v2+).
    StreamAbort(StreamAbort),
    /// `b` (v3+).
    BeginPrepare(BeginPrepare),
    /// `P` (v3+).
    Prepare(Prepare),
    /// `K` (v3+).
    CommitPrepared(CommitPrepared),
    /// `r` (v3+).
    RollbackPrepared(RollbackPrepared),
    /// `p` (v3+).
    StreamPrepare(Prepare),
}

impl<T> PgOutputMessage<T> {
    /// Which message this is, as named in errors.
    pub const fn kind(&self) -> MessageKind {
        match self {
            PgOutputMessage::Begin(_) => MessageKind::Begin,
            PgOutputMessage::Commit(_) => MessageKind::Commit,
            PgOutputMessage::Origin(_) => MessageKind::Origin,
            PgOutputMessage::Relation(_) => MessageKind::Relation,
            PgOutputMessage::Type(_) => MessageKind::Type,
            PgOutputMessage::Insert(_) => MessageKind::Insert,
            PgOutputMessage::Update(_) => MessageKind::Update,
            PgOutputMessage::Delete(_) => MessageKind::Delete,
            PgOutputMessage::Truncate(_) => MessageKind::Truncate,
            PgOutputMessage::Message(_) => MessageKind::Message,
            PgOutputMessage::StreamStart(_) => MessageKind::StreamStart,
            PgOutputMessage::StreamStop => MessageKind::StreamStop,
            PgOutputMessage::StreamCommit(_) => MessageKind::StreamCommit,
            PgOutputMessage::StreamAbort(_) => MessageKind::StreamAbort,
            PgOutputMessage::BeginPrepare(_) => MessageKind::BeginPrepare,
            PgOutputMessage::Prepare(_) => MessageKind::Prepare,
            PgOutputMessage::CommitPrepared(_) => MessageKind::CommitPrepared,
            PgOutputMessage::RollbackPrepared(_) => MessageKind::RollbackPrepared,
            PgOutputMessage::StreamPrepare(_) => MessageKind::StreamPrepare,
        }
    }
}
