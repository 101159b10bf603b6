//! Sans-IO: a batch of change events → the JetStream messages that carry it (subjects,
//! Feldera JSON payloads, headers), with replayed events skipped. The I/O layer only adds
//! the stream-sequence chain and publishes.

use std::collections::{BTreeMap, HashMap};

use cdc_core::{
    ChangeEvent, Error, EventKind, Position, ResumeToken, SnapshotMarker, SourceIdentity, TableName,
};

use super::headers as h;
use super::subject::SubjectTemplate;
use crate::feldera::{EncoderOptions, FelderaEncoder, Frame, FrameSet, Framing, PolicyLog};

/// How change events are grouped into messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Grouping {
    /// One message per change (one Feldera envelope; two, on separate lines, for an
    /// update that changes the key or of a table without one). Default.
    #[default]
    Event,
    /// Consecutive changes of one table within one transaction in one message, one
    /// envelope per line, up to the size limit; a message also ends at the end of a
    /// written batch. Fewer, larger messages; the same envelopes.
    Transaction,
}

/// Where a message's rows come from (header `Pgcdc-Origin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// A committed transaction read from the replication stream.
    Stream,
    /// The consistent initial snapshot.
    Snapshot,
    /// A chunk of an online snapshot.
    Backfill,
}

impl Origin {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Origin::Stream => "stream",
            Origin::Snapshot => "snapshot",
            Origin::Backfill => "backfill",
        }
    }
}

/// One message to publish.
#[derive(Clone, Debug)]
pub(crate) struct OutMessage {
    pub(crate) subject: String,
    /// Feldera JSON envelopes, one per line; empty for a transaction's end marker.
    pub(crate) payload: Vec<u8>,
    /// Headers in order (the I/O layer adds the sequence chain).
    pub(crate) headers: Vec<(&'static str, String)>,
    /// The last event the message covers.
    pub(crate) last: Position,
}

/// The source as headers and subjects need it, computed once per batch.
#[derive(Debug)]
pub(super) struct Source<'t> {
    /// [`source_key`].
    pub(super) key: String,
    pub(super) database: &'t str,
}

impl<'t> Source<'t> {
    pub(super) fn of(token: &'t ResumeToken) -> Self {
        Source {
            key: source_key(&token.source),
            database: &token.source.database,
        }
    }
}

/// The open transaction, as far as messages need it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Tx {
    xid: u32,
    commit_lsn: String,
    commit_time_unix_micros: i64,
    /// Subject of the last message of this transaction published in an earlier batch.
    pub(super) earlier_subject: Option<String>,
    /// Index in the current plan of its last message, if any.
    #[serde(skip)]
    pub(super) last_in_plan: Option<usize>,
}

impl Tx {
    pub(super) fn begun(begin: &cdc_core::TxBegin) -> Self {
        Tx {
            xid: begin.xid,
            commit_lsn: begin.final_lsn.to_string(),
            commit_time_unix_micros: begin
                .commit_time_micros
                .saturating_add(POSTGRES_EPOCH_UNIX_MICROS),
            earlier_subject: None,
            last_in_plan: None,
        }
    }

    /// Marks the transaction's end in `out` at its commit (`position`): its last message
    /// in this plan says so, or an empty message when its messages went out with
    /// earlier batches.
    pub(super) fn end(self, source: &Source<'_>, position: Position, out: &mut Vec<OutMessage>) {
        match (
            self.last_in_plan.and_then(|i| out.get_mut(i)),
            &self.earlier_subject,
        ) {
            (Some(last), _) => last.headers.push((h::TX_LAST, "true".into())),
            (None, Some(subject)) => {
                let mut headers = common_headers(&source.key, position, 0);
                tx_headers(&self, &mut headers);
                headers.push((h::TX_LAST, "true".into()));
                out.push(OutMessage {
                    subject: subject.clone(),
                    payload: Vec::new(),
                    headers,
                    last: position,
                });
            }
            (None, None) => {}
        }
    }

    /// At a batch's end: the transaction goes on in the next batch.
    pub(super) fn batch_ended(&mut self, out: &[OutMessage]) {
        if let Some(i) = self.last_in_plan.take()
            && let Some(m) = out.get(i)
        {
            self.earlier_subject = Some(m.subject.clone());
        }
    }
}

/// A message being filled (transaction grouping, and every online chunk).
#[derive(Debug)]
struct Open {
    table: TableName,
    origin: Origin,
    /// Envelopes, one per line.
    payload: Vec<u8>,
    first: Position,
    last: Position,
    chunk: Option<u64>,
}

/// Turns batches into messages. Keeps the encoder, the open transaction and the chunk
/// state across batches.
#[derive(Debug)]
pub(crate) struct Planner {
    template: SubjectTemplate,
    grouping: Grouping,
    encoder: FelderaEncoder,
    /// Largest payload plus headers one message may have (the server's `max_payload`).
    max_message_bytes: usize,
    /// Events at or before this are in the stream already (replay after a restart).
    pub(crate) applied_through: Option<Position>,
    tx: Option<Tx>,
    /// Inside an online chunk: its table and number.
    chunk: Option<(TableName, u64)>,
    /// Replayed events skipped.
    pub(crate) skipped: u64,
    scratch: Scratch,
    /// Per table: its subject and `Pgcdc-Table` value (one source database per sink).
    names: HashMap<TableName, TableNames>,
}

#[derive(Debug)]
pub(super) struct TableNames {
    pub(super) subject: String,
    pub(super) header: String,
}

impl TableNames {
    pub(super) fn of(template: &SubjectTemplate, database: &str, table: &TableName) -> Self {
        TableNames {
            subject: template.render(database, table),
            header: header_safe(&table.to_string()),
        }
    }
}

/// The encoder's output for one event, per table.
#[derive(Debug, Default)]
struct Scratch {
    frames: BTreeMap<TableName, Frame>,
}

impl FrameSet for Scratch {
    fn frame(&mut self, table: &TableName) -> cdc_core::Result<&mut Frame> {
        Ok(self
            .frames
            .entry(table.clone())
            .or_insert_with(|| Frame::new(Framing::Lines)))
    }

    fn end_transaction(&mut self) {}
}

impl Planner {
    pub(crate) fn new(
        template: SubjectTemplate,
        grouping: Grouping,
        encoder: EncoderOptions,
        log: PolicyLog,
        max_message_bytes: usize,
        applied_through: Option<Position>,
    ) -> Self {
        Planner {
            template,
            grouping,
            encoder: FelderaEncoder::with_policy_log(encoder, log),
            max_message_bytes,
            applied_through,
            tx: None,
            chunk: None,
            skipped: 0,
            scratch: Scratch::default(),
            names: HashMap::new(),
        }
    }

    /// Sets the largest message (the server's `max_payload`).
    pub(crate) fn set_max_message_bytes(&mut self, bytes: usize) {
        self.max_message_bytes = bytes;
    }

    /// The messages for `events`; the last one carries `token` (the batch's resume token).
    /// On error nothing of the batch is to be published.
    pub(crate) fn plan(
        &mut self,
        events: &[ChangeEvent],
        token: &ResumeToken,
    ) -> Result<Vec<OutMessage>, Error> {
        let mut out = Vec::new();
        let mut open: Option<Open> = None;
        let source = &Source::of(token);
        for event in events {
            if self.applied_through.is_some_and(|p| event.position <= p) {
                self.skipped += 1;
                continue;
            }
            match &event.kind {
                EventKind::Begin(begin) => {
                    self.close(&mut open, source, &mut out);
                    self.tx = Some(Tx::begun(begin));
                }
                EventKind::Commit(_) => {
                    self.close(&mut open, source, &mut out);
                    if let Some(tx) = self.tx.take() {
                        tx.end(source, event.position, &mut out);
                    }
                }
                EventKind::Snapshot(SnapshotMarker::Restarted) => return Err(restarted()),
                EventKind::Snapshot(SnapshotMarker::ChunkStarted { table, chunk }) => {
                    self.close(&mut open, source, &mut out);
                    self.chunk = Some((table.clone(), *chunk));
                }
                EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. }) => {
                    // The chunk's rows go out as one message: all or nothing.
                    self.close(&mut open, source, &mut out);
                    self.chunk = None;
                }
                EventKind::Insert { .. }
                | EventKind::Update { .. }
                | EventKind::Delete { .. }
                | EventKind::Truncate { .. } => {
                    self.row_event(event, &mut open, source, &mut out)?;
                }
                _ => {}
            }
            self.applied_through = Some(event.position);
        }
        if self.chunk.is_some() {
            return Err(inside_chunk());
        }
        self.close(&mut open, source, &mut out);
        if let Some(tx) = self.tx.as_mut() {
            tx.batch_ended(&out);
        }
        if let Some(last) = out.last_mut() {
            last.headers.push((h::TOKEN, token.to_json()));
        }
        check_sizes(&out, self.max_message_bytes)?;
        Ok(out)
    }

    /// The table's subject and header value, rendered once per table.
    fn names(&mut self, database: &str, table: &TableName) -> &TableNames {
        if !self.names.contains_key(table) {
            let names = TableNames::of(&self.template, database, table);
            self.names.insert(table.clone(), names);
        }
        &self.names[table]
    }

    fn origin(&self) -> Origin {
        if self.tx.is_some() {
            Origin::Stream
        } else if self.chunk.is_some() {
            Origin::Backfill
        } else {
            Origin::Snapshot
        }
    }

    fn row_event(
        &mut self,
        event: &ChangeEvent,
        open: &mut Option<Open>,
        source: &Source<'_>,
        out: &mut Vec<OutMessage>,
    ) -> Result<(), Error> {
        // The scratch frames (and their buffers) are kept across events: cleared, not
        // dropped, so an event costs no frame allocation.
        let mut frames = std::mem::take(&mut self.scratch.frames);
        for frame in frames.values_mut() {
            frame.reset();
        }
        self.scratch.frames = frames;
        self.encoder.encode_event(event, &mut self.scratch)?;
        let origin = self.origin();
        let grouped = origin == Origin::Backfill || self.grouping == Grouping::Transaction;
        let frames = std::mem::take(&mut self.scratch.frames);
        for (part, (table, frame)) in frames.iter().enumerate() {
            let bytes = frame.bytes();
            if bytes.is_empty() {
                continue;
            }
            if grouped && self.joins(open.as_ref(), table, origin, bytes.len()) {
                if let Some(o) = open.as_mut() {
                    o.payload.extend_from_slice(bytes);
                    o.last = event.position;
                }
                continue;
            }
            self.close(open, source, out);
            if grouped {
                *open = Some(Open {
                    table: table.clone(),
                    origin,
                    payload: bytes.to_vec(),
                    first: event.position,
                    last: event.position,
                    chunk: self.chunk.as_ref().map(|(_, c)| *c),
                });
            } else {
                let message = self.message(
                    table,
                    origin,
                    bytes.to_vec(),
                    event.position,
                    event.position,
                    part as u32,
                    source,
                    None,
                );
                self.push(message, out);
            }
        }
        self.scratch.frames = frames;
        Ok(())
    }

    /// Whether an event's bytes join the open message: same table and origin, and room
    /// left. A chunk is never split (it must be all or nothing); other groups end at the
    /// limit, with room for headers.
    fn joins(&self, open: Option<&Open>, table: &TableName, origin: Origin, len: usize) -> bool {
        open.is_some_and(|o| {
            &o.table == table
                && o.origin == origin
                && (origin == Origin::Backfill
                    || o.payload.len() + len + HEADER_ROOM <= self.max_message_bytes)
        })
    }

    fn close(&mut self, open: &mut Option<Open>, source: &Source<'_>, out: &mut Vec<OutMessage>) {
        if let Some(o) = open.take() {
            let message = self.message(
                &o.table, o.origin, o.payload, o.first, o.last, 0, source, o.chunk,
            );
            self.push(message, out);
        }
    }

    fn push(&mut self, message: OutMessage, out: &mut Vec<OutMessage>) {
        out.push(message);
        if let Some(tx) = self.tx.as_mut() {
            tx.last_in_plan = Some(out.len() - 1);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        table: &TableName,
        origin: Origin,
        payload: Vec<u8>,
        first: Position,
        last: Position,
        part: u32,
        source: &Source<'_>,
        chunk: Option<u64>,
    ) -> OutMessage {
        let mut headers = common_headers(&source.key, first, part);
        if last != first {
            headers.push((h::LAST_POSITION, last.to_string()));
        }
        let names = self.names(source.database, table);
        let (subject, table_header) = (names.subject.clone(), names.header.clone());
        headers.push((h::TABLE, table_header));
        headers.push((h::ORIGIN, origin.as_str().into()));
        if let Some(c) = chunk {
            headers.push((h::CHUNK, c.to_string()));
        }
        if origin == Origin::Stream
            && let Some(tx) = &self.tx
        {
            tx_headers(tx, &mut headers);
        }
        OutMessage {
            subject,
            payload,
            headers,
            last,
        }
    }
}

/// The error for a consistent snapshot taken again: its rows are in the stream.
pub(super) fn restarted() -> Error {
    Error::sink(
        "the source restarted the initial snapshot, but the rows of the interrupted one are already in the JetStream stream and cannot be withdrawn; purge the stream and delete pgcdc's resume entry (see docs/jetstream.md), or use --snapshot online, whose chunks are never taken again",
    )
}

/// The error for a batch that ends inside an online chunk.
pub(super) fn inside_chunk() -> Error {
    Error::sink(
        "internal: a batch ended inside an online snapshot chunk; the JetStream sink needs chunks whole (PgSource delivers them so)",
    )
}

/// Refuses a plan holding a message larger than the server takes.
pub(super) fn check_sizes(out: &[OutMessage], max_message_bytes: usize) -> Result<(), Error> {
    for m in out {
        let size = m.payload.len()
            + m.headers
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 64;
        if size > max_message_bytes {
            return Err(Error::sink(format!(
                "a message for {} ({} bytes with headers, up to position {}) exceeds the server's max_payload of {} bytes; raise max_payload in the NATS server configuration{}",
                m.subject,
                size,
                m.last,
                max_message_bytes,
                if m.headers
                    .iter()
                    .any(|(k, v)| *k == h::ORIGIN && v == "backfill")
                {
                    ", or make online snapshot chunks smaller (--chunk-rows): a chunk is one message"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(())
}

/// Room kept for headers when grouping.
const HEADER_ROOM: usize = 4096;

/// Microseconds from 1970-01-01 to 2000-01-01 (Postgres's epoch).
const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// The source's identity as one header value (the timeline is left out: a promotion
/// keeps the stream the same).
pub(crate) fn source_key(source: &SourceIdentity) -> String {
    format!(
        "{}/{}/{}",
        source.system_identifier, source.database, source.slot
    )
}

pub(super) fn common_headers(key: &str, first: Position, part: u32) -> Vec<(&'static str, String)> {
    let mut headers = Vec::with_capacity(12);
    headers.push((h::NATS_MSG_ID, format!("{key}/{first}/{part}")));
    headers.push((h::SOURCE, key.to_owned()));
    headers.push((h::POSITION, first.to_string()));
    if part > 0 {
        headers.push((h::PART, part.to_string()));
    }
    headers
}

/// A header value without control characters (a header ends at a line break): `%`, and
/// bytes below 0x20 and 0x7f, written `%XX`. Only table names can hold them.
pub(super) fn header_safe(text: &str) -> String {
    if !text.bytes().any(|b| b < 0x20 || b == 0x7f || b == b'%') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '%' | '\u{0}'..='\u{1f}' | '\u{7f}' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

pub(super) fn tx_headers(tx: &Tx, headers: &mut Vec<(&'static str, String)>) {
    headers.push((h::XID, tx.xid.to_string()));
    headers.push((h::COMMIT_LSN, tx.commit_lsn.clone()));
    headers.push((h::COMMIT_TIME_US, tx.commit_time_unix_micros.to_string()));
}
