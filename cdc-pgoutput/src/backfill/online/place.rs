//! Placing the online snapshot's chunks into the stream: at the anchor between two
//! transactions, each chunk between its markers, with the table's and the snapshot's
//! start and completion around them, and what the resume token needs of each.

use cdc_core::{
    BackfillWindow, ChangeEvent, Error, EventKind, Lsn, Position, Row, SchemaRef, SnapshotMarker,
};

use super::super::merge::{ChunkEnd, Frontier, key_of};
use super::super::token_progress::{ChunkRecord, ChunkRows, Step, key_text};
use super::super::xid_snapshot::XidSnapshot;
use super::parts::{ChunkRead, Request};
use super::{OnlineSnapshot, parse_key};
use crate::machine::batches::EventQueue;
use crate::machine::consistent::schema_for_rows;

impl OnlineSnapshot {
    /// What goes before a table's next chunk at the anchor: a TRUNCATE of it when its
    /// copy starts over (then the sink holds nothing of it when the rows come), and its
    /// `TableStarted` marker before its `first` chunk.
    ///
    /// The phase's first table opened is preceded by `SnapshotMarker::Started` (again in
    /// each run that resumes an unfinished backfill, and for tables added or copied again
    /// on a live stream), so a sink or a metric sees the backfill begin as it sees a
    /// consistent snapshot begin.
    pub(super) fn open_table(
        &mut self,
        index: usize,
        schema: &SchemaRef,
        first: bool,
        out: &mut EventQueue<'_>,
    ) {
        if self.announced.is_none() {
            let position = self.anchor_position();
            self.announced = Some(position);
            out.push_back(ChangeEvent {
                lsn: Lsn::ZERO,
                position,
                kind: EventKind::Snapshot(SnapshotMarker::Started),
            });
        }
        if let Some(at) = self.truncate_first.iter().position(|&t| t == index) {
            self.truncate_first.swap_remove(at);
            let position = self.anchor_position();
            out.push_back(ChangeEvent {
                lsn: Lsn::ZERO,
                position,
                kind: EventKind::Truncate {
                    tables: vec![schema.clone()],
                    cascade: false,
                    restart_identity: false,
                },
            });
            self.progress.push(Step::Restart {
                table: index,
                at: position,
            });
        }
        if first {
            let position = self.anchor_position();
            out.push_back(ChangeEvent {
                lsn: Lsn::ZERO,
                position,
                kind: EventKind::Snapshot(SnapshotMarker::TableStarted(schema.name.clone())),
            });
        }
    }

    /// Puts a chunk's rows at the anchor between its `ChunkStarted` and `ChunkCompleted`
    /// markers, followed by the table's `TableCompleted { rows: table_rows }` when given,
    /// and by `SnapshotMarker::Completed` when that was the last table to copy (its
    /// `consistent_point`: the stream position from which the sink holds every table).
    /// Returns the rows as the token needs them (where they are, and where their keys are:
    /// `key_columns`) and the position of the last marker.
    pub(super) fn place_rows(
        &mut self,
        schema: &SchemaRef,
        chunk: u64,
        rows: Vec<Row>,
        key_columns: &[usize],
        table_rows: Option<u64>,
        out: &mut EventQueue<'_>,
    ) -> (ChunkRows, Position) {
        let table = &schema.name;
        let schema = &schema_for_rows(schema);
        let position = self.anchor_position();
        out.push_back(ChangeEvent {
            lsn: Lsn::ZERO,
            position,
            kind: EventKind::Snapshot(SnapshotMarker::ChunkStarted {
                table: table.clone(),
                chunk,
            }),
        });
        let count = rows.len();
        let mut first = None;
        for row in rows {
            let position = self.anchor_position();
            first.get_or_insert(position);
            out.push_back(ChangeEvent {
                lsn: Lsn::ZERO,
                position,
                kind: EventKind::Insert {
                    table: schema.clone(),
                    new: row,
                },
            });
        }
        let mut end = self.anchor_position();
        out.push_back(ChangeEvent {
            lsn: Lsn::ZERO,
            position: end,
            kind: EventKind::Snapshot(SnapshotMarker::ChunkCompleted {
                table: table.clone(),
                chunk,
                rows: count as u64,
            }),
        });
        if let Some(total) = table_rows {
            end = self.anchor_position();
            out.push_back(ChangeEvent {
                lsn: Lsn::ZERO,
                position: end,
                kind: EventKind::Snapshot(SnapshotMarker::TableCompleted {
                    table: table.clone(),
                    rows: total,
                }),
            });
            if !self.copies() {
                end = self.anchor_position();
                out.push_back(ChangeEvent {
                    lsn: Lsn::ZERO,
                    position: end,
                    kind: EventKind::Snapshot(SnapshotMarker::Completed {
                        consistent_point: self.merge.processed(),
                    }),
                });
            }
        }
        let rows = ChunkRows {
            first,
            count,
            key_columns: key_columns.to_vec(),
        };
        (rows, end)
    }

    /// Where the chunk `read` for `request` ends: a range chunk at its range's end (rows at
    /// its end may have gone since the boundaries were found), unless it was cut short at
    /// its cap; a chunk of the next rows at its last row; a read that reached the table's
    /// end at the table's end.
    pub(super) fn chunk_end(&self, request: &Request, read: &ChunkRead) -> Result<ChunkEnd, Error> {
        let (Some(state), Some(table)) = (
            self.merge.tables().get(request.index),
            self.tables.get(request.catalog_index),
        ) else {
            return Err(Error::protocol("internal: chunk of an unknown table"));
        };
        let key_columns = &state.key_columns;
        Ok(match (&request.upto, read.rows.last()) {
            _ if read.complete => ChunkEnd::TableEnd,
            (Some(_), Some(last)) if read.cut_short => ChunkEnd::Key(key_of(key_columns, last)?),
            (Some(upto), _) => ChunkEnd::Key(parse_key(table, upto)?),
            (None, Some(last)) => ChunkEnd::Key(key_of(key_columns, last)?),
            (None, None) => ChunkEnd::TableEnd,
        })
    }

    /// Places one chunk, ending at `end` ([`Self::chunk_end`]), at the anchor (its
    /// snapshot already checked against what the stream passed).
    pub(super) fn place(
        &mut self,
        request: &Request,
        read: ChunkRead,
        snapshot: XidSnapshot,
        end: ChunkEnd,
        out: &mut EventQueue<'_>,
    ) -> Result<(), Error> {
        let index = request.index;
        let Some(state) = self.merge.tables().get(index) else {
            return Ok(());
        };
        let chunk = state.chunks;
        let first = state.chunks == 0;
        let key_columns = state.key_columns.clone();
        let after = match &state.frontier {
            Frontier::UpTo(key) => Some(key_text(key)?),
            _ => None,
        };
        let tables = std::sync::Arc::clone(&self.tables);
        let Some(table_entry) = self.catalog.get(index).and_then(|&c| tables.get(c)) else {
            return Ok(());
        };
        let schema = table_entry.schema.clone();
        self.open_table(index, &schema, first, out);
        let count = read.rows.len();
        let upto = match &end {
            ChunkEnd::Key(key) => Some(key_text(key)?),
            ChunkEnd::TableEnd => None,
        };
        let complete = end == ChunkEnd::TableEnd;
        // The merge needs only the range and the count; the rows then move into their
        // events, and only their keys are kept (see `ChunkRows`).
        self.merge
            .deliver_range(index, snapshot, read.until, count, end)?;
        let total = self.merge.tables().get(index).map_or(0, |s| s.rows);
        let (rows, end) = self.place_rows(
            &schema,
            chunk,
            read.rows,
            &key_columns,
            complete.then_some(total),
            out,
        );
        self.progress.push(Step::Chunk(ChunkRecord {
            table: index,
            end,
            rows,
            window: Some(BackfillWindow {
                after,
                upto,
                snapshot: read.snapshot,
                until: read.until,
            }),
            complete,
        }));
        Ok(())
    }
}
