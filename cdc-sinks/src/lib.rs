//! Sinks for pgcdc: where change events go, behind [`cdc_core::Sink`].
//!
//! A sink knows the model (`cdc-core`) and its own output, and must never depend on a
//! particular source database or its protocol crates (`cdc-pgoutput`, `cdc-postgres`).
//!
//! - [`debezium`]: Debezium's PostgreSQL change-event format (records of key, envelope and
//!   destination), for Debezium's consumers;
//! - [`feldera`]: Feldera-style JSON (`format=json`, `update_format=insert_delete`) — the
//!   encoder, its policies, and a stream sink to any writer;
//! - [`file`](mod@file): durable Feldera JSON files with exactly-once effect across crashes;
//! - [`stdout`]: human-readable or JSON lines for demos and debugging;
//! - `jetstream` (feature `jetstream`): NATS JetStream, exactly once, for fan-out to many
//!   consumers;
//! - [`memory`]: materialized in-memory tables with a change log, for tests.
//!
//! Every sink implements [`cdc_core::Sink`].

#![warn(missing_docs)]

pub mod debezium;
pub mod feldera;
pub mod file;
#[cfg(feature = "jetstream")]
pub mod jetstream;
pub mod memory;
pub mod stdout;

mod json;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use debezium::{DebeziumEncoder, DebeziumOptions};

/// The error for an event kind this version of the sinks does not know (`EventKind` is
/// `#[non_exhaustive]`: a later cdc-core may add kinds). Refused, never skipped: the
/// event may carry rows.
pub(crate) fn unknown_event(event: &cdc_core::ChangeEvent) -> cdc_core::Error {
    cdc_core::Error::rejected(format!(
        "the event at {} is of a kind this version of cdc-sinks does not know; use the cdc-sinks release that matches cdc-core",
        event.position
    ))
}
pub use feldera::{EncoderOptions, FelderaEncoder, FelderaStreamSink, Framing, Policies};
pub use file::{FelderaFileSink, FileLayout, FileSinkOptions};
pub use memory::{MemoryHandle, MemorySink, MemorySinkOptions};
pub use stdout::{StdoutFormat, StdoutSink};
