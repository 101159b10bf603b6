//! NATS JetStream output (feature `jetstream`): [`JetStreamSink`] publishes every change
//! to a stream, as Feldera JSON (or Debezium records, [`JetStreamOptions::debezium`]) on
//! a subject per table, exactly once across crashes of pgcdc and losses of NATS servers.
//!
//! # How exactly-once works
//!
//! - One message per change (or, with [`Grouping::Transaction`], per run of one table's
//!   changes in a transaction) on a subject per table ([`SubjectTemplate`]), payload
//!   Feldera JSON envelopes one per line (Feldera's NATS input connector parses every JSON
//!   value of a message, so several lines are several records).
//! - Every publish carries `Nats-Expected-Last-Sequence`: the stream's sequence the
//!   message must follow. The server checks it when it stores the message, in order (also
//!   on an R3 stream, nats-server 2.9), so publishes can be pipelined and the stream stays
//!   an exact prefix of the change sequence: a lost message makes every later one fail,
//!   never leaves a gap a consumer could read past. The stream must therefore be
//!   pgcdc's alone. `Nats-Msg-Id` (source and position) is kept as a second guard.
//! - The last message of every written batch carries the batch's resume token
//!   (`Pgcdc-Token`); every message says where the latest token before it is
//!   (`Pgcdc-Token-Seq`). At open the sink reads the stream's last message: the token at or
//!   before it resumes the source, and events up to the message's position are skipped on
//!   replay (they are deterministic WAL events: an online snapshot chunk is always one
//!   message, the last of its batch, so it is in the stream with its token or not at all).
//!   Checkpoints wait for the acks and also store the token in a KV entry, so idle
//!   progress (batches without messages) is durable too.
//! - A consistent-mode snapshot restart cannot be honoured (published rows cannot be
//!   withdrawn): it is an error naming the way out.

pub mod headers;

mod connection;
mod options;
mod plan;
mod plan_debezium;
mod planners;
mod recovery;
mod setup;
mod sink;
mod subject;

pub use options::{DEFAULT_RESUME_BUCKET, JetStreamOptions, NatsAuth, NatsTls, StreamSettings};
pub use plan::Grouping;
pub use sink::{JetStreamSink, JetStreamStats};
pub use subject::{DEFAULT_SUBJECT_TEMPLATE, SubjectTemplate, filter_covers};

#[cfg(test)]
mod plan_debezium_tests;
#[cfg(test)]
mod plan_tests;
