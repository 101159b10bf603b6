//! Tables without a primary key in the online snapshot: read whole under one snapshot,
//! placed in pieces while the stream waits.
//!
//! A streamed change of such a table cannot be placed relative to a key range, so the
//! merge sees the table as one chunk covering every row (`ChunkEnd::TableEnd` at once):
//! before it, every change of the table is dropped (rule 1); after it, a change is dropped
//! when the copy's snapshot shows it, delivered otherwise (rules 2 and 3). For that the
//! rows must all be in the stream before the stream's next transaction: the source
//! processes no stream message while a whole-table copy runs. The rows are placed in
//! pieces of `chunk_rows` (each between `ChunkStarted` and `ChunkCompleted` markers and
//! ending its batch), so memory stays bounded; the slot cannot advance until the last
//! piece (WAL retained grows with the table's copy time — the price of having no key).
//!
//! Resume: there is no key to continue from, so a copy cut short (a crash, a lost
//! connection) starts the table over, after a TRUNCATE of it that removes what the sink
//! got of it.

use std::time::Instant;

use cdc_core::{BackfillWindow, Error, Lsn, Row};

use super::super::merge::ChunkEnd;
use super::super::token_progress::{ChunkRecord, Step};
use super::parts::WholeCopy;
use super::{OnlineSnapshot, RETRY_DELAY};
use crate::machine::batches::EventQueue;

impl OnlineSnapshot {
    /// Whether a table without a primary key waits to be read and it is time (at `now`)
    /// to start.
    pub fn wants_whole(&self, now: Instant) -> bool {
        self.whole.is_none()
            && !self.reading
            && self.not_before.is_none_or(|t| now >= t)
            && self.next_keyless().is_some()
    }

    /// Whether a whole-table copy is running: the stream must wait until it ends.
    pub fn copying_whole(&self) -> bool {
        self.whole.is_some()
    }

    /// The next table without a primary key to read whole: its index in the driver's
    /// list (`None`: none).
    pub fn next_whole(&self) -> Option<usize> {
        self.next_keyless()
            .and_then(|index| self.catalog.get(index).copied())
    }

    fn next_keyless(&self) -> Option<usize> {
        self.merge
            .pending_tables()
            .find(|(_, t)| t.key_columns.is_empty())
            .map(|(i, _)| i)
    }

    /// The driver could not begin reading the next keyless table: a later try.
    pub fn whole_not_begun(&mut self, now: Instant) {
        self.not_before = Some(now + RETRY_DELAY * 20);
    }

    /// The driver began reading the next keyless table ([`Self::next_whole`]) under
    /// `snapshot` (text form), taken before WAL position `until` (the caller is between
    /// two transactions and holds the stream from now until [`Self::copying_whole`] is
    /// false). True when the copy goes on (the driver then reads its pieces for
    /// [`Self::whole_piece`]); false when the snapshot misses a transaction the stream
    /// already passed: the read is to be dropped, and tried again later.
    pub fn whole_begun(
        &mut self,
        snapshot_text: String,
        until: Lsn,
        now: Instant,
        out: &mut EventQueue<'_>,
    ) -> Result<bool, Error> {
        let Some(index) = self.next_keyless() else {
            return Err(Error::protocol("internal: no table to read whole"));
        };
        let Some(catalog_index) = self.catalog.get(index).copied() else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let (snapshot, shows_the_past) =
            self.snapshot_showing_the_past(index, &snapshot_text, &ChunkEnd::TableEnd)?;
        // No other read is in flight, and every later one starts after this one.
        self.merge.observe(&snapshot);
        if !shows_the_past {
            self.not_before = Some(now + RETRY_DELAY);
            return Ok(false);
        }
        let (first, next_chunk) = self
            .merge
            .tables()
            .get(index)
            .map_or((false, 0), |t| (t.chunks == 0, t.chunks));
        let tables = std::sync::Arc::clone(&self.tables);
        let Some(table) = tables.get(catalog_index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        self.open_table(index, &table.schema, first, out);
        self.merge
            .deliver_range(index, snapshot, until, 0, ChunkEnd::TableEnd)?;
        self.whole = Some(WholeCopy {
            index,
            catalog_index,
            snapshot: snapshot_text,
            until,
            next_chunk,
            rows: 0,
        });
        Ok(true)
    }

    /// The table being read whole (its index in the driver's list).
    pub fn whole_table(&self) -> Option<usize> {
        self.whole.as_ref().map(|w| w.catalog_index)
    }

    /// Places the next piece of the running whole-table copy: `rows`, the last ones when
    /// `done` (then the table's completion follows, which ends the copy).
    pub fn whole_piece(
        &mut self,
        rows: Vec<Row>,
        done: bool,
        out: &mut EventQueue<'_>,
    ) -> Result<(), Error> {
        let tables = std::sync::Arc::clone(&self.tables);
        let Some(copy) = self.whole.as_mut() else {
            return Ok(());
        };
        let Some(table) = tables.get(copy.catalog_index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let index = copy.index;
        let chunk = copy.next_chunk;
        copy.next_chunk += 1;
        copy.rows += rows.len() as u64;
        let total = copy.rows;
        let window = done.then(|| BackfillWindow {
            after: None,
            upto: None,
            snapshot: copy.snapshot.clone(),
            until: copy.until,
        });
        if done {
            self.whole = None;
        }
        let (rows, end) =
            self.place_rows(&table.schema, chunk, rows, &[], done.then_some(total), out);
        self.progress.push(Step::Chunk(ChunkRecord {
            table: index,
            end,
            rows,
            window,
            complete: done,
        }));
        Ok(())
    }

    /// The whole-table copy cannot go on under its snapshot (its read failed): the table
    /// starts over, after a TRUNCATE of it (which follows the pieces already placed).
    pub fn whole_failed(&mut self, now: Instant) {
        let Some(copy) = self.whole.take() else {
            return;
        };
        self.merge.restart_table_at_anchor(copy.index);
        if !self.truncate_first.contains(&copy.index) {
            self.truncate_first.push(copy.index);
        }
        self.not_before = Some(now + RETRY_DELAY);
    }
}
