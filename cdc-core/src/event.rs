//! Change events and the batches they travel in.

use bytes::Bytes;

use crate::{Lsn, Position, RowBlock, SchemaRef, TableName, Value};

/// A row: one value per column of its table's schema, in column order.
pub type Row = Vec<Value>;

/// Which columns of an old row carry values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OldRowKind {
    /// Only the replica identity key columns; the others are `Value::Null` placeholders and
    /// must not be read as data.
    Key,
    /// Every column (`REPLICA IDENTITY FULL`). Columns may still be `Value::Unchanged`.
    Full,
}

/// The old version of a row, as logged under the table's replica identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldRow {
    /// Which columns are meaningful.
    pub kind: OldRowKind,
    /// Values in column order, as wide as the schema.
    pub values: Row,
}

/// Transaction start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxBegin {
    /// LSN of the commit record (known up front in pgoutput).
    pub final_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 UTC.
    pub commit_time_micros: i64,
    /// Transaction id.
    pub xid: u32,
}

/// Transaction end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxCommit {
    /// LSN of the commit record.
    pub commit_lsn: Lsn,
    /// LSN just past the commit record: the position the slot may be confirmed to once this
    /// transaction is acknowledged.
    pub end_lsn: Lsn,
    /// Commit time, microseconds since 2000-01-01 UTC.
    pub commit_time_micros: i64,
}

/// Markers around the initial snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotMarker {
    /// A snapshot of the configured tables starts; rows of the following `TableStarted`
    /// tables are inserts of the snapshot. An online snapshot puts it before its first
    /// chunk, again in each run that continues an unfinished one, and before tables added
    /// or copied again on a live stream; streamed changes go on between it and `Completed`.
    Started,
    /// A previous, incomplete snapshot is abandoned and redone from scratch: the sink must
    /// discard every row it holds from snapshot events before this marker.
    ///
    /// Sources guarantee: the marker and every row of the new snapshot have positions
    /// greater than any position of the abandoned one (so position-based deduplication never
    /// drops them), and a source that restarted a snapshot for a token restarts it again if
    /// handed the same token — it never resumes the abandoned snapshot's progress.
    Restarted,
    /// The copy of one table starts.
    TableStarted(TableName),
    /// The copy of one table is complete.
    TableCompleted {
        /// The table.
        table: TableName,
        /// Rows copied.
        rows: u64,
    },
    /// Every table is copied. Consistent snapshot: streaming continues from the slot's
    /// consistent point. Online snapshot: the last chunk is merged; from here on the sink
    /// holds every table as the stream has it.
    Completed {
        /// Consistent snapshot: the slot's consistent point. Online snapshot: the stream's
        /// position when the last chunk was merged (the end of the last transaction
        /// delivered before it).
        consistent_point: Lsn,
    },
    /// Online snapshot: one chunk of `table` follows — its rows are the table's rows in a
    /// key range as of one moment, merged into the stream at this point (inserts of rows
    /// the sink does not hold yet, never a second copy of one it holds).
    ChunkStarted {
        /// The table.
        table: TableName,
        /// The chunk's number within the table's backfill, from 0.
        chunk: u64,
    },
    /// Online snapshot: the chunk announced by `ChunkStarted` is complete.
    ChunkCompleted {
        /// The table.
        table: TableName,
        /// The chunk's number within the table's backfill.
        chunk: u64,
        /// Rows in the chunk.
        rows: u64,
    },
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// A transaction starts. Its events follow, then `Commit`.
    Begin(TxBegin),
    /// A transaction ends.
    Commit(TxCommit),
    /// A row was inserted (or copied by the snapshot).
    Insert {
        /// The table's schema at this point of the stream.
        table: SchemaRef,
        /// The new row.
        new: Row,
    },
    /// Rows inserted by a snapshot's copy, left in the form the source read them (see
    /// [`RowBlock`]): one event for many rows. Only a sink that declares it takes them
    /// ([`Sink::takes_row_blocks`](crate::Sink::takes_row_blocks)) sees this kind; the
    /// pipeline hands every other sink one `Insert` per row instead, with the same values
    /// and positions. The event's position is its last row's: row `i` of `n` is at
    /// ordinal `position.ordinal - (n - 1 - i)` of the same commit LSN, and the source
    /// gives no other event a position in that range.
    InsertBlock {
        /// The table's schema.
        table: SchemaRef,
        /// The rows, as wide as the schema.
        rows: RowBlock,
    },
    /// A row was updated.
    Update {
        /// The table's schema.
        table: SchemaRef,
        /// The old row when the replica identity logged one (key columns changed, or
        /// `REPLICA IDENTITY FULL`).
        old: Option<OldRow>,
        /// The new row; unchanged TOAST columns are `Value::Unchanged`.
        new: Row,
    },
    /// A row was deleted.
    Delete {
        /// The table's schema.
        table: SchemaRef,
        /// The old row (key or full). `None` only under `REPLICA IDENTITY NOTHING` (or no
        /// primary key with `DEFAULT`), where Postgres logs no old row at all.
        old: Option<OldRow>,
    },
    /// One TRUNCATE statement, covering all its tables.
    Truncate {
        /// The truncated tables.
        tables: Vec<SchemaRef>,
        /// `TRUNCATE … CASCADE`.
        cascade: bool,
        /// `TRUNCATE … RESTART IDENTITY`.
        restart_identity: bool,
    },
    /// A table's schema changed; rows after this event use `new`.
    SchemaChange {
        /// The schema before, when known.
        old: Option<SchemaRef>,
        /// The schema from now on.
        new: SchemaRef,
    },
    /// A logical decoding message (`pg_logical_emit_message`).
    Message {
        /// Whether it was emitted inside the transaction (else immediately).
        transactional: bool,
        /// Its prefix.
        prefix: String,
        /// Its content.
        content: Bytes,
    },
    /// Snapshot progress.
    Snapshot(SnapshotMarker),
}

/// One event with its position in the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeEvent {
    /// Where the event is: the dedup key on replay.
    pub position: Position,
    /// The change's own WAL position where the source knows it (pgoutput: the start of
    /// the message that carried it; for Begin, the first change's; for Commit, the commit
    /// record's), [`Lsn::ZERO`] where it does not (snapshot rows, tests). Informational:
    /// ordering and deduplication use `position`.
    pub lsn: Lsn,
    /// What happened.
    pub kind: EventKind,
}

impl ChangeEvent {
    /// The table the event is about, for single-table events.
    pub fn table(&self) -> Option<&SchemaRef> {
        match &self.kind {
            EventKind::Insert { table, .. }
            | EventKind::InsertBlock { table, .. }
            | EventKind::Update { table, .. }
            | EventKind::Delete { table, .. } => Some(table),
            EventKind::SchemaChange { new, .. } => Some(new),
            _ => None,
        }
    }

    /// Whether `other` is a row change of the same kind as this one (insert, update or
    /// delete) to the same table (one schema object, or equal names). Runs of such events
    /// (`events.chunk_by(ChangeEvent::same_row_run)`: a snapshot chunk, a bulk insert) can
    /// be counted at once, one look-up by table name per run instead of per event.
    pub fn same_row_run(&self, other: &ChangeEvent) -> bool {
        let same = |x: &SchemaRef, y: &SchemaRef| std::sync::Arc::ptr_eq(x, y) || x.name == y.name;
        match (&self.kind, &other.kind) {
            (EventKind::Insert { table: x, .. }, EventKind::Insert { table: y, .. })
            | (EventKind::Update { table: x, .. }, EventKind::Update { table: y, .. })
            | (EventKind::Delete { table: x, .. }, EventKind::Delete { table: y, .. }) => {
                same(x, y)
            }
            _ => false,
        }
    }

    /// How many events this one stands for: a block's rows (the inserts a sink that does
    /// not take blocks is handed instead), else 1.
    pub fn events_held(&self) -> usize {
        match &self.kind {
            EventKind::InsertBlock { rows, .. } => rows.len(),
            _ => 1,
        }
    }

    /// Approximate memory held by the event, for byte-bounded batching.
    pub fn approx_size(&self) -> usize {
        let row = |r: &Row| r.iter().map(Value::approx_size).sum::<usize>();
        std::mem::size_of::<ChangeEvent>()
            + match &self.kind {
                EventKind::Insert { new, .. } => row(new),
                EventKind::InsertBlock { rows, .. } => rows.approx_size(),
                EventKind::Update { old, new, .. } => {
                    row(new) + old.as_ref().map_or(0, |o| row(&o.values))
                }
                EventKind::Delete { old, .. } => old.as_ref().map_or(0, |o| row(&o.values)),
                EventKind::Truncate { tables, .. } => tables.len() * 8,
                EventKind::Message {
                    prefix, content, ..
                } => prefix.len() + content.len(),
                _ => 0,
            }
    }
}

/// A batch of consecutive events, as the source hands them to the pipeline and the
/// pipeline to the sink.
///
/// Batches hold whole transactions or bounded chunks of a large one. Events are in
/// position order. `byte_size` is the sum of the events' [`ChangeEvent::approx_size`].
#[derive(Clone, Debug, Default)]
pub struct ChangeBatch {
    /// The events.
    pub events: Vec<ChangeEvent>,
    /// Approximate bytes held, maintained by [`ChangeBatch::push`].
    pub byte_size: usize,
    /// The end LSN of the last transaction that is complete within or before this batch:
    /// once this batch and all earlier ones are acknowledged, the source may confirm up to
    /// here. `None` when the batch ends no transaction. A batch may have no events and only
    /// a `commit_end` (progress over transactions that carried nothing for the sink).
    pub commit_end: Option<Lsn>,
}

impl ChangeBatch {
    /// An empty batch.
    pub fn new() -> Self {
        ChangeBatch::default()
    }

    /// An empty batch with room for `events` events: a source that knows about how many
    /// its next batch takes (e.g. as many as the last) saves the copies of a vector that
    /// grows by doubling.
    pub fn with_capacity(events: usize) -> Self {
        ChangeBatch {
            events: Vec::with_capacity(events),
            ..ChangeBatch::default()
        }
    }

    /// Appends an event, updating the byte count and (for `Commit`) `commit_end`.
    pub fn push(&mut self, event: ChangeEvent) {
        self.byte_size += event.approx_size();
        if let EventKind::Commit(commit) = &event.kind {
            self.commit_end = Some(commit.end_lsn);
        }
        self.events.push(event);
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the batch has no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Position of the last event.
    pub fn last_position(&self) -> Option<Position> {
        self.events.last().map(|e| e.position)
    }

    /// Position of the first event.
    pub fn first_position(&self) -> Option<Position> {
        self.events.first().map(|e| e.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_tracks_bytes_and_commit_end() {
        let mut batch = ChangeBatch::new();
        batch.push(ChangeEvent {
            lsn: crate::Lsn::ZERO,
            position: Position::new(Lsn(10), 0),
            kind: EventKind::Begin(TxBegin {
                final_lsn: Lsn(10),
                commit_time_micros: 0,
                xid: 7,
            }),
        });
        assert_eq!(batch.commit_end, None);
        batch.push(ChangeEvent {
            lsn: crate::Lsn::ZERO,
            position: Position::new(Lsn(10), 1),
            kind: EventKind::Commit(TxCommit {
                commit_lsn: Lsn(10),
                end_lsn: Lsn(18),
                commit_time_micros: 0,
            }),
        });
        assert_eq!(batch.commit_end, Some(Lsn(18)));
        assert!(batch.byte_size >= 2 * std::mem::size_of::<ChangeEvent>());
        assert_eq!(batch.last_position(), Some(Position::new(Lsn(10), 1)));
    }
}
