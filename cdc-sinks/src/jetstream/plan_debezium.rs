//! Sans-IO: a batch of change events → JetStream messages holding Debezium records, as
//! Debezium Server's NATS JetStream sink publishes them: each record's value (the change
//! event envelope) as a message of its own, on its table's subject; tombstones are not
//! published. An online snapshot chunk's records are one message, a record per line
//! (all or nothing, as with Feldera JSON). Transaction metadata records go to the subject
//! of the table `<name>.transaction` (the destination Debezium gives them).
//!
//! The encoder keeps state from event to event (the transaction in progress, where the
//! snapshot stands): the message carrying a batch's token carries that state
//! (`Pgcdc-Debezium-State`), and so does the resume entry. After a restart the encoder
//! continues from the state at the token, sees the replayed events again, and the
//! records already in the stream — by event position and record number (`Pgcdc-Part`)
//! — are not published again.

use std::collections::HashMap;

use cdc_core::{ChangeEvent, Error, EventKind, Position, ResumeToken, SnapshotMarker, TableName};
use serde::{Deserialize, Serialize};

use super::headers as h;
use super::plan::{
    Origin, OutMessage, Source, TableNames, Tx, check_sizes, common_headers, inside_chunk,
    restarted, tx_headers,
};
use super::subject::SubjectTemplate;
use crate::debezium::{DebeziumEncoder, DebeziumOptions, DebeziumState, RecordSpan};

/// What a restart needs of the planner: the encoder's state and the transaction in
/// progress (its headers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DebeziumPlanState {
    encoder: DebeziumState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tx: Option<Tx>,
}

/// The records of one event already in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Events before this are in the stream whole.
    pub(crate) position: Position,
    /// Of the event at `position`, records up to this number (`None`: all).
    pub(crate) part: Option<u32>,
}

impl Applied {
    fn covers(&self, position: Position, part: u32) -> bool {
        position < self.position
            || (position == self.position && self.part.is_none_or(|p| part <= p))
    }
}

/// An online chunk's message being filled.
#[derive(Debug)]
struct OpenChunk {
    table: TableName,
    chunk: u64,
    payload: Vec<u8>,
    first: Option<Position>,
    last: Position,
}

/// Turns batches into messages of Debezium records.
#[derive(Debug)]
pub(crate) struct DebeziumPlanner {
    template: SubjectTemplate,
    encoder: DebeziumEncoder,
    /// The table whose subject transaction metadata records take (`<name>.transaction`).
    transaction_table: TableName,
    /// Transaction metadata records are written.
    transaction_metadata: bool,
    max_message_bytes: usize,
    /// Records already in the stream (replay after a restart).
    pub(crate) applied: Option<Applied>,
    tx: Option<Tx>,
    /// Inside an online chunk: its table and number.
    chunk: Option<(TableName, u64)>,
    /// Replayed events.
    pub(crate) skipped: u64,
    /// The record number of the last record seen, with its event's position.
    last_record: Option<(Position, u32)>,
    names: HashMap<TableName, TableNames>,
    buffer: Vec<u8>,
    spans: Vec<RecordSpan>,
}

impl DebeziumPlanner {
    pub(crate) fn new(
        template: SubjectTemplate,
        options: DebeziumOptions,
        max_message_bytes: usize,
    ) -> Self {
        let transaction_table = TableName::new(options.name.clone(), "transaction");
        let transaction_metadata = options.transaction_metadata;
        let mut encoder = DebeziumEncoder::new(options);
        encoder.track_records();
        DebeziumPlanner {
            template,
            encoder,
            transaction_table,
            transaction_metadata,
            max_message_bytes,
            applied: None,
            tx: None,
            chunk: None,
            skipped: 0,
            last_record: None,
            names: HashMap::new(),
            buffer: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// The same planner with a fixed clock for the envelopes' processing times (tests).
    #[cfg(test)]
    pub(crate) fn with_clock(mut self, now: fn() -> i64) -> Self {
        let placeholder = DebeziumEncoder::new(DebeziumOptions::new("", ""));
        let encoder = std::mem::replace(&mut self.encoder, placeholder);
        self.encoder = encoder.with_clock(now);
        self
    }

    /// Sets the largest message (the server's `max_payload`).
    pub(crate) fn set_max_message_bytes(&mut self, bytes: usize) {
        self.max_message_bytes = bytes;
    }

    /// The state to store with the last planned batch's token.
    pub(crate) fn state(&self) -> DebeziumPlanState {
        DebeziumPlanState {
            encoder: self.encoder.state(),
            tx: self.tx.clone().map(|mut tx| {
                tx.last_in_plan = None;
                tx
            }),
        }
    }

    /// Continues from the state stored with the token the source resumes from.
    pub(crate) fn restore(&mut self, state: DebeziumPlanState) {
        self.encoder.restore(state.encoder);
        self.tx = state.tx;
        self.chunk = None;
        self.last_record = None;
    }

    /// The messages for `events`; the last one carries `token` and the state after the
    /// batch. On error nothing of the batch is to be published.
    pub(crate) fn plan(
        &mut self,
        events: &[ChangeEvent],
        token: &ResumeToken,
    ) -> Result<Vec<OutMessage>, Error> {
        let source = &Source::of(token);
        let mut out = Vec::new();
        let mut open: Option<OpenChunk> = None;
        for event in events {
            if self.applied.is_some_and(|a| event.position <= a.position) {
                self.skipped += 1;
            }
            if matches!(event.kind, EventKind::Snapshot(SnapshotMarker::Restarted)) {
                return Err(restarted());
            }
            self.buffer.clear();
            self.encoder.encode(event, &mut self.buffer)?;
            self.route(&mut open, source, &mut out)?;
            match &event.kind {
                EventKind::Begin(begin) => self.tx = Some(Tx::begun(begin)),
                EventKind::Commit(_) => {
                    // Its last message in this batch says it is the last. (No empty
                    // message marks an end whose messages went out earlier: a Debezium
                    // consumer reads every message as a record. Transaction metadata
                    // gives every end.)
                    if let Some(last) = self
                        .tx
                        .take()
                        .and_then(|tx| tx.last_in_plan)
                        .and_then(|i| out.get_mut(i))
                    {
                        last.headers.push((h::TX_LAST, "true".into()));
                    }
                }
                EventKind::Snapshot(SnapshotMarker::ChunkStarted { table, chunk }) => {
                    self.close(&mut open, source, &mut out);
                    self.chunk = Some((table.clone(), *chunk));
                    open = Some(OpenChunk {
                        table: table.clone(),
                        chunk: *chunk,
                        payload: Vec::new(),
                        first: None,
                        last: event.position,
                    });
                }
                // The chunk's message stays open until the batch ends: its last row's
                // record is written when what follows decides its label.
                EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. }) => self.chunk = None,
                _ => {}
            }
        }
        if self.chunk.is_some() {
            return Err(inside_chunk());
        }
        self.buffer.clear();
        self.encoder.end_of_durable_batch(&mut self.buffer);
        self.route(&mut open, source, &mut out)?;
        self.close(&mut open, source, &mut out);
        if let Some(tx) = self.tx.as_mut() {
            tx.batch_ended(&out);
        }
        if let Some(last) = out.last_mut() {
            last.headers.push((h::TOKEN, token.to_json()));
            let state = serde_json::to_string(&self.state())
                .map_err(|e| Error::sink(format!("internal: the Debezium state: {e}")))?;
            last.headers.push((h::DEBEZIUM_STATE, state));
        }
        check_sizes(&out, self.max_message_bytes)?;
        Ok(out)
    }

    /// Sends the records just written in the buffer where they go: into the open chunk's
    /// message, a message each, or nowhere (a tombstone, or a record in the stream
    /// already).
    fn route(
        &mut self,
        open: &mut Option<OpenChunk>,
        source: &Source<'_>,
        out: &mut Vec<OutMessage>,
    ) -> Result<(), Error> {
        let mut spans = std::mem::take(&mut self.spans);
        let buffer = std::mem::take(&mut self.buffer);
        self.encoder.take_record_spans(&mut spans);
        for span in spans.drain(..) {
            let part = match self.last_record {
                Some((position, part)) if position == span.position => part + 1,
                _ => 0,
            };
            self.last_record = Some((span.position, part));
            if span.is_tombstone(&buffer)
                || self.applied.is_some_and(|a| a.covers(span.position, part))
            {
                continue;
            }
            let Some(value) = buffer.get(span.value.clone()) else {
                return Err(Error::sink(
                    "internal: a Debezium record outside its buffer",
                ));
            };
            let table = match &span.table {
                Some(table) => {
                    if *table == self.transaction_table && self.transaction_metadata {
                        return Err(Error::config(format!(
                            "table {table} would share its JetStream subject with the transaction metadata records (<name>.transaction); choose another --debezium-name or leave transaction metadata off"
                        )));
                    }
                    table.clone()
                }
                None => self.transaction_table.clone(),
            };
            if span.snapshot_read
                && let Some(o) = open.as_mut().filter(|o| o.table == table)
            {
                o.payload.extend_from_slice(value);
                o.payload.push(b'\n');
                o.first.get_or_insert(span.position);
                o.last = o.last.max(span.position);
                continue;
            }
            let origin = if span.snapshot_read {
                Origin::Snapshot
            } else {
                // A record after a chunk's rows: the chunk's message is complete.
                self.close(open, source, out);
                Origin::Stream
            };
            let message = self.message(&table, origin, value.to_vec(), span.position, part, source);
            out.push(message);
            if origin == Origin::Stream
                && let Some(tx) = self.tx.as_mut()
            {
                tx.last_in_plan = Some(out.len() - 1);
            }
        }
        self.spans = spans;
        self.buffer = buffer;
        Ok(())
    }

    fn close(
        &mut self,
        open: &mut Option<OpenChunk>,
        source: &Source<'_>,
        out: &mut Vec<OutMessage>,
    ) {
        let Some(o) = open.take() else {
            return;
        };
        let Some(first) = o.first else {
            return;
        };
        let mut message = self.message(&o.table, Origin::Backfill, o.payload, first, 0, source);
        if o.last != first {
            message.headers.push((h::LAST_POSITION, o.last.to_string()));
        }
        message.headers.push((h::CHUNK, o.chunk.to_string()));
        message.last = o.last;
        out.push(message);
    }

    fn message(
        &mut self,
        table: &TableName,
        origin: Origin,
        payload: Vec<u8>,
        position: Position,
        part: u32,
        source: &Source<'_>,
    ) -> OutMessage {
        let mut headers = common_headers(&source.key, position, part);
        let names = self
            .names
            .entry(table.clone())
            .or_insert_with(|| TableNames::of(&self.template, source.database, table));
        let subject = names.subject.clone();
        headers.push((h::TABLE, names.header.clone()));
        headers.push((h::ORIGIN, origin.as_str().into()));
        if origin == Origin::Stream
            && let Some(tx) = &self.tx
        {
            tx_headers(tx, &mut headers);
        }
        OutMessage {
            subject,
            payload,
            headers,
            last: position,
        }
    }
}
