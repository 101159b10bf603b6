//! Where each record lies in the encoder's output, for outputs that send records apart
//! (JetStream: a record's value is a message of its own, on its table's subject).

use std::ops::Range;

use cdc_core::{Position, TableName};

use super::DebeziumEncoder;

/// One record written by [`DebeziumEncoder`], located in the output buffer it was
/// written to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSpan {
    /// The record's line (`{"key":…,"value":…,"destination":…}` and its newline).
    pub line: Range<usize>,
    /// Its value document within the buffer: the envelope (with its schema when
    /// `schemas`), a transaction record's value, or `null` for a tombstone.
    pub value: Range<usize>,
    /// Its table; `None` for a transaction metadata record (`<name>.transaction`).
    pub table: Option<TableName>,
    /// The event it was written for. A snapshot row's record is written when what
    /// follows decides its label: its position is its own event's, which may come
    /// before the event being encoded.
    pub position: Position,
    /// A snapshot read (`op: "r"`).
    pub snapshot_read: bool,
}

impl RecordSpan {
    /// A tombstone: the key with a null value.
    pub fn is_tombstone(&self, out: &[u8]) -> bool {
        out.get(self.value.clone()) == Some(b"null".as_slice())
    }
}

impl DebeziumEncoder {
    /// From now on, records where each record lies ([`Self::take_record_spans`]).
    pub fn track_records(&mut self) {
        self.spans.get_or_insert_with(Vec::new);
    }

    /// The records written since the last call, in order, located in the buffers they
    /// were written to (empty unless [`Self::track_records`] was called).
    pub fn take_record_spans(&mut self, into: &mut Vec<RecordSpan>) {
        if let Some(spans) = self.spans.as_mut() {
            into.append(spans);
        }
    }

    /// Notes a record just written, when tracking.
    pub(super) fn record_written(
        &mut self,
        line: Range<usize>,
        value: Range<usize>,
        table: Option<&TableName>,
        position: Position,
        snapshot_read: bool,
    ) {
        if let Some(spans) = self.spans.as_mut() {
            spans.push(RecordSpan {
                line,
                value,
                table: table.cloned(),
                position,
                snapshot_read,
            });
        }
    }

    /// Drops the notes of records written from `count` on (an event that failed).
    pub(super) fn forget_records_from(&mut self, count: usize) {
        if let Some(spans) = self.spans.as_mut() {
            spans.truncate(count);
        }
    }

    /// How many records are noted.
    pub(super) fn records_noted(&self) -> usize {
        self.spans.as_ref().map_or(0, Vec::len)
    }
}
