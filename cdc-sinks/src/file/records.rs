//! The records the file sink writes: Feldera JSON (into each table's frame, or the
//! multiplexed one), or Debezium records (one line each, in stream order, into the
//! multiplexed file). Debezium's encoder keeps state from event to event (the
//! transaction in progress, where the snapshot stands); it is saved with each checkpoint
//! and restored at reopen, so records after a restart are those an uninterrupted run
//! writes.

use cdc_core::{ChangeEvent, Error, TableName};

use crate::debezium::{DebeziumEncoder, DebeziumState};
use crate::feldera::{FelderaEncoder, FrameSet, PolicyLog};

use super::options::FileSinkOptions;

/// The encoder of one open file sink.
#[derive(Debug)]
pub(crate) enum Records {
    Feldera(FelderaEncoder),
    Debezium {
        encoder: Box<DebeziumEncoder>,
        /// One event's records before they go into the frame.
        scratch: Vec<u8>,
    },
}

/// The multiplexed file's frame takes every table's records.
fn any_table() -> TableName {
    TableName::new("", "")
}

impl Records {
    /// The encoder `options` ask for; a Debezium one continues from `state` (a
    /// checkpoint's).
    pub(crate) fn new(
        options: &FileSinkOptions,
        log: PolicyLog,
        state: Option<DebeziumState>,
    ) -> Self {
        match &options.debezium {
            None => Records::Feldera(FelderaEncoder::with_policy_log(options.encoder, log)),
            Some(debezium) => {
                let mut encoder = DebeziumEncoder::new(debezium.clone());
                if let Some(state) = state {
                    encoder.restore(state);
                }
                Records::Debezium {
                    encoder: Box::new(encoder),
                    scratch: Vec::new(),
                }
            }
        }
    }

    /// The state a fresh directory's checkpoint records for `options`.
    pub(crate) fn initial_state(options: &FileSinkOptions) -> Option<DebeziumState> {
        options
            .debezium
            .as_ref()
            .map(|d| DebeziumEncoder::new(d.clone()).state())
    }

    /// Encodes `event` into `outputs`.
    pub(crate) fn encode(
        &mut self,
        event: &ChangeEvent,
        outputs: &mut impl FrameSet,
    ) -> Result<(), Error> {
        match self {
            Records::Feldera(encoder) => encoder.encode_event(event, outputs),
            Records::Debezium { encoder, scratch } => {
                scratch.clear();
                encoder.encode(event, scratch)?;
                append(outputs, scratch)
            }
        }
    }

    /// Lets a Debezium encoder see a snapshot marker the sink acts on itself (its start,
    /// restart and completion change how rows are labelled).
    pub(crate) fn marker(
        &mut self,
        event: &ChangeEvent,
        outputs: &mut impl FrameSet,
    ) -> Result<(), Error> {
        match self {
            Records::Feldera(_) => Ok(()),
            Records::Debezium { .. } => self.encode(event, outputs),
        }
    }

    /// The end of a batch: every record is decided now (the checkpoint that may follow
    /// covers the whole batch).
    pub(crate) fn end_batch(&mut self, outputs: &mut impl FrameSet) -> Result<(), Error> {
        match self {
            Records::Feldera(_) => Ok(()),
            Records::Debezium { encoder, scratch } => {
                scratch.clear();
                encoder.end_of_durable_batch(scratch);
                append(outputs, scratch)
            }
        }
    }

    /// What a checkpoint records of the encoder.
    pub(crate) fn state(&self) -> Option<DebeziumState> {
        match self {
            Records::Feldera(_) => None,
            Records::Debezium { encoder, .. } => Some(encoder.state()),
        }
    }
}

fn append(outputs: &mut impl FrameSet, lines: &[u8]) -> Result<(), Error> {
    if !lines.is_empty() {
        outputs.frame(&any_table())?.append_lines(lines);
    }
    Ok(())
}
