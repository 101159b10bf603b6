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

use std::sync::Arc;
use std::time::Instant;

use cdc_core::{BackfillWindow, Error, Result};
use cdc_pgoutput::backfill::merge::ChunkEnd;

use super::parts::WholeCopy;
use super::{BackfillPhase, RETRY_DELAY};
use crate::conn::sql_session::SqlSession;
use crate::snapshot::WholeTableRead;
use crate::source::pending::EventQueue;
use cdc_pgoutput::backfill::token_progress::{ChunkRecord, Step};

impl BackfillPhase {
    /// Whether a table without a primary key waits to be read and it is time to start.
    pub(crate) fn wants_whole(&self) -> bool {
        self.whole.is_none()
            && self.in_flight.is_none()
            && self.not_before.is_none_or(|t| Instant::now() >= t)
            && self.next_keyless().is_some()
    }

    /// Whether a whole-table copy is running: the stream must wait until it ends.
    pub(crate) fn copying_whole(&self) -> bool {
        self.whole.is_some()
    }

    fn next_keyless(&self) -> Option<usize> {
        self.merge
            .pending_tables()
            .find(|(_, t)| t.key_columns.is_empty())
            .map(|(i, _)| i)
    }

    /// Starts reading the next table without a primary key (the caller is between two
    /// transactions and holds the stream from now until [`Self::copying_whole`] is
    /// false), and places its first piece. A snapshot that misses a transaction the
    /// stream already passed, or a transient failure, is retried later.
    pub(crate) async fn start_whole(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let Some(index) = self.next_keyless() else {
            return Ok(());
        };
        let Some(&catalog_index) = self.catalog.get(index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let tables = Arc::clone(&self.tables);
        let Some(table) = tables.get(catalog_index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let begun = match SqlSession::connect(&self.options.connection).await {
            Ok(session) => {
                WholeTableRead::begin(session, table, self.options.in_recovery, self.options.wal)
                    .await
            }
            Err(e) => Err(e),
        };
        let (read, start) = match begun {
            Ok(begun) => begun,
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, table = %table.schema.name, "cannot start reading a table without a primary key; retrying");
                self.not_before = Some(Instant::now() + RETRY_DELAY * 20);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let (snapshot, shows_the_past) =
            self.snapshot_showing_the_past(index, &start.snapshot, &ChunkEnd::TableEnd)?;
        // No other read is in flight, and every later one starts after this one.
        self.merge.observe(&snapshot);
        if !shows_the_past {
            // Dropping the read ends its connection and so its transaction.
            self.not_before = Some(Instant::now() + RETRY_DELAY);
            return Ok(());
        }
        let first = self
            .merge
            .tables()
            .get(index)
            .is_some_and(|t| t.chunks == 0);
        let next_chunk = self.merge.tables().get(index).map_or(0, |t| t.chunks);
        self.open_table(index, &table.schema, first, out);
        self.merge
            .deliver_range(index, snapshot, start.until, 0, ChunkEnd::TableEnd)?;
        self.whole = Some(WholeCopy {
            index,
            catalog_index,
            read,
            snapshot: start.snapshot,
            until: start.until,
            next_chunk,
            rows: 0,
        });
        self.next_whole_piece(out).await
    }

    /// Places the next piece of the running whole-table copy (and, after its last rows,
    /// the table's completion, which ends the copy).
    pub(crate) async fn next_whole_piece(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let tables = Arc::clone(&self.tables);
        let limit = self.options.chunk_rows.max(1);
        let Some(copy) = self.whole.as_mut() else {
            return Ok(());
        };
        let Some(table) = tables.get(copy.catalog_index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let rows = match copy.read.next_rows(table, limit).await {
            Ok(rows) => rows,
            Err(e) if e.is_transient() => {
                // The copy cannot go on under its snapshot: the table starts over, after a
                // TRUNCATE of it (which follows the pieces already placed).
                tracing::warn!(error = %e, table = %table.schema.name, "reading a table without a primary key failed; copying it again");
                let index = copy.index;
                self.whole = None;
                self.merge.restart_table_at_anchor(index);
                if !self.truncate_first.contains(&index) {
                    self.truncate_first.push(index);
                }
                self.not_before = Some(Instant::now() + RETRY_DELAY);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let done = copy.read.is_done();
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
}
