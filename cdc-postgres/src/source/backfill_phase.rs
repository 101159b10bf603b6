//! The online snapshot while the stream runs: when to read the next chunks, reading them
//! on ordinary connections, placing their rows in the stream with positions and markers,
//! passing every streamed event through the merge, and the resume token's progress.
//!
//! The merge rules and why they hold are in `cdc_pgoutput::backfill::merge`. This module
//! adds the I/O around it and the bookkeeping that makes the progress in a token match
//! exactly the events the token covers, even when a batch ends in the middle of a chunk.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cdc_core::{
    BackfillProgress, BackfillWindow, ChangeEvent, Error, EventKind, Lsn, Position, Result,
    SnapshotMarker, TableBackfill, TableName,
};
use cdc_pgoutput::backfill::key_order::KeyOrder;
use cdc_pgoutput::backfill::merge::{Backfill, ChunkEnd, Frontier, TableState, Window, key_of};
use cdc_pgoutput::backfill::xid_snapshot::XidSnapshot;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::backfill_keys::{key_columns, key_order, key_text, parse_key};
use super::backfill_progress::{ChunkRecord, ChunkRows, CoveredProgress, Step};
use crate::catalog::CatalogTable;
use crate::conn::{ConnectionConfig, connect_sql};
use crate::snapshot::{ChunkRead, chunk_boundaries, read_chunk};

mod whole;

/// Ordinals of snapshot rows and markers start here, above any ordinal a transaction's
/// own events can have, so that rows placed between two transactions order after the
/// earlier one's events (see [`BackfillPhase::anchor_position`]).
const ANCHOR_ORDINAL_BASE: u64 = 1 << 62;

/// How long to wait before reading a chunk again after its snapshot missed a transaction
/// the stream already passed (a commit not yet visible, e.g. waiting for a synchronous
/// standby), or after a reader's connection failed.
const RETRY_DELAY: Duration = Duration::from_millis(50);

/// Options of the online snapshot.
#[derive(Clone, Debug)]
pub(crate) struct BackfillOptions {
    pub connection: ConnectionConfig,
    pub chunk_rows: usize,
    pub readers: usize,
    pub in_recovery: bool,
}

/// One delivered chunk as the token needs it: which rows it put where.
/// The running online snapshot.
#[derive(Debug)]
pub(crate) struct BackfillPhase {
    merge: Backfill,
    /// Catalog entry of each backfilled table (same index as the merge's tables).
    catalog: Vec<usize>,
    tables: Arc<Vec<CatalogTable>>,
    options: BackfillOptions,
    readers: Vec<Client>,
    /// Where the previous anchor put its rows, and the next ordinal there.
    anchor_lsn: Lsn,
    next_ordinal: u64,
    /// The progress the handed-out batches cover, and the steps placed after it.
    progress: CoveredProgress,
    not_before: Option<Instant>,
    /// Tables whose next chunk must be preceded by a TRUNCATE (copied again on request).
    truncate_first: Vec<usize>,
    /// A read round running in the background: the readers come back with the results.
    in_flight: Option<JoinHandle<RoundResult>>,
    /// See [`Self::optimistic`].
    optimistic: bool,
    /// The last position handed out before this phase began (a restart or reconnect):
    /// no chunk is placed before the stream has passed its transaction, so new rows order
    /// after it and before everything the stream sends next.
    floor: Option<Position>,
    /// Signalled when a background round finishes.
    round_done: Arc<Notify>,
    /// Set by the background round just before it signals (its handle may not report
    /// finished for a moment longer).
    round_ready: Arc<AtomicBool>,
    /// A table without a primary key being read whole (the stream waits meanwhile).
    whole: Option<whole::WholeCopy>,
    /// Whether this phase put its `SnapshotMarker::Started` out yet (before its first
    /// placed row or marker).
    announced: bool,
}

/// One chunk request of a read round.
#[derive(Debug)]
struct Request {
    /// The table's index in the merge.
    index: usize,
    catalog_index: usize,
    /// The key the chunk continues after (text form; `None`: the table's start).
    after: Option<Vec<String>>,
    /// The key the chunk ends at (inclusive), when the round split the table among
    /// several readers; `None`: the next `chunk_rows` rows.
    upto: Option<Vec<String>>,
}

/// One table's share of a read round: `chunks` consecutive chunks from `after`.
#[derive(Debug)]
struct TablePlan {
    index: usize,
    catalog_index: usize,
    after: Option<Vec<String>>,
    chunks: usize,
}

/// What a background read round hands back: its connections and each request's result,
/// a table's chunks together and in key order.
type RoundResult = (Vec<Client>, Vec<(Request, Result<ChunkRead>)>);

impl BackfillPhase {
    /// A backfill of `tables` (catalog indexes into `catalog_tables`), starting where
    /// `progress` says (a fresh start: every table not started), with the stream at
    /// `processed` (where it starts) and the last handed-out position `after`.
    pub(crate) fn new(
        catalog_tables: Arc<Vec<CatalogTable>>,
        progress: BackfillProgress,
        processed: Lsn,
        after: Option<Position>,
        options: BackfillOptions,
    ) -> Result<Self> {
        let mut states = Vec::new();
        let mut catalog = Vec::new();
        let mut covered = BackfillProgress::default();
        let mut truncate_first = Vec::new();
        for entry in progress.tables {
            let Some(index) = catalog_tables
                .iter()
                .position(|t| t.schema.name == entry.table)
            else {
                // No longer configured: it simply stops being delivered.
                continue;
            };
            let Some(table) = catalog_tables.get(index) else {
                continue;
            };
            // A key whose order only the server knows (e.g. text under a linguistic
            // collation) cannot be merged chunk by chunk: such a table is read whole, like
            // a table without a key.
            let (key_columns, order) = match key_order(table) {
                Ok(order) => (key_columns(table)?, order),
                Err(e) if e.kind() == cdc_core::ErrorKind::Config => {
                    tracing::info!(table = %table.schema.name, reason = %e, "the online snapshot reads this table whole");
                    (Vec::new(), KeyOrder::new(Vec::new()))
                }
                Err(e) => return Err(e),
            };
            let whole = key_columns.is_empty();
            let keyed_progress = entry.upto.is_some()
                || entry
                    .windows
                    .iter()
                    .any(|w| w.after.is_some() || w.upto.is_some());
            let (frontier, windows) = if whole && keyed_progress {
                // Copied by key before (an earlier version ordered this key itself): the
                // token's ranges mean nothing to a whole-table read, so the table is
                // copied again, after a TRUNCATE of it.
                tracing::warn!(table = %entry.table, "copying the table again: its copy was made in key order, which this run cannot reproduce");
                truncate_first.push(states.len());
                (Frontier::NotStarted, Vec::new())
            } else {
                if whole && !entry.done && (entry.chunks > 0 || entry.rows > 0) {
                    // Its copy began but did not complete: the sink holds part of it and
                    // there is no key to continue from, so it is copied again after a
                    // TRUNCATE of it.
                    truncate_first.push(states.len());
                }
                restored_frontier_and_windows(table, &entry, processed)?
            };
            states.push(TableState {
                table: entry.table.clone(),
                key_columns,
                order,
                frontier,
                windows,
                chunks: entry.chunks,
                rows: entry.rows,
            });
            catalog.push(index);
            covered.tables.push(entry);
        }
        let (anchor_lsn, next_ordinal) = match after {
            Some(p) if p.ordinal >= ANCHOR_ORDINAL_BASE => (p.commit_lsn, p.ordinal + 1),
            _ => (Lsn::ZERO, ANCHOR_ORDINAL_BASE),
        };
        // A token that ends among chunk rows was taken with the stream at their anchor +
        // 1, which may be past its `commit_end` (an idle keepalive moved the stream on):
        // no transaction in between carried anything, so the stream stands there again,
        // and the next rows order after the token's.
        let processed = match after {
            Some(p) if p.ordinal >= ANCHOR_ORDINAL_BASE => processed.max(Lsn(p.commit_lsn.0 + 1)),
            _ => processed,
        };
        Ok(BackfillPhase {
            merge: Backfill::new(states, processed),
            catalog,
            tables: catalog_tables,
            options,
            readers: Vec::new(),
            anchor_lsn,
            next_ordinal,
            progress: CoveredProgress::new(covered),
            not_before: None,
            truncate_first,
            in_flight: None,
            optimistic: true,
            floor: after,
            round_done: Arc::new(Notify::new()),
            round_ready: Arc::new(AtomicBool::new(false)),
            whole: None,
            announced: false,
        })
    }

    /// The same backfill for a new replication session starting at `start`, from the
    /// progress the handed-out batches cover (`covered`; chunk rows still queued when the
    /// connection was lost are gone with the queue, so they are read again), with new
    /// positions after `after`.
    pub(crate) fn for_new_session(
        &self,
        covered: Option<BackfillProgress>,
        start: Lsn,
        after: Option<Position>,
    ) -> Result<Self> {
        let progress = match covered {
            Some(progress) => progress,
            None => Self::fresh_progress(&self.tables),
        };
        let mut phase = Self::new(
            self.tables.clone(),
            progress,
            start,
            after,
            self.options.clone(),
        )?;
        for &index in &self.truncate_first {
            if let Some(state) = self.merge.tables().get(index) {
                phase.restart(&state.table)?;
            }
        }
        Ok(phase)
    }

    /// The progress of a fresh backfill of every table in `tables`.
    pub(crate) fn fresh_progress(tables: &[CatalogTable]) -> BackfillProgress {
        Self::with_new_tables(BackfillProgress::default(), tables)
    }

    /// The progress of a stream whose sink holds every table of `tables` in full.
    pub(crate) fn all_done(tables: &[CatalogTable]) -> BackfillProgress {
        let mut progress = Self::fresh_progress(tables);
        for entry in &mut progress.tables {
            entry.done = true;
        }
        progress
    }

    /// Copies `table` again from its first row: a TRUNCATE of the table goes first (at
    /// the anchor of its first chunk), so the sink drops its copy before the new rows.
    pub(crate) fn restart(&mut self, table: &TableName) -> Result<()> {
        let Some(index) = self.merge.tables().iter().position(|t| &t.table == table) else {
            return Err(Error::config(format!(
                "cannot copy {table} again: it is not one of the stream's tables"
            )));
        };
        self.merge.restart_table_at_anchor(index);
        if !self.truncate_first.contains(&index) {
            self.truncate_first.push(index);
        }
        Ok(())
    }

    /// `progress` plus a fresh entry for every table of `tables` it does not list: a table
    /// added to the stream since (by configuration or to the publication) is backfilled
    /// alone; the others continue where they were.
    pub(crate) fn with_new_tables(
        mut progress: BackfillProgress,
        tables: &[CatalogTable],
    ) -> BackfillProgress {
        for table in tables {
            if !progress.tables.iter().any(|t| t.table == table.schema.name) {
                progress.tables.push(TableBackfill {
                    table: table.schema.name.clone(),
                    done: false,
                    upto: None,
                    chunks: 0,
                    rows: 0,
                    windows: Vec::new(),
                });
            }
        }
        progress
    }

    /// Whether chunks remain to be read and it is time to read them.
    pub(crate) fn wants_chunk(&self) -> bool {
        self.in_flight.is_none()
            && self.whole.is_none()
            && self.keyed_pending().next().is_some()
            && self.not_before.is_none_or(|t| Instant::now() >= t)
    }

    /// Tables with a primary key whose chunks remain to be read.
    fn keyed_pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.merge
            .pending_tables()
            .filter(|(_, t)| !t.key_columns.is_empty())
            .map(|(i, _)| i)
    }

    /// Whether rows are left to copy (a table not yet complete, or one to copy again).
    pub(crate) fn copies(&self) -> bool {
        self.whole.is_some()
            || !self.truncate_first.is_empty()
            || self.merge.pending_tables().next().is_some()
    }

    /// Whether nothing is left to read or decide (the phase can end once the token's
    /// progress says so too).
    pub(crate) fn is_finished(&self) -> bool {
        self.whole.is_none() && self.merge.is_finished() && self.progress.is_finished()
    }

    /// See [`CoveredProgress::progress_for`].
    pub(crate) fn progress_for(
        &mut self,
        last: Option<Position>,
        commit_end: Option<Lsn>,
    ) -> Option<BackfillProgress> {
        self.progress.progress_for(last, commit_end)
    }

    /// Passes one streamed event through the merge: `Some` to deliver.
    pub(crate) fn on_event(&mut self, event: ChangeEvent) -> Result<Option<ChangeEvent>> {
        if let EventKind::Truncate { tables, .. } = &event.kind {
            for table in tables {
                if let Some(index) = self
                    .merge
                    .tables()
                    .iter()
                    .position(|t| t.table == table.name)
                {
                    self.progress.push(Step::Restart {
                        table: index,
                        at: event.position,
                    });
                }
            }
        }
        self.merge.on_event(event)
    }

    /// The stream is idle up to `lsn`.
    pub(crate) fn progress(&mut self, lsn: Lsn) {
        self.merge.progress(lsn);
    }

    /// The position of the next row or marker placed at the current anchor: just before
    /// the next transaction (whose commit LSN is at least the end of the last one
    /// processed) and after every event already placed.
    fn anchor_position(&mut self) -> Position {
        // Never below an earlier anchor: positions only grow.
        let lsn = Lsn(self.merge.processed().0.saturating_sub(1)).max(self.anchor_lsn);
        if lsn != self.anchor_lsn {
            self.anchor_lsn = lsn;
            self.next_ordinal = ANCHOR_ORDINAL_BASE;
        }
        let position = Position::new(lsn, self.next_ordinal);
        self.next_ordinal += 1;
        position
    }

    /// The most events one read round places: every reader's chunk and its markers.
    pub(crate) fn round_events(&self) -> usize {
        self.options
            .readers
            .max(1)
            .saturating_mul(self.options.chunk_rows.max(1).saturating_add(4))
    }

    /// Whether the next round may run in the background while the stream goes on (its
    /// chunks are placed only if no transaction the stream passed in the meantime is
    /// missing from their snapshots); after a round that failed that check, the next one
    /// reads with the stream paused.
    pub(crate) fn optimistic(&self) -> bool {
        self.optimistic
    }

    /// Signalled when a background round finishes (the source waits on it with the
    /// stream).
    pub(crate) fn round_notify(&self) -> Arc<Notify> {
        self.round_done.clone()
    }

    /// Whether the background round has finished and its chunks can be placed now.
    pub(crate) fn round_ready(&self) -> bool {
        self.may_place() && self.in_flight.is_some() && self.round_ready.load(Ordering::Acquire)
    }

    /// Whether chunks may be placed at the current anchor (see `floor`).
    pub(crate) fn may_place(&self) -> bool {
        self.floor
            .is_none_or(|floor| self.merge.processed() > floor.commit_lsn)
    }

    /// How the round's readers are shared among the pending tables: one each for up to
    /// `readers` tables; with fewer tables than readers, the rest read further chunks of
    /// the same tables (consecutive key ranges), so that one large table is read by
    /// every reader.
    fn plan_round(&self) -> Result<Vec<TablePlan>> {
        let readers = self.options.readers.max(1);
        let pending: Vec<usize> = self.keyed_pending().take(readers).collect();
        let mut plans = Vec::with_capacity(pending.len());
        let Some(share) = readers.checked_div(pending.len()) else {
            return Ok(plans);
        };
        let extra = readers % pending.len();
        for (n, &index) in pending.iter().enumerate() {
            let (Some(state), Some(&catalog_index)) =
                (self.merge.tables().get(index), self.catalog.get(index))
            else {
                continue;
            };
            let after = match &state.frontier {
                Frontier::UpTo(key) => Some(key_text(key)?),
                _ => None,
            };
            plans.push(TablePlan {
                index,
                catalog_index,
                after,
                chunks: share + usize::from(n < extra),
            });
        }
        Ok(plans)
    }

    /// Starts reading the next chunks in the background (see [`Self::plan_round`]).
    pub(crate) async fn start_round(&mut self) -> Result<()> {
        let plans = self.plan_round()?;
        let wanted: usize = plans.iter().map(|p| p.chunks).sum();
        while self.readers.len() < wanted {
            match connect_sql(&self.options.connection).await {
                Ok(client) => self.readers.push(client),
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "cannot open a connection for the online snapshot; retrying");
                    self.not_before = Some(Instant::now() + RETRY_DELAY * 20);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        let readers = std::mem::take(&mut self.readers);
        let tables = self.tables.clone();
        let limit = self.options.chunk_rows.max(1);
        let in_recovery = self.options.in_recovery;
        let done = self.round_done.clone();
        let ready = self.round_ready.clone();
        ready.store(false, Ordering::Release);
        self.in_flight = Some(tokio::spawn(async move {
            let results = read_planned(&readers, &tables, plans, limit, in_recovery).await;
            // A permit is kept if nobody waits yet, so the wake-up is never lost.
            ready.store(true, Ordering::Release);
            done.notify_one();
            (readers, results)
        }));
        Ok(())
    }

    /// Waits for the background round and places its chunks (at the current anchor: the
    /// caller is between two transactions).
    pub(crate) async fn finish_round(&mut self, out: &mut VecDeque<ChangeEvent>) -> Result<()> {
        let Some(handle) = self.in_flight.take() else {
            return Ok(());
        };
        let (readers, results) = handle
            .await
            .map_err(|e| Error::protocol(format!("the snapshot chunk reader failed: {e}")))?;
        self.readers = readers;
        let mut retry = false;
        let mut failed_connection = false;
        let mut missed = false;
        // Each table's chunks in key order; a chunk is placed only if every one before it
        // in the round was (they continue one another).
        let mut results = results.into_iter().peekable();
        while let Some((first, read)) = results.next() {
            let index = first.index;
            let mut group = vec![(first, read)];
            while let Some((next, _)) = results.peek() {
                if next.index != index {
                    break;
                }
                if let Some(item) = results.next() {
                    group.push(item);
                }
            }
            // The chunks that can go: read without error, continuing the frontier.
            // A TRUNCATE (or a restart) since the read began moved the table's frontier:
            // the chunks no longer continue what the sink holds.
            let frontier = match self.merge.tables().get(index).map(|s| &s.frontier) {
                Some(Frontier::UpTo(key)) => Some(key_text(key)?),
                Some(Frontier::NotStarted) => None,
                _ => {
                    retry = true;
                    continue;
                }
            };
            let mut expected_after = frontier;
            let mut usable = Vec::with_capacity(group.len());
            for (request, read) in group {
                let read = match read {
                    Ok(read) => read,
                    Err(e) if e.is_transient() => {
                        tracing::warn!(error = %e, "reading a snapshot chunk failed; retrying");
                        failed_connection = true;
                        retry = true;
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if request.after != expected_after {
                    retry = true;
                    break;
                }
                // Checked for every chunk before any is placed: placing one clears the
                // table's record of what the stream passed before the anchor.
                let Some(snapshot) = self.snapshot_showing_the_past(index, &read.snapshot)? else {
                    retry = true;
                    missed = true;
                    break;
                };
                let complete = read.complete;
                expected_after = request.upto.clone();
                usable.push((request, read, snapshot));
                if complete {
                    break;
                }
            }
            for (request, read, snapshot) in usable {
                self.place(&request, read, snapshot, out)?;
            }
        }
        if failed_connection {
            self.readers.clear();
        }
        self.optimistic = !missed;
        self.not_before = retry.then(|| Instant::now() + RETRY_DELAY);
        Ok(())
    }

    /// The snapshot `text` of a read of table `index`, if it shows every transaction
    /// that touched the table and that the stream passed before the anchor (`None`: the
    /// read misses one — e.g. a commit still waiting for a synchronous standby — and is
    /// to be read again).
    fn snapshot_showing_the_past(&self, index: usize, text: &str) -> Result<Option<XidSnapshot>> {
        let snapshot = XidSnapshot::parse(text).map_err(|e| {
            Error::protocol(format!("the server returned a malformed snapshot: {e}"))
        })?;
        let invisible = self.merge.invisible_before_anchor(index, &snapshot);
        if invisible.is_empty() {
            return Ok(Some(snapshot));
        }
        tracing::debug!(
            ?invisible,
            "a snapshot does not yet show transactions the stream passed; reading again"
        );
        Ok(None)
    }

    /// Reads the next chunks with the stream paused, and places those whose snapshot saw
    /// every transaction the stream already passed. Transient failures are retried
    /// later; others are returned.
    pub(crate) async fn read_round(&mut self, out: &mut VecDeque<ChangeEvent>) -> Result<()> {
        self.start_round().await?;
        self.finish_round(out).await
    }

    /// What goes before a table's next chunk at the anchor: a TRUNCATE of it when its
    /// copy starts over (then the sink holds nothing of it when the rows come), and its
    /// `TableStarted` marker before its `first` chunk.
    ///
    /// The phase's first table opened is preceded by `SnapshotMarker::Started` (again in
    /// each run that resumes an unfinished backfill, and for tables added or copied again
    /// on a live stream), so a sink or a metric sees the backfill begin as it sees a
    /// consistent snapshot begin.
    fn open_table(
        &mut self,
        index: usize,
        schema: &cdc_core::SchemaRef,
        first: bool,
        out: &mut VecDeque<ChangeEvent>,
    ) {
        if !self.announced {
            self.announced = true;
            let position = self.anchor_position();
            out.push_back(ChangeEvent {
                position,
                kind: EventKind::Snapshot(SnapshotMarker::Started),
            });
        }
        if let Some(at) = self.truncate_first.iter().position(|&t| t == index) {
            self.truncate_first.swap_remove(at);
            let position = self.anchor_position();
            out.push_back(ChangeEvent {
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
                position,
                kind: EventKind::Snapshot(SnapshotMarker::TableStarted(schema.name.clone())),
            });
        }
    }

    /// Puts a chunk's rows at the anchor between its `ChunkStarted` and `ChunkCompleted`
    /// markers, followed by the table's `TableCompleted { rows: table_rows }` when given,
    /// and by `SnapshotMarker::Completed` when that was the last table to copy (its
    /// `consistent_point`: the stream position from which the sink holds every table).
    /// Returns the rows as the token needs them (their keys, at `key_columns`, kept as
    /// values) and the position of the last marker.
    fn place_rows(
        &mut self,
        schema: &cdc_core::SchemaRef,
        chunk: u64,
        rows: Vec<cdc_core::Row>,
        key_columns: &[usize],
        table_rows: Option<u64>,
        out: &mut VecDeque<ChangeEvent>,
    ) -> (ChunkRows, Position) {
        let table = &schema.name;
        // The chunk's rows share a reference of their own (see `SnapshotPhase::pull`).
        let schema = &std::sync::Arc::new(cdc_core::TableSchema::clone(schema));
        let position = self.anchor_position();
        out.push_back(ChangeEvent {
            position,
            kind: EventKind::Snapshot(SnapshotMarker::ChunkStarted {
                table: table.clone(),
                chunk,
            }),
        });
        let count = rows.len();
        let key_width = key_columns.len();
        let mut keys = Vec::with_capacity(count.saturating_mul(key_width));
        let mut first = None;
        for row in rows {
            for &column in key_columns {
                keys.push(row.get(column).cloned().unwrap_or(cdc_core::Value::Null));
            }
            let position = self.anchor_position();
            first.get_or_insert(position);
            out.push_back(ChangeEvent {
                position,
                kind: EventKind::Insert {
                    table: schema.clone(),
                    new: row,
                },
            });
        }
        let mut end = self.anchor_position();
        out.push_back(ChangeEvent {
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
                position: end,
                kind: EventKind::Snapshot(SnapshotMarker::TableCompleted {
                    table: table.clone(),
                    rows: total,
                }),
            });
            if self.whole.is_none() && self.merge.pending_tables().next().is_none() {
                end = self.anchor_position();
                out.push_back(ChangeEvent {
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
            key_width,
            keys,
        };
        (rows, end)
    }

    /// Places one chunk at the anchor (its snapshot already checked against what the
    /// stream passed).
    fn place(
        &mut self,
        request: &Request,
        read: ChunkRead,
        snapshot: XidSnapshot,
        out: &mut VecDeque<ChangeEvent>,
    ) -> Result<()> {
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
        let tables = Arc::clone(&self.tables);
        let Some(table_entry) = self.catalog.get(index).and_then(|&c| tables.get(c)) else {
            return Ok(());
        };
        let schema = table_entry.schema.clone();
        self.open_table(index, &schema, first, out);
        let count = read.rows.len();
        // A range chunk ends at its range's end (rows at its end may have gone since the
        // boundaries were found); a chunk of the next rows at its last row.
        let end = match (&request.upto, read.rows.last()) {
            _ if read.complete => ChunkEnd::TableEnd,
            (Some(upto), _) => ChunkEnd::Key(parse_key(table_entry, upto)?),
            (None, Some(last)) => ChunkEnd::Key(key_of(&key_columns, last)?),
            (None, None) => ChunkEnd::TableEnd,
        };
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

/// A table's frontier and still-open merge windows as `entry` of a token has them (windows
/// closed by `processed` left out).
fn restored_frontier_and_windows(
    table: &CatalogTable,
    entry: &TableBackfill,
    processed: Lsn,
) -> Result<(Frontier, Vec<Window>)> {
    let frontier = if entry.done {
        Frontier::Done
    } else {
        match &entry.upto {
            None => Frontier::NotStarted,
            Some(text) => Frontier::UpTo(parse_key(table, text)?),
        }
    };
    let mut windows = Vec::new();
    for window in &entry.windows {
        if window.until <= processed {
            continue;
        }
        windows.push(Window {
            after: window
                .after
                .as_ref()
                .map(|k| parse_key(table, k))
                .transpose()?,
            upto: window
                .upto
                .as_ref()
                .map(|k| parse_key(table, k))
                .transpose()?,
            snapshot: XidSnapshot::parse(&window.snapshot).map_err(|e| {
                Error::protocol(format!(
                    "the resume token's backfill snapshot of {} is malformed: {e}",
                    entry.table
                ))
            })?,
            until: window.until,
        });
    }
    Ok((frontier, windows))
}

/// Reads the chunks `plans` ask for, each on its own connection of `readers` (a table's
/// readers side by side): a table shared by several readers first has its range split at
/// the ends of its next chunks, then each reader copies one range. Results come a table's
/// chunks together, in key order; a table whose split failed reports that as its first
/// chunk's result.
async fn read_planned(
    readers: &[Client],
    tables: &[CatalogTable],
    plans: Vec<TablePlan>,
    limit: usize,
    in_recovery: bool,
) -> Vec<(Request, Result<ChunkRead>)> {
    let mut failed = Vec::new();
    let mut requests = Vec::new();
    let mut next_reader = 0usize;
    // The splits of all shared tables run at once, each on its table's first reader.
    let splits = futures::future::join_all(plans.into_iter().map(|plan| {
        let client = readers.get(next_reader);
        next_reader += plan.chunks;
        let table = tables.get(plan.catalog_index);
        async move {
            let ends = match (client, table) {
                (_, _) if plan.chunks <= 1 => Ok(Vec::new()),
                (Some(client), Some(table)) => {
                    chunk_boundaries(client, table, plan.after.as_deref(), limit, plan.chunks - 1)
                        .await
                }
                _ => Err(Error::protocol(
                    "internal: a chunk without a reader or table",
                )),
            };
            (plan, ends)
        }
    }))
    .await;
    for (plan, ends) in splits {
        match ends {
            Ok(ends) => {
                let mut after = plan.after;
                for end in ends {
                    requests.push(Request {
                        index: plan.index,
                        catalog_index: plan.catalog_index,
                        after: after.clone(),
                        upto: Some(end.clone()),
                    });
                    after = Some(end);
                }
                // The last chunk of the round: the next rows, however far they reach (and
                // the table's end when they are fewer than a chunk).
                requests.push(Request {
                    index: plan.index,
                    catalog_index: plan.catalog_index,
                    after,
                    upto: None,
                });
            }
            Err(e) => failed.push((
                Request {
                    index: plan.index,
                    catalog_index: plan.catalog_index,
                    after: plan.after,
                    upto: None,
                },
                Err(e),
            )),
        }
    }
    let reads = futures::future::join_all(requests.iter().zip(readers).map(|(request, client)| {
        let table = tables.get(request.catalog_index);
        async move {
            match table {
                Some(table) => {
                    read_chunk(
                        client,
                        table,
                        request.after.as_deref(),
                        request.upto.as_deref(),
                        limit,
                        in_recovery,
                    )
                    .await
                }
                None => Err(Error::protocol("internal: chunk of an unknown table")),
            }
        }
    }))
    .await;
    let mut results: Vec<(Request, Result<ChunkRead>)> = requests.into_iter().zip(reads).collect();
    results.extend(failed);
    results
}
