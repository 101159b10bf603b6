//! From pgoutput messages to change events: the relation cache, tuple decoding into
//! `Value`s, positions, and buffering of streamed transactions.
//!
//! [`ChangeAssembler`] is fed one XLogData payload at a time and appends
//! [`ChangeEvent`]s. It is sans-IO except for spilling large streamed transactions to
//! temporary files.
//!
//! Positions: every transaction's events share the commit LSN (known from Begin, or from
//! Stream Commit for streamed ones). Ordinals count the transaction's changes as Postgres
//! sent them — including changes of tables that are not configured, which are decoded no
//! further — so they are the same on every replay of the transaction: Begin is 0, the
//! k-th change (k ≥ 1) is `2k`, a schema change event just before it `2k − 1`, and Commit
//! `2(n + 1)` for `n` changes.
//!
//! Two-phase transactions (protocol v3+) are delivered once, at COMMIT PREPARED, at the
//! commit's position; a rolled-back one delivers nothing. While one waits,
//! [`ChangeAssembler::confirm_hold`] says how far the slot may be confirmed (see
//! `prepared`).

mod prepared;
mod relations;
mod spill;
mod stream_buffer;
mod tuples;

use bytes::{Bytes, BytesMut};
use cdc_core::{
    ChangeEvent, Error, EventKind, Lsn, OldRow, OldRowKind, Position, SchemaRef, TxBegin, TxCommit,
};

pub use relations::{
    CachedRelation, RelationCache, RelationUpdate, SchemaChangePolicy, TableCatalogInfo,
    TableRouting,
};
pub use spill::{MemorySpill, MemorySpillFile, SharedSpillStorage, SpillFile, SpillStorage};
pub use stream_buffer::{Replay, StreamBuffers};

use crate::protocol::pgoutput::{
    self, DecoderOptions, OldTuple, PgOutputDecoder, PgOutputMessage, StreamStart, TupleRef,
};
use prepared::{HeldSchemaChange, PreparedTransactions};

/// Which logical decoding messages (`pg_logical_emit_message`) to deliver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MessageFilter {
    /// None (default; the server is not asked for them either).
    #[default]
    Off,
    /// Every message.
    All,
    /// Messages whose prefix starts with one of these.
    Prefixes(Vec<String>),
}

impl MessageFilter {
    fn accepts(&self, prefix: &str) -> bool {
        match self {
            MessageFilter::Off => false,
            MessageFilter::All => true,
            MessageFilter::Prefixes(p) => p.iter().any(|p| prefix.starts_with(p.as_str())),
        }
    }
}

/// How the assembler works.
#[derive(Clone, Debug)]
pub struct AssemblerConfig {
    /// The negotiated protocol options.
    pub decoder: DecoderOptions,
    /// Which tables are delivered and under which names.
    pub routing: TableRouting,
    /// What a changed Relation message does.
    pub schema_policy: SchemaChangePolicy,
    /// Which logical messages are delivered.
    pub messages: MessageFilter,
    /// Memory for in-progress streamed transactions before they spill to `spill`.
    pub stream_memory_limit: usize,
    /// Where streamed transactions beyond `stream_memory_limit` go.
    pub spill: SharedSpillStorage,
}

#[derive(Debug)]
struct TxState {
    commit_lsn: Lsn,
    commit_time_micros: i64,
    xid: u32,
    changes: u64,
    begin_emitted: bool,
    /// The WAL position of the message being applied (its events' `lsn`).
    change_lsn: Lsn,
}

#[derive(Debug)]
struct ReplayState {
    entries: Replay,
    decoder: PgOutputDecoder,
    end_lsn: Lsn,
    /// A prepared transaction's schema changes, in order.
    schema_changes: std::collections::VecDeque<HeldSchemaChange>,
}

/// Turns pgoutput messages into change events. See the module documentation for
/// positions.
#[derive(Debug)]
pub struct ChangeAssembler {
    decoder: PgOutputDecoder,
    relations: RelationCache,
    messages: MessageFilter,
    tx: Option<TxState>,
    streams: StreamBuffers,
    replay: Option<ReplayState>,
    prepared: PreparedTransactions,
    /// What the sink has or is on its way (see [`ChangeAssembler::set_delivered`]).
    delivered_upto: Option<Position>,
    delivered_complete: Option<Lsn>,
    /// A deliberate mistake for the source simulation's fault test: a streamed
    /// transaction's first segment is delivered at its Stream Stop, before it commits.
    #[cfg(test)]
    pub(crate) fault_release_at_first_segment: bool,
    #[cfg(test)]
    fault_segment: Option<u32>,
    #[cfg(test)]
    fault_last_end: Lsn,
}

impl ChangeAssembler {
    /// A new assembler for one replication session.
    pub fn new(config: AssemblerConfig) -> Self {
        ChangeAssembler {
            decoder: PgOutputDecoder::new(config.decoder),
            relations: RelationCache::new(config.routing, config.schema_policy),
            messages: config.messages,
            tx: None,
            streams: StreamBuffers::new(config.stream_memory_limit, config.spill),
            replay: None,
            prepared: PreparedTransactions::default(),
            delivered_upto: None,
            delivered_complete: None,
            #[cfg(test)]
            fault_release_at_first_segment: false,
            #[cfg(test)]
            fault_segment: None,
            #[cfg(test)]
            fault_last_end: Lsn::ZERO,
        }
    }

    /// The relation cache (e.g. to seed the schemas a snapshot delivered).
    pub fn relations_mut(&mut self) -> &mut RelationCache {
        &mut self.relations
    }

    /// Starts a new replication session (after a reconnect): relation ids and in-progress
    /// transactions are forgotten, delivered schemas kept.
    pub fn reset_session(&mut self) {
        self.decoder = PgOutputDecoder::new(self.decoder.options());
        self.relations.reset_session();
        self.tx = None;
        self.streams = StreamBuffers::new(self.streams.limit(), self.streams.storage().clone());
        self.replay = None;
        self.prepared = PreparedTransactions::default();
    }

    /// Tells the assembler what is already in a batch (the sink's token after a restart,
    /// what went into batches before a reconnect): the last event `position`, and how far
    /// every transaction is complete there (`complete_end`, beyond the confirmable end
    /// where a waiting prepared transaction holds that back). A session that starts past
    /// a transaction's PREPARE receives its COMMIT PREPARED alone: the assembler accepts
    /// that (delivering nothing) only for a transaction these reach — its commit by
    /// position, or its end by `complete_end` (also one that carried no events) — and
    /// refuses it otherwise.
    ///
    /// Why that is enough: while a prepared transaction waits, every end the source hands
    /// out is held back to its PREPARE (see [`Self::confirm_hold`]), so a slot — and a
    /// session start — past that PREPARE means an end handed out after the whole
    /// transaction was.
    pub fn set_delivered(&mut self, position: Option<Position>, complete_end: Option<Lsn>) {
        self.delivered_upto = position;
        self.delivered_complete = complete_end;
    }

    /// The furthest the slot may be confirmed while prepared transactions wait for
    /// COMMIT PREPARED: the earliest one's PREPARE LSN (the server sends a prepared
    /// transaction again after a restart only from a position at or before it). `None`
    /// when none waits.
    pub fn confirm_hold(&self) -> Option<Lsn> {
        self.prepared.confirm_hold()
    }

    /// How many prepared transactions wait for COMMIT PREPARED or ROLLBACK PREPARED.
    pub fn prepared_waiting(&self) -> usize {
        self.prepared.waiting()
    }

    /// Bytes held in memory by in-progress streamed transactions (and prepared
    /// transactions).
    pub fn buffered_bytes(&self) -> usize {
        self.streams.memory_used()
    }

    /// Bytes those transactions hold in spill files.
    pub fn spilled_bytes(&self) -> u64 {
        self.streams.spilled_bytes()
    }

    /// Whether a committed streamed transaction is being released: call
    /// [`ChangeAssembler::continue_replay`] until it returns the commit end.
    pub fn replaying(&self) -> bool {
        self.replay.is_some()
    }

    /// Whether the assembler is inside a transaction (between Begin and Commit, or
    /// Begin Prepare and Prepare).
    pub fn in_transaction(&self) -> bool {
        self.tx.is_some() || self.prepared.is_preparing()
    }

    /// Processes one XLogData payload, appending events to `out`. Returns the end LSN of a
    /// transaction that ended with this message (whether or not it carried events for the
    /// sink). After a Stream Commit, `replaying()` is true and nothing is returned yet.
    /// The events' `lsn` is [`Lsn::ZERO`]; see [`Self::process_from`].
    pub fn process(
        &mut self,
        payload: Bytes,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<Option<Lsn>, Error> {
        self.process_from(payload, Lsn::ZERO, out)
    }

    /// [`Self::process`] of a payload the server sent at WAL position `lsn` (the
    /// XLogData's start): the change events it makes carry it, also when a streamed or
    /// prepared transaction releases them later.
    pub fn process_from(
        &mut self,
        payload: Bytes,
        lsn: Lsn,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<Option<Lsn>, Error> {
        if let Some(tx) = self.tx.as_mut() {
            tx.change_lsn = lsn;
        }
        if self.replay.is_some() {
            return Err(Error::protocol(
                "internal: a new message arrived while a streamed transaction was being released",
            ));
        }
        let message = self
            .decoder
            .decode_borrowed(&payload)
            .map_err(|e| Error::protocol(format!("cannot decode pgoutput message: {e}")))?;
        #[cfg(test)]
        if let PgOutputMessage::StreamStart(start) = &message
            && start.first_segment
            && self.fault_release_at_first_segment
        {
            self.fault_segment = Some(start.xid);
        }
        if let Some(stream_xid) = self.decoder.open_stream() {
            // Inside a stream the raw payload is buffered until the stream commits; it is
            // decoded into values only then.
            let Some(sub_xid) = stream_sub_xid(&message)? else {
                return Ok(None);
            };
            self.streams
                .push_parts(
                    stream_xid,
                    sub_xid.unwrap_or(stream_xid),
                    &lsn.0.to_be_bytes(),
                    &payload,
                )
                .map_err(spill_error)?;
            return Ok(None);
        }
        if self.prepared.is_preparing() {
            return self.process_preparing(message, &payload, lsn, out);
        }
        match message {
            PgOutputMessage::Begin(begin) => {
                if self.tx.is_some() {
                    return Err(Error::protocol("Begin inside a transaction"));
                }
                self.tx = Some(TxState {
                    commit_lsn: begin.final_lsn,
                    commit_time_micros: begin.commit_timestamp,
                    xid: begin.xid,
                    changes: 0,
                    begin_emitted: false,
                    change_lsn: Lsn::ZERO,
                });
                Ok(None)
            }
            PgOutputMessage::Commit(commit) => {
                let Some(tx) = self.tx.take() else {
                    return Err(Error::protocol("Commit without Begin"));
                };
                if commit.commit_lsn != tx.commit_lsn {
                    return Err(Error::protocol(format!(
                        "Commit LSN {} differs from the Begin's final LSN {}",
                        commit.commit_lsn, tx.commit_lsn
                    )));
                }
                finish(tx, commit.end_lsn, commit.commit_timestamp, out);
                #[cfg(test)]
                {
                    self.fault_last_end = self.fault_last_end.max(commit.end_lsn);
                }
                Ok(Some(commit.end_lsn))
            }
            PgOutputMessage::StreamCommit(commit) => {
                self.start_release(
                    TxState {
                        commit_lsn: commit.commit_lsn,
                        commit_time_micros: commit.commit_timestamp,
                        xid: commit.xid,
                        changes: 0,
                        begin_emitted: false,
                        change_lsn: Lsn::ZERO,
                    },
                    commit.end_lsn,
                    true,
                    Vec::new(),
                )?;
                Ok(None)
            }
            PgOutputMessage::StreamAbort(abort) => {
                if abort.is_top_level() {
                    self.streams.abort(abort.xid);
                } else {
                    self.streams
                        .abort_subtransaction(abort.xid, abort.subxid)
                        .map_err(spill_error)?;
                }
                Ok(None)
            }
            #[cfg(test)]
            PgOutputMessage::StreamStop if self.fault_segment.is_some() => {
                if let Some(xid) = self.fault_segment.take() {
                    let at = self.fault_last_end;
                    self.start_release(
                        TxState {
                            commit_lsn: Lsn(at.0 + 1),
                            commit_time_micros: 0,
                            xid,
                            changes: 0,
                            begin_emitted: false,
                            change_lsn: Lsn::ZERO,
                        },
                        at,
                        true,
                        Vec::new(),
                    )?;
                }
                Ok(None)
            }
            PgOutputMessage::StreamStart(_) | PgOutputMessage::StreamStop => Ok(None),
            PgOutputMessage::BeginPrepare(begin) => {
                if self.tx.is_some() {
                    return Err(Error::protocol("Begin Prepare inside a transaction"));
                }
                self.prepared
                    .begin(begin.xid, begin.prepare_lsn)
                    .map_err(Error::protocol)?;
                Ok(None)
            }
            PgOutputMessage::Prepare(prepare) => Err(Error::protocol(format!(
                "Prepare of transaction {} without Begin Prepare",
                prepare.xid
            ))),
            PgOutputMessage::StreamPrepare(prepare) => {
                // The stream's messages stay buffered until COMMIT PREPARED.
                self.prepared
                    .prepare_streamed(prepare.xid, prepare.prepare_lsn);
                Ok(None)
            }
            PgOutputMessage::CommitPrepared(commit) => {
                let Some(prepared) = self.prepared.finish(commit.xid) else {
                    if self
                        .delivered_upto
                        .is_some_and(|p| p.commit_lsn >= commit.commit_lsn)
                        || self
                            .delivered_complete
                            .is_some_and(|end| end >= commit.end_lsn)
                    {
                        // Delivered whole before this session began past its PREPARE.
                        return Ok(Some(commit.end_lsn));
                    }
                    return Err(Error::resync_required(format!(
                        "the server sent COMMIT PREPARED of transaction {} ({:?}) whose PREPARE this session did not receive: \
                         the slot was confirmed past the PREPARE without the transaction's changes reaching the sink \
                         (another consumer of the slot, or two-phase decoding switched on mid-stream by hand). Start over with a new snapshot",
                        commit.xid, commit.gid
                    )));
                };
                self.start_release(
                    TxState {
                        commit_lsn: commit.commit_lsn,
                        commit_time_micros: commit.commit_timestamp,
                        xid: commit.xid,
                        changes: 0,
                        begin_emitted: false,
                        change_lsn: Lsn::ZERO,
                    },
                    commit.end_lsn,
                    prepared.streamed,
                    prepared.schema_changes,
                )?;
                Ok(None)
            }
            PgOutputMessage::RollbackPrepared(rollback) => {
                // Nothing of it is delivered. A transaction prepared before two-phase
                // decoding was switched on is rolled back without having been sent.
                self.prepared.finish(rollback.xid);
                self.streams.abort(rollback.xid);
                Ok(Some(rollback.rollback_end_lsn))
            }
            other => self.apply(other, out).map(|()| None),
        }
    }

    /// A message between Begin Prepare and Prepare: data messages are kept until COMMIT
    /// PREPARED; Relation and Type messages are registered now (pgoutput does not send
    /// them again to later transactions), a schema change held for delivery inside the
    /// transaction.
    fn process_preparing(
        &mut self,
        message: PgOutputMessage<TupleRef<'_>>,
        payload: &[u8],
        lsn: Lsn,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<Option<Lsn>, Error> {
        let Some(preparing) = self.prepared.preparing_mut() else {
            return Err(Error::protocol("internal: no transaction being prepared"));
        };
        let xid = preparing.xid;
        match message {
            PgOutputMessage::Prepare(prepare) => {
                self.prepared
                    .prepare(prepare.xid, prepare.prepare_lsn)
                    .map_err(Error::protocol)?;
                Ok(None)
            }
            PgOutputMessage::Relation(relation) => {
                let before_change = preparing.changes + 1;
                if let RelationUpdate::Changed { old, new } = self.relations.register(&relation)?
                    && let Some(preparing) = self.prepared.preparing_mut()
                {
                    preparing.schema_changes.push(HeldSchemaChange {
                        before_change,
                        old,
                        new,
                    });
                }
                Ok(None)
            }
            PgOutputMessage::Type(_) | PgOutputMessage::Origin(_) => {
                self.apply(message, out)?;
                Ok(None)
            }
            PgOutputMessage::Message(ref m) if !m.is_transactional() => {
                self.apply(message, out)?;
                Ok(None)
            }
            PgOutputMessage::Insert(_)
            | PgOutputMessage::Update(_)
            | PgOutputMessage::Delete(_)
            | PgOutputMessage::Truncate(_)
            | PgOutputMessage::Message(_) => {
                preparing.changes += 1;
                self.streams
                    .push_parts(xid, xid, &lsn.0.to_be_bytes(), payload)
                    .map_err(spill_error)?;
                Ok(None)
            }
            other => Err(Error::protocol(format!(
                "unexpected message while transaction {xid} is being prepared: {other:?}"
            ))),
        }
    }

    /// Starts releasing a buffered transaction (streamed, prepared, or both) that
    /// committed: [`ChangeAssembler::continue_replay`] delivers it.
    fn start_release(
        &mut self,
        tx: TxState,
        end_lsn: Lsn,
        streamed: bool,
        schema_changes: Vec<HeldSchemaChange>,
    ) -> Result<(), Error> {
        let entries = self.streams.take(tx.xid).map_err(spill_error)?;
        let mut decoder = PgOutputDecoder::new(self.decoder.options());
        if streamed {
            // Buffered stream messages carry xids: decode them as inside a stream.
            enter_stream(&mut decoder, tx.xid)?;
        }
        self.tx = Some(tx);
        self.replay = Some(ReplayState {
            entries,
            decoder,
            end_lsn,
            schema_changes: schema_changes.into(),
        });
        Ok(())
    }

    /// Releases up to `max_events` more events of a committed streamed transaction.
    /// Returns its end LSN once the last event (Commit) is out.
    pub fn continue_replay(
        &mut self,
        out: &mut Vec<ChangeEvent>,
        max_events: usize,
    ) -> Result<Option<Lsn>, Error> {
        let limit = out.len() + max_events.max(1);
        while out.len() < limit {
            let Some(replay) = self.replay.as_mut() else {
                return Ok(None);
            };
            match replay.entries.next() {
                Some(entry) => {
                    let entry = entry.map_err(spill_error)?;
                    // Each entry is the message's WAL position, then the message.
                    let Some((position, _)) = entry.split_first_chunk::<8>() else {
                        return Err(Error::protocol(
                            "internal: a buffered entry without its position",
                        ));
                    };
                    if let Some(tx) = self.tx.as_mut() {
                        tx.change_lsn = Lsn(u64::from_be_bytes(*position));
                    }
                    let payload = entry.slice(8..);
                    let message = replay.decoder.decode_borrowed(&payload).map_err(|e| {
                        Error::protocol(format!("cannot decode buffered stream message: {e}"))
                    })?;
                    if is_change(&message) {
                        let next = self.tx.as_ref().map_or(1, |tx| tx.changes + 1);
                        self.release_schema_changes(Some(next), out)?;
                    }
                    self.apply(message, out)?;
                }
                None => {
                    self.release_schema_changes(None, out)?;
                    let Some(replay) = self.replay.take() else {
                        return Err(Error::protocol("internal: replay ended twice"));
                    };
                    let end_lsn = replay.end_lsn;
                    let Some(tx) = self.tx.take() else {
                        return Err(Error::protocol("internal: replay without a transaction"));
                    };
                    let commit_time = tx.commit_time_micros;
                    finish(tx, end_lsn, commit_time, out);
                    #[cfg(test)]
                    {
                        self.fault_last_end = self.fault_last_end.max(end_lsn);
                    }
                    return Ok(Some(end_lsn));
                }
            }
        }
        Ok(None)
    }

    /// Applies a data or schema message inside (or, for non-transactional messages,
    /// outside) a transaction.
    fn apply(
        &mut self,
        message: PgOutputMessage<TupleRef<'_>>,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<(), Error> {
        match message {
            PgOutputMessage::Relation(relation) => {
                if let RelationUpdate::Changed { old, new } = self.relations.register(&relation)? {
                    let tx = self.tx_mut("Relation")?;
                    let ordinal = 2 * (tx.changes + 1) - 1;
                    emit(
                        tx,
                        out,
                        ordinal,
                        EventKind::SchemaChange {
                            old: Some(old),
                            new,
                        },
                    );
                }
                Ok(())
            }
            PgOutputMessage::Type(ty) => {
                self.relations.types_mut().register_type_message(
                    ty.type_oid,
                    ty.schema(),
                    &ty.name,
                );
                Ok(())
            }
            PgOutputMessage::Origin(_) => Ok(()),
            PgOutputMessage::Insert(insert) => {
                let ordinal = self.next_change()?;
                let position = self.position(ordinal)?;
                let Some((schema, rel)) = lookup(&self.relations, insert.relation_id, "Insert")?
                else {
                    return Ok(());
                };
                let new = tuples::decode_row(schema, rel, &insert.new, position)?;
                let table = schema.clone();
                emit(
                    self.tx_mut("Insert")?,
                    out,
                    ordinal,
                    EventKind::Insert { table, new },
                );
                Ok(())
            }
            PgOutputMessage::Update(update) => {
                let ordinal = self.next_change()?;
                let position = self.position(ordinal)?;
                let Some((schema, rel)) = lookup(&self.relations, update.relation_id, "Update")?
                else {
                    return Ok(());
                };
                let old = update
                    .old
                    .as_ref()
                    .map(|o| old_row(schema, rel, o, position))
                    .transpose()?;
                let mut new = tuples::decode_row(schema, rel, &update.new, position)?;
                let schema = schema.clone();
                if let Some(OldRow {
                    kind: OldRowKind::Full,
                    values,
                }) = &old
                {
                    // REPLICA IDENTITY FULL logs the old row with TOASTed values inline:
                    // an unchanged TOAST column's value is known.
                    for (new_value, old_value) in new.iter_mut().zip(values) {
                        if new_value.is_unchanged() && !old_value.is_unchanged() {
                            *new_value = old_value.clone();
                        }
                    }
                }
                emit(
                    self.tx_mut("Update")?,
                    out,
                    ordinal,
                    EventKind::Update {
                        table: schema,
                        old,
                        new,
                    },
                );
                Ok(())
            }
            PgOutputMessage::Delete(delete) => {
                let ordinal = self.next_change()?;
                let position = self.position(ordinal)?;
                let Some((schema, rel)) = lookup(&self.relations, delete.relation_id, "Delete")?
                else {
                    return Ok(());
                };
                let old = old_row(schema, rel, &delete.old, position)?;
                let table = schema.clone();
                emit(
                    self.tx_mut("Delete")?,
                    out,
                    ordinal,
                    EventKind::Delete {
                        table,
                        old: Some(old),
                    },
                );
                Ok(())
            }
            PgOutputMessage::Truncate(truncate) => {
                let ordinal = self.next_change()?;
                let mut tables: Vec<SchemaRef> = Vec::new();
                for id in &truncate.relation_ids {
                    if let Some((schema, _)) = lookup(&self.relations, *id, "Truncate")?
                        && !tables.iter().any(|t| t.name == schema.name)
                    {
                        tables.push(schema.clone());
                    }
                }
                if !tables.is_empty() {
                    emit(
                        self.tx_mut("Truncate")?,
                        out,
                        ordinal,
                        EventKind::Truncate {
                            tables,
                            cascade: truncate.cascade(),
                            restart_identity: truncate.restart_identity(),
                        },
                    );
                }
                Ok(())
            }
            PgOutputMessage::Message(message) => {
                if !message.is_transactional() {
                    if self.messages.accepts(&message.prefix) {
                        out.push(ChangeEvent {
                            lsn: cdc_core::Lsn::ZERO,
                            position: Position::new(message.lsn, 0),
                            kind: EventKind::Message {
                                transactional: false,
                                prefix: message.prefix,
                                content: message.content,
                            },
                        });
                    }
                    return Ok(());
                }
                let ordinal = self.next_change()?;
                if self.messages.accepts(&message.prefix) {
                    emit(
                        self.tx_mut("Message")?,
                        out,
                        ordinal,
                        EventKind::Message {
                            transactional: true,
                            prefix: message.prefix,
                            content: message.content,
                        },
                    );
                }
                Ok(())
            }
            other => Err(Error::protocol(format!(
                "unexpected pgoutput message here: {other:?}"
            ))),
        }
    }

    /// Emits the held schema changes of the transaction being released that precede its
    /// change `before` (all that are left when `None`), each just before that change.
    fn release_schema_changes(
        &mut self,
        before: Option<u64>,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<(), Error> {
        loop {
            let Some(replay) = self.replay.as_mut() else {
                return Ok(());
            };
            let due = replay
                .schema_changes
                .front()
                .is_some_and(|c| before.is_none_or(|b| c.before_change <= b));
            if !due {
                return Ok(());
            }
            let Some(change) = replay.schema_changes.pop_front() else {
                return Ok(());
            };
            let tx = self.tx_mut("schema change")?;
            let ordinal = 2 * (tx.changes + 1) - 1;
            emit(
                tx,
                out,
                ordinal,
                EventKind::SchemaChange {
                    old: Some(change.old),
                    new: change.new,
                },
            );
        }
    }

    fn tx_mut(&mut self, what: &str) -> Result<&mut TxState, Error> {
        self.tx
            .as_mut()
            .ok_or_else(|| Error::protocol(format!("{what} message outside a transaction")))
    }

    fn next_change(&mut self) -> Result<u64, Error> {
        let tx = self.tx_mut("change")?;
        tx.changes += 1;
        Ok(2 * tx.changes)
    }

    fn position(&self, ordinal: u64) -> Result<Position, Error> {
        self.tx
            .as_ref()
            .map(|tx| Position::new(tx.commit_lsn, ordinal))
            .ok_or_else(|| Error::protocol("change outside a transaction"))
    }
}

/// The schema and column types of a relation; `None` for unconfigured tables; an error
/// when no Relation message was seen for it. Borrowed: a row costs no reference counting
/// here, only the event's schema handle does.
fn lookup<'r>(
    relations: &'r RelationCache,
    relation_id: u32,
    what: &str,
) -> Result<Option<(&'r SchemaRef, &'r CachedRelation)>, Error> {
    let Some(rel) = relations.get(relation_id) else {
        return Err(Error::protocol(format!(
            "{what} for relation id {relation_id}, but no Relation message described it in this session"
        )));
    };
    Ok(rel.schema.as_ref().map(|s| (s, rel)))
}

/// Whether `message` is one of a transaction's changes (what ordinals count).
fn is_change<T>(message: &PgOutputMessage<T>) -> bool {
    match message {
        PgOutputMessage::Insert(_)
        | PgOutputMessage::Update(_)
        | PgOutputMessage::Delete(_)
        | PgOutputMessage::Truncate(_) => true,
        PgOutputMessage::Message(m) => m.is_transactional(),
        _ => false,
    }
}

/// For a message inside an open stream: `None` if it is not buffered (Stream Start,
/// Origin), else the (sub)transaction xid it carries, if any.
fn stream_sub_xid<T: std::fmt::Debug>(
    message: &PgOutputMessage<T>,
) -> Result<Option<Option<u32>>, Error> {
    Ok(Some(match message {
        PgOutputMessage::StreamStart(_) | PgOutputMessage::Origin(_) => return Ok(None),
        PgOutputMessage::Message(m) if !m.is_transactional() => {
            return Err(Error::protocol(
                "non-transactional logical message inside a stream is not expected",
            ));
        }
        PgOutputMessage::Relation(m) => m.xid,
        PgOutputMessage::Type(m) => m.xid,
        PgOutputMessage::Insert(m) => m.xid,
        PgOutputMessage::Update(m) => m.xid,
        PgOutputMessage::Delete(m) => m.xid,
        PgOutputMessage::Truncate(m) => m.xid,
        PgOutputMessage::Message(m) => m.xid,
        other => {
            return Err(Error::protocol(format!(
                "unexpected message inside a stream: {other:?}"
            )));
        }
    }))
}

fn old_row(
    schema: &SchemaRef,
    rel: &CachedRelation,
    old: &OldTuple<TupleRef<'_>>,
    position: Position,
) -> Result<OldRow, Error> {
    let (kind, tuple) = match old {
        OldTuple::Key(t) => (OldRowKind::Key, t),
        OldTuple::Full(t) => (OldRowKind::Full, t),
    };
    Ok(OldRow {
        kind,
        values: tuples::decode_row(schema, rel, tuple, position)?,
    })
}

fn emit(tx: &mut TxState, out: &mut Vec<ChangeEvent>, ordinal: u64, kind: EventKind) {
    if !tx.begin_emitted {
        tx.begin_emitted = true;
        out.push(ChangeEvent {
            lsn: tx.change_lsn,
            position: Position::new(tx.commit_lsn, 0),
            kind: EventKind::Begin(TxBegin {
                final_lsn: tx.commit_lsn,
                commit_time_micros: tx.commit_time_micros,
                xid: tx.xid,
            }),
        });
    }
    out.push(ChangeEvent {
        lsn: tx.change_lsn,
        position: Position::new(tx.commit_lsn, ordinal),
        kind,
    });
}

/// Emits Commit for a transaction that delivered anything; transactions with nothing for
/// the sink only report their end LSN.
fn finish(tx: TxState, end_lsn: Lsn, commit_time_micros: i64, out: &mut Vec<ChangeEvent>) {
    if tx.begin_emitted {
        out.push(ChangeEvent {
            lsn: tx.commit_lsn,
            position: Position::new(tx.commit_lsn, 2 * (tx.changes + 1)),
            kind: EventKind::Commit(TxCommit {
                commit_lsn: tx.commit_lsn,
                end_lsn,
                commit_time_micros,
            }),
        });
    }
}

fn enter_stream(decoder: &mut PgOutputDecoder, xid: u32) -> Result<(), Error> {
    let mut buf = BytesMut::new();
    pgoutput::encode(
        &PgOutputMessage::StreamStart(StreamStart {
            xid,
            first_segment: false,
        }),
        &mut buf,
    )
    .map_err(|e| Error::protocol(format!("internal: {e}")))?;
    decoder
        .decode(buf.freeze())
        .map_err(|e| Error::protocol(format!("internal: {e}")))?;
    Ok(())
}

fn spill_error(err: std::io::Error) -> Error {
    Error::transient(
        "cannot buffer a large streamed transaction in a temporary file (check the temp directory's free space)",
    )
    .with_source(err)
}

#[cfg(test)]
mod tests;
