//! Sans-IO protocol code: bytes in, values out, and values back to bytes.
//!
//! - [`replication`]: the CopyData sub-protocol of `START_REPLICATION` (XLogData, keepalives,
//!   standby status updates, hot standby feedback).
//! - [`pgoutput`]: the logical replication messages inside XLogData.
//! - [`status_schedule`]: when standby status updates are due and what they report, with
//!   the current time passed in.
//! - [`receive_deadline`]: when a silent server is probed and when it is presumed dead,
//!   likewise.
//!
//! Nothing here does I/O, awaits, or keeps a clock; decoders never panic on any input and
//! report malformed bytes as a [`DecodeError`] naming message, offset and problem.

mod bytes_view;
pub mod error;
pub mod pgoutput;
mod reader;
pub mod receive_deadline;
pub mod replication;
pub mod status_schedule;
pub mod timestamp;
mod writer;

pub use bytes_view::{ByteBlocks, BytesView};
pub use error::{DecodeError, DecodeProblem, EncodeError, MessageKind};
pub use receive_deadline::{ReceiveDeadline, effective_receive_timeout};
pub use status_schedule::{StatusConfig, StatusReport, StatusSchedule, effective_status_interval};
