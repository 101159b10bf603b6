//! The simulated walsender: one replication session decoding the simulated WAL with
//! pgoutput, as PostgreSQL does it.
//!
//! What the model follows (PostgreSQL's `reorderbuffer.c`, `snapbuild.c`, `pgoutput.c`):
//! - A session reads the WAL from before every transaction still open at its start (the
//!   slot's `restart_lsn`) and skips every transaction whose
//!   commit record lies before its start position (`start_decoding_at`: the larger of the
//!   position asked for and the slot's `confirmed_flush_lsn`).
//! - Without streaming, a transaction goes out at its commit: Begin, its changes (not
//!   those of aborted subtransactions), Commit. A prepared transaction goes out so at its
//!   COMMIT PREPARED (two-phase decoding is not modelled). An empty one is sent as Begin and Commit
//!   (PostgreSQL 14) or not at all (15+), per the scenario.
//! - With streaming (protocol 2+), once the changes buffered exceed the memory limit and
//!   the reader has passed the start position, the largest transaction goes out as a
//!   stream segment (Stream Start, its changes so far tagged with their subtransaction's
//!   xid, Stream Stop), possibly many times; a subtransaction abort after that sends Stream
//!   Abort with the subtransaction's xid, the commit sends the rest as a last segment then
//!   Stream Commit, an abort sends Stream Abort (protocol 4 with parallel streaming adds
//!   the abort's LSN and time). A new session streams an unfinished transaction again from
//!   its first change.
//! - A Relation message goes before a table's first change in the session (in a streamed
//!   transaction: its first in that transaction, tagged with the change's subtransaction,
//!   counted as sent for the session once the transaction commits, and forgotten when a
//!   subtransaction's abort is streamed).
//! - A keepalive's WAL end is how far the session has decoded (`sentPtr`: the end of the
//!   last record whose output is all written), which may be inside transactions not sent
//!   yet, or before the start position while it catches up. Keepalives also come in the
//!   middle of a transaction's output (`WalSndKeepaliveIfNecessary` from
//!   `WalSndWriteData`), then with the record before's end. The source relies on this:
//!   a keepalive between two stream segments never reaches a commit not yet sent.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::BytesMut;
use cdc_core::{Lsn, ReplicaIdentity};

use super::database::{Change, Record, TABLES, TableDef, Values, record_end, record_lsn};
use crate::protocol::pgoutput::{
    self, Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Delete, Insert, OldTuple,
    PgOutputMessage, Prepare, Relation, RelationColumn, RollbackPrepared, StreamAbort,
    StreamAbortInfo, StreamCommit, StreamStart, Truncate, TupleData, Update,
};
use crate::protocol::replication::{PrimaryKeepalive, ServerMessage, XLogData};
use crate::seed_rng::SeedRng;

/// How the session decodes.
#[derive(Clone, Copy, Debug)]
pub(super) struct WalsenderOptions {
    /// Protocol 2+ with streaming on.
    pub streaming: bool,
    /// Protocol 4 with parallel streaming (Stream Abort carries LSN and time).
    pub parallel: bool,
    /// Changes buffered before the largest transaction is streamed.
    pub stream_after: usize,
    /// Empty transactions are not sent (PostgreSQL 15+).
    pub skip_empty: bool,
    /// Percent chance of a keepalive between two messages.
    pub keepalives: u64,
    /// Two-phase decoding (protocol 3+, a slot with `two_phase`, enabled at its
    /// creation): a prepared transaction goes out at its PREPARE, then COMMIT or ROLLBACK
    /// PREPARED.
    pub two_phase: bool,
}

/// What a transaction's reorder buffer holds, in order.
#[derive(Debug)]
enum Entry {
    Change(Change),
    /// Another transaction that truncated these tables committed here: its invalidations
    /// were distributed to this one (`SnapBuildDistributeSnapshotAndInval`).
    Invalidate(Vec<u32>),
}

#[derive(Debug, Default)]
struct TxBuffer {
    /// Changes not yet sent, with their subtransaction.
    changes: Vec<(u32, Entry)>,
    /// A segment of it was streamed in this session.
    streamed: bool,
    /// Subtransactions with changes in streamed segments.
    streamed_subs: HashSet<u32>,
    /// Relations whose schema went out in its segments.
    relations: HashSet<u32>,
    /// Tables it truncated, also in subtransactions that aborted: their invalidations
    /// are collected under the top-level transaction and run when it ends.
    truncated: Vec<u32>,
    /// Tables whose invalidations other transactions' commits distributed to it: run
    /// when it ends too, but not passed on by its own commit.
    distributed: Vec<u32>,
}

impl TxBuffer {
    /// Every invalidation that runs at its end.
    fn invalidations(&self) -> Vec<u32> {
        let mut all = self.truncated.clone();
        all.extend_from_slice(&self.distributed);
        all
    }
}

impl TxBuffer {
    fn has_changes(&self) -> bool {
        self.changes
            .iter()
            .any(|(_, e)| matches!(e, Entry::Change(_)))
    }
}

/// One replication session.
#[derive(Debug)]
pub(super) struct Walsender {
    options: WalsenderOptions,
    start: Lsn,
    /// The next WAL record to decode.
    cursor: usize,
    buffers: HashMap<u32, TxBuffer>,
    relations_sent: HashSet<u32>,
    /// With two-phase decoding: prepared transactions, with their PREPARE record and the
    /// invalidations that run at their end.
    prepared: HashMap<u32, (usize, Vec<u32>)>,
}

impl Walsender {
    /// A session that starts at `start` (already the larger of the position asked for
    /// and the slot's confirmed position).
    pub(super) fn new(options: WalsenderOptions, start: Lsn, wal: &[Record]) -> Self {
        Walsender {
            options,
            start,
            cursor: restart_index(wal, start),
            buffers: HashMap::new(),
            relations_sent: HashSet::new(),
            prepared: HashMap::new(),
        }
    }

    /// Whether every WAL record written so far is decoded.
    pub(super) fn caught_up(&self, wal: &[Record]) -> bool {
        self.cursor >= wal.len()
    }

    /// A keepalive: the WAL end is how far the session has read.
    pub(super) fn keepalive(&self) -> ServerMessage {
        ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end: self.sent_ptr(),
            server_clock: 0,
            reply_requested: false,
        })
    }

    /// `sentPtr`: the end of the last record decoded (the start position before any). It
    /// moves only once a record's output is all written (`XLogSendLogical`), so a
    /// keepalive sent in the middle of that output reports the record before.
    fn sent_ptr(&self) -> Lsn {
        match self.cursor.checked_sub(1) {
            Some(last) => record_end(last),
            None => self.start,
        }
    }

    /// Decodes the next WAL record, appending what the session sends to `out`.
    pub(super) fn decode_next(
        &mut self,
        wal: &[Record],
        out: &mut VecDeque<ServerMessage>,
        rng: &mut SeedRng,
    ) {
        let Some(record) = wal.get(self.cursor) else {
            return;
        };
        let index = self.cursor;
        let sent_ptr = self.sent_ptr();
        self.cursor += 1;
        let mut sent = Sent {
            out,
            lsn: record_lsn(index),
            sent_ptr,
            rng,
            keepalives: self.options.keepalives,
        };
        let passed_start = record_lsn(index) >= self.start;
        match record {
            Record::Change { xid, sub, change } => {
                let buffer = self.buffers.entry(*xid).or_default();
                buffer.truncated.extend(new_files(change));
                buffer.changes.push((*sub, Entry::Change(change.clone())));
                let buffered: usize = self.buffers.values().map(|b| b.changes.len()).sum();
                if self.options.streaming && passed_start && buffered > self.options.stream_after {
                    let largest = self
                        .buffers
                        .iter()
                        .max_by_key(|(xid, b)| (b.changes.len(), u32::MAX - **xid))
                        .map(|(xid, _)| *xid);
                    if let Some(largest) = largest {
                        self.stream_segment(largest, &mut sent);
                    }
                }
            }
            Record::SubAbort { xid, sub } => {
                let Some(buffer) = self.buffers.get_mut(xid) else {
                    return;
                };
                buffer.changes.retain(|(s, _)| s != sub);
                if buffer.streamed_subs.remove(sub) {
                    // pgoutput forgets which schemas went out in the transaction
                    // (`cleanup_rel_sync_cache`): the receiver dropped everything after the
                    // subtransaction's first change, Relation messages included.
                    buffer.relations.clear();
                    let abort = self.stream_abort(*xid, *sub, index);
                    sent.send(&abort);
                }
            }
            Record::Prepare { xid } if self.options.two_phase => {
                let xid = *xid;
                // A transaction that wrote nothing has no xid in the WAL: the decoder
                // never hears of it, at its PREPARE or its end.
                let Some(buffer) = self.buffers.remove(&xid) else {
                    return;
                };
                self.prepared.insert(xid, (index, buffer.invalidations()));
                let prepare_lsn = record_lsn(index);
                // Prepared before the session's start: the receiver has it already.
                if prepare_lsn < self.start {
                    return;
                }
                let prepare = Prepare {
                    flags: 0,
                    prepare_lsn,
                    end_lsn: record_end(index),
                    prepare_timestamp: index as i64,
                    xid,
                    gid: format!("g{xid}"),
                };
                if buffer.streamed {
                    self.buffers.insert(xid, buffer);
                    if self.buffers.get(&xid).is_some_and(TxBuffer::has_changes) {
                        self.stream_segment(xid, &mut sent);
                    }
                    self.buffers.remove(&xid);
                    sent.send(&PgOutputMessage::StreamPrepare(prepare));
                    return;
                }
                sent.send(&PgOutputMessage::BeginPrepare(BeginPrepare {
                    prepare_lsn,
                    end_lsn: record_end(index),
                    prepare_timestamp: index as i64,
                    xid,
                    gid: format!("g{xid}"),
                }));
                self.send_changes(&buffer, &mut sent);
                sent.send(&PgOutputMessage::Prepare(prepare));
            }
            Record::CommitPrepared { xid } | Record::RollbackPrepared { xid }
                if self.options.two_phase =>
            {
                let xid = *xid;
                let commit = matches!(record, Record::CommitPrepared { .. });
                let Some((prepared_at, invalidations)) = self.prepared.remove(&xid) else {
                    return;
                };
                if commit {
                    self.distribute(&invalidations);
                }
                self.invalidate(&invalidations);
                if record_lsn(index) < self.start {
                    return;
                }
                let gid = format!("g{xid}");
                sent.send(&if commit {
                    PgOutputMessage::CommitPrepared(CommitPrepared {
                        flags: 0,
                        commit_lsn: record_lsn(index),
                        end_lsn: record_end(index),
                        commit_timestamp: index as i64,
                        xid,
                        gid,
                    })
                } else {
                    PgOutputMessage::RollbackPrepared(RollbackPrepared {
                        flags: 0,
                        prepare_end_lsn: record_end(prepared_at),
                        rollback_end_lsn: record_end(index),
                        prepare_timestamp: prepared_at as i64,
                        rollback_timestamp: index as i64,
                        xid,
                        gid,
                    })
                });
            }
            // Without two-phase decoding a PREPARE sends nothing: the transaction is
            // decoded at COMMIT PREPARED as at a commit, and forgotten at ROLLBACK
            // PREPARED as at an abort (`DecodeCommit`, `DecodeAbort`).
            Record::Prepare { .. } => {}
            Record::Abort { xid } | Record::RollbackPrepared { xid } => {
                // An aborted transaction changed no catalog: nothing is invalidated.
                let Some(buffer) = self.buffers.remove(xid) else {
                    return;
                };
                if buffer.streamed {
                    sent.send(&self.stream_abort(*xid, *xid, index));
                }
            }
            Record::Commit { xid } | Record::CommitPrepared { xid } => {
                let buffer = self.buffers.remove(xid).unwrap_or_default();
                self.distribute(&buffer.truncated);
                let commit_lsn = record_lsn(index);
                if commit_lsn < self.start {
                    self.invalidate(&buffer.invalidations());
                    return;
                }
                if buffer.streamed {
                    let xid = *xid;
                    let relations = buffer.relations.clone();
                    self.buffers.insert(xid, buffer);
                    if self.buffers.get(&xid).is_some_and(TxBuffer::has_changes) {
                        self.stream_segment(xid, &mut sent);
                    }
                    let invalidations = self
                        .buffers
                        .remove(&xid)
                        .map(|b| b.invalidations())
                        .unwrap_or_default();
                    self.relations_sent.extend(relations);
                    self.invalidate(&invalidations);
                    sent.send(&PgOutputMessage::StreamCommit(StreamCommit {
                        xid,
                        flags: 0,
                        commit_lsn,
                        end_lsn: record_end(index),
                        commit_timestamp: index as i64,
                    }));
                    return;
                }
                if !buffer.has_changes() && self.options.skip_empty {
                    self.invalidate(&buffer.invalidations());
                    return;
                }
                sent.send(&PgOutputMessage::Begin(Begin {
                    final_lsn: commit_lsn,
                    commit_timestamp: index as i64,
                    xid: *xid,
                }));
                self.send_changes(&buffer, &mut sent);
                // The transaction's invalidations run again once it is replayed.
                self.invalidate(&buffer.invalidations());
                sent.send(&PgOutputMessage::Commit(Commit {
                    flags: 0,
                    commit_lsn,
                    end_lsn: record_end(index),
                    commit_timestamp: index as i64,
                }));
            }
        }
    }

    /// A whole transaction's changes (not streamed), each table's schema before its first
    /// change in the session.
    fn send_changes(&mut self, buffer: &TxBuffer, sent: &mut Sent<'_>) {
        for (_, entry) in &buffer.changes {
            let change = match entry {
                Entry::Change(change) => change,
                Entry::Invalidate(tables) => {
                    self.invalidate(tables);
                    continue;
                }
            };
            self.invalidate_truncated(change);
            for table in tables_of(change) {
                if self.relations_sent.insert(table.relation_id) {
                    sent.send(&relation(table, None));
                }
            }
            sent.send(&data_message(change, None));
        }
    }

    /// A TRUNCATE that gives a table a new file invalidates its relation cache entry, and
    /// pgoutput (`rel_sync_cache_relation_cb`) sends the schema again, in this session
    /// and in every streamed transaction.
    fn invalidate_truncated(&mut self, change: &Change) {
        let tables = new_files(change);
        self.invalidate(&tables);
    }

    /// A transaction that truncated `tables` committed: every transaction still in the
    /// reorder buffer runs its invalidations at this point of its changes, and at its end.
    fn distribute(&mut self, tables: &[u32]) {
        if tables.is_empty() {
            return;
        }
        for buffer in self.buffers.values_mut() {
            buffer.changes.push((0, Entry::Invalidate(tables.to_vec())));
            buffer.distributed.extend_from_slice(tables);
        }
    }

    /// The schemas of `tables` go out again before their next change.
    fn invalidate(&mut self, tables: &[u32]) {
        for table in tables {
            self.relations_sent.remove(table);
            for buffer in self.buffers.values_mut() {
                buffer.relations.remove(table);
            }
        }
    }

    fn stream_abort(&self, xid: u32, subxid: u32, index: usize) -> PgOutputMessage {
        PgOutputMessage::StreamAbort(StreamAbort {
            xid,
            subxid,
            abort: self.options.parallel.then(|| StreamAbortInfo {
                abort_lsn: record_lsn(index),
                abort_timestamp: index as i64,
            }),
        })
    }

    /// Sends transaction `xid`'s buffered changes as one stream segment.
    fn stream_segment(&mut self, xid: u32, sent: &mut Sent<'_>) {
        let Some(buffer) = self.buffers.get_mut(&xid) else {
            return;
        };
        sent.send(&PgOutputMessage::StreamStart(StreamStart {
            xid,
            first_segment: !buffer.streamed,
        }));
        buffer.streamed = true;
        let changes = std::mem::take(&mut buffer.changes);
        for (sub, entry) in changes {
            let change = match entry {
                Entry::Change(change) => change,
                Entry::Invalidate(tables) => {
                    self.invalidate(&tables);
                    continue;
                }
            };
            self.invalidate_truncated(&change);
            let Some(buffer) = self.buffers.get_mut(&xid) else {
                return;
            };
            for table in tables_of(&change) {
                // In a stream, pgoutput counts a schema as sent per transaction only, and
                // tags it with the subtransaction of the change it goes before.
                if buffer.relations.insert(table.relation_id) {
                    sent.send(&relation(table, Some(sub)));
                }
            }
            buffer.streamed_subs.insert(sub);
            sent.send(&data_message(&change, Some(sub)));
        }
        sent.send(&PgOutputMessage::StreamStop);
    }
}

/// Messages going out for the record at `lsn`, with the session's `sentPtr` still at
/// `sent_ptr` (the record before).
struct Sent<'a> {
    out: &'a mut VecDeque<ServerMessage>,
    lsn: Lsn,
    sent_ptr: Lsn,
    rng: &'a mut SeedRng,
    /// Percent chance of a keepalive after each message (the walsender sends one when
    /// `wal_sender_timeout` is half over, also in the middle of a transaction's output).
    keepalives: u64,
}

impl Sent<'_> {
    fn send(&mut self, message: &PgOutputMessage) {
        if self.rng.chance(self.keepalives) {
            self.out
                .push_back(ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
                    wal_end: self.sent_ptr,
                    server_clock: 0,
                    reply_requested: false,
                }));
        }
        let mut data = BytesMut::new();
        if let Err(e) = pgoutput::encode(message, &mut data) {
            // The model only writes encodable messages: a failure here is the model's.
            panic!("the simulated walsender wrote an unencodable message: {e}");
        }
        self.out.push_back(ServerMessage::XLogData(XLogData {
            wal_start: self.lsn,
            wal_end: self.lsn,
            server_clock: 0,
            data: data.freeze(),
        }));
    }
}

fn tables_of(change: &Change) -> Vec<&'static TableDef> {
    let indexes = match change {
        Change::Insert { table, .. }
        | Change::Update { table, .. }
        | Change::Delete { table, .. } => {
            vec![*table]
        }
        Change::Truncate { tables, .. } => tables.clone(),
    };
    indexes.into_iter().filter_map(|t| TABLES.get(t)).collect()
}

/// The relation ids of the tables a TRUNCATE gave new files.
fn new_files(change: &Change) -> Vec<u32> {
    match change {
        Change::Truncate { new_files, .. } => new_files
            .iter()
            .filter_map(|t| TABLES.get(*t))
            .map(|t| t.relation_id)
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn relation(table: &TableDef, xid: Option<u32>) -> PgOutputMessage {
    let full = table.key.is_empty();
    PgOutputMessage::Relation(Relation {
        xid,
        relation_id: table.relation_id,
        namespace: "public".into(),
        name: table.name.into(),
        replica_identity: if full {
            ReplicaIdentity::Full
        } else {
            ReplicaIdentity::Default
        },
        columns: table
            .columns
            .iter()
            .enumerate()
            .map(|(i, (name, type_oid))| RelationColumn {
                // Under REPLICA IDENTITY FULL every column is part of the identity.
                flags: u8::from(full || table.key.contains(&i)),
                name: (*name).into(),
                type_oid: *type_oid,
                type_modifier: -1,
            })
            .collect(),
    })
}

fn tuple(values: &Values) -> TupleData {
    TupleData::new(
        values
            .iter()
            .map(|v| match v {
                Some(text) => ColumnValue::Text(bytes::Bytes::copy_from_slice(text.as_bytes())),
                None => ColumnValue::Null,
            })
            .collect(),
    )
}

/// The old row as the replica identity sends it: the key columns only (the others NULL),
/// or the whole row under `FULL`.
fn old_tuple(table: &TableDef, old: &Values) -> OldTuple {
    if table.key.is_empty() {
        return OldTuple::Full(tuple(old));
    }
    let key_only: Values = old
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if table.key.contains(&i) {
                v.clone()
            } else {
                None
            }
        })
        .collect();
    OldTuple::Key(tuple(&key_only))
}

fn data_message(change: &Change, xid: Option<u32>) -> PgOutputMessage {
    let def = |t: usize| TABLES.get(t).copied().unwrap_or(TABLES[0]);
    match change {
        Change::Insert { table, new } => PgOutputMessage::Insert(Insert {
            xid,
            relation_id: def(*table).relation_id,
            new: tuple(new),
        }),
        Change::Update { table, old, new } => {
            let table = def(*table);
            // The old key goes only when the key changed; the whole old row always
            // under FULL.
            let old = (table.key.is_empty() || table.identity(old) != table.identity(new))
                .then(|| old_tuple(&table, old));
            PgOutputMessage::Update(Update {
                xid,
                relation_id: table.relation_id,
                old,
                new: tuple(new),
            })
        }
        Change::Delete { table, old } => {
            let table = def(*table);
            PgOutputMessage::Delete(Delete {
                xid,
                relation_id: table.relation_id,
                old: old_tuple(&table, old),
            })
        }
        Change::Truncate { tables, .. } => PgOutputMessage::Truncate(Truncate {
            xid,
            options: 0,
            relation_ids: tables
                .iter()
                .filter_map(|t| TABLES.get(*t))
                .map(|t| t.relation_id)
                .collect(),
        }),
    }
}

/// Where a session starting at `start` begins to read (the slot's `restart_lsn`): the first
/// record of the oldest transaction that had not ended before `start`, or else the first
/// record at or after it. Everything before belongs to transactions the session skips.
fn restart_index(wal: &[Record], start: Lsn) -> usize {
    let mut first_of: HashMap<u32, usize> = HashMap::new();
    let mut ended_before: HashSet<u32> = HashSet::new();
    for (index, record) in wal.iter().enumerate() {
        match record {
            Record::Change { xid, .. } | Record::SubAbort { xid, .. } | Record::Prepare { xid } => {
                first_of.entry(*xid).or_insert(index);
            }
            Record::Commit { xid }
            | Record::Abort { xid }
            | Record::CommitPrepared { xid }
            | Record::RollbackPrepared { xid } => {
                first_of.entry(*xid).or_insert(index);
                if record_lsn(index) < start {
                    ended_before.insert(*xid);
                }
            }
        }
    }
    let at_start = (0..wal.len())
        .find(|&i| record_lsn(i) >= start)
        .unwrap_or(wal.len());
    first_of
        .iter()
        .filter(|(xid, _)| !ended_before.contains(*xid))
        .map(|(_, &index)| index)
        .chain(std::iter::once(at_start))
        .min()
        .unwrap_or(at_start)
}
