//! The pgoutput logical replication messages (protocol versions 1–4): values, a decoder fed
//! one XLogData payload at a time, and an encoder producing the exact wire bytes.
//!
//! Layouts follow the "Logical Replication Message Formats" chapter of the PostgreSQL
//! documentation.

mod decode;
mod encode;
mod messages;
mod tuple;

#[cfg(test)]
mod fixture_tests;
#[cfg(test)]
mod proptests;

pub use decode::{DecoderOptions, PgOutputDecoder, ProtocolVersion};
pub use encode::encode;
pub use messages::{
    Begin, BeginPrepare, Commit, CommitPrepared, Delete, Insert, LogicalMessage, OldTuple, Origin,
    PgOutputMessage, Prepare, Relation, RelationColumn, ReplicaIdentity, RollbackPrepared,
    StreamAbort, StreamAbortInfo, StreamCommit, StreamStart, Truncate, Type, Update,
};
pub use tuple::{ColumnRef, ColumnValue, TupleColumns, TupleData, TupleRef};
