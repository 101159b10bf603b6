//! Database-agnostic change data capture model for pgcdc, and the pipeline that drives a
//! source into a sink.
//!
//! # Embedding
//!
//! An engine implements [`Sink`] — `open` hands back the [`ResumeToken`] it stored,
//! `write` applies a batch, `checkpoint` makes everything written durable together with
//! the token (or reports it later through the [`Acknowledger`]) — and runs a [`Pipeline`]
//! from a source (`cdc_postgres::source::PgSource`) into it. The pipeline confirms to the
//! source only what the sink acknowledged, so a crash loses and duplicates nothing when the
//! sink keeps that contract; the `conformance` kit (feature `conformance`) proves it from
//! the engine's own tests. The user guide's library page (`docs/library.md` in the
//! repository) walks through it.
//!
//! The model is the language every pgcdc crate speaks: positions ([`Lsn`], [`Position`]),
//! table names and schemas, column values ([`Value`]), change events and batches, the
//! [`ResumeToken`] a sink stores, and the [`Error`] type whose kinds say what to do. It is
//! plain data and must never depend on an async runtime, I/O or a particular database, so
//! that pure protocol code (cdc-pgoutput) can use it alone.
//!
//! With the default feature `runtime`, the crate also holds the async [`Sink`] and
//! [`Source`] traits and the [`Pipeline`] that drives one into the other (tokio). Build
//! with `default-features = false` for the model alone.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
pub mod event;
pub mod lsn;
#[cfg(feature = "runtime")]
pub mod pipeline;
pub mod row_block;
pub mod schema;
#[cfg(feature = "runtime")]
pub mod sink;
#[cfg(feature = "runtime")]
pub mod source;
pub mod table_name;
pub mod token;
pub mod value;

pub use error::{BoxError, Error, ErrorKind, Result, ServerError};
pub use event::{
    ChangeBatch, ChangeEvent, EventKind, OldRow, OldRowKind, Row, SnapshotMarker, TxBegin, TxCommit,
};
pub use lsn::{Lsn, ParseLsnError, Position};
#[cfg(feature = "runtime")]
pub use pipeline::{
    ChangeOp, CheckpointStats, OpCounts, Pipeline, PipelineConfig, PipelineStats, RunEnd,
    RunSummary, ShutdownHandle, StatsSnapshot, TableCounts, TableSnapshotProgress,
};
pub use row_block::{FieldDecoder, FieldLayout, FieldSpan, RowBlock};
pub use schema::{
    ColumnSchema, ColumnType, ReplicaIdentity, SchemaRef, TableSchema, TypeDefinition,
};
#[cfg(feature = "runtime")]
pub use sink::{Ack, AckEvent, Acknowledger, BatchId, BatchLimits, CommitMode, Sink, SinkBatch};
#[cfg(feature = "runtime")]
pub use source::{ConfirmHandle, Source};
pub use table_name::{TableName, TableNameError, quote_identifier};
pub use token::{
    BackfillProgress, BackfillWindow, OLDEST_READABLE_TOKEN_VERSION, RESUME_TOKEN_VERSION,
    ResumeToken, SnapshotProgress, SourceIdentity, TableBackfill,
};
pub use value::{Array, ArrayDim, Numeric, OtherRepr, OtherValue, Text, TypeOid, Value};
