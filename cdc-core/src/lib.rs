//! Database-agnostic change data capture model for pgcdc.
//!
//! The types every pgcdc crate speaks: positions ([`Lsn`], [`Position`]), table names and
//! schemas, column values ([`Value`]), change events and batches, the [`ResumeToken`] a
//! sink stores, the [`Sink`] and [`Source`] traits, and the [`Error`] type whose kinds say
//! what to do.

pub mod error;
pub mod event;
pub mod lsn;
pub mod pipeline;
pub mod schema;
pub mod sink;
pub mod source;
pub mod table_name;
pub mod token;
pub mod value;

pub use error::{BoxError, Error, ErrorKind, Result, ServerError};
pub use event::{
    ChangeBatch, ChangeEvent, EventKind, OldRow, OldRowKind, Row, SnapshotMarker, TxBegin, TxCommit,
};
pub use lsn::{Lsn, ParseLsnError, Position};
pub use pipeline::{
    Pipeline, PipelineConfig, PipelineStats, RunEnd, RunSummary, ShutdownHandle, StatsSnapshot,
};
pub use schema::{ColumnSchema, ColumnType, ReplicaIdentity, SchemaRef, TableSchema};
pub use sink::{Ack, AckEvent, Acknowledger, BatchId, BatchLimits, CommitMode, Sink, SinkBatch};
pub use source::{ConfirmHandle, Source};
pub use table_name::{TableName, TableNameError, quote_identifier};
pub use token::{RESUME_TOKEN_VERSION, ResumeToken, SnapshotProgress, SourceIdentity};
pub use value::{Array, ArrayDim, Numeric, OtherRepr, OtherValue, Text, TypeOid, Value};
