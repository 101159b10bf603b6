//! The online snapshot's decisions, without I/O: which chunks a read round reads, whether
//! a chunk read may be placed and where (its rows between markers at the anchor between
//! two transactions), a table without a key copied whole in pieces, streamed events held
//! for the server's key comparisons, every streamed event passed through the merge, and
//! the resume token's progress for exactly the events a token covers.
//!
//! The driver (`cdc-postgres`'s `source/backfill_phase`) reads: it asks
//! [`OnlineSnapshot::plan_round`], reads the chunks the plans name (on connections of its
//! own, while the stream goes on), and hands the reads to [`OnlineSnapshot::place_round`];
//! it has the server compare keys [`OnlineSnapshot::comparisons_needed`] names, and reads
//! a keyless table whole for [`OnlineSnapshot::whole_begun`] and
//! [`OnlineSnapshot::whole_piece`]. The merge rules and why they hold are in
//! [`super::merge`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cdc_core::{
    BackfillProgress, ChangeEvent, Error, EventKind, Lsn, Position, TableBackfill, TableName,
};

use super::merge::{Backfill, Frontier, Key, TableState, Window};
use super::token_progress::{CoveredProgress, Step};
use super::xid_snapshot::XidSnapshot;
use crate::machine::schedule::BackfillFacts;

mod held;
mod parts;
mod place;
mod rounds;
pub mod stride;
mod whole;

pub use parts::{
    Ahead, ChunkRead, OnlineTable, Request, RoundOutcome, Splits, TablePlan, range_cap,
};
use parts::{Held, WholeCopy};

/// Ordinals of snapshot rows and markers start here, above any ordinal a transaction's
/// own events can have, so that rows placed between two transactions order after the
/// earlier one's events (see [`OnlineSnapshot::anchor_position`]).
const ANCHOR_ORDINAL_BASE: u64 = 1 << 62;

/// How long to wait before reading a chunk again after its snapshot missed a transaction
/// the stream already passed (a commit not yet visible, e.g. waiting for a synchronous
/// standby), or after a reader's connection failed.
pub const RETRY_DELAY: Duration = Duration::from_millis(50);

/// How the snapshot reads: chunk size and readers per round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnlineRules {
    /// Rows per chunk.
    pub chunk_rows: usize,
    /// Readers (chunks read at once) per round.
    pub readers: usize,
}

/// The running online snapshot's decisions; see the module documentation.
#[derive(Debug)]
pub struct OnlineSnapshot {
    merge: Backfill,
    /// Index, in `tables`, of each backfilled table (same index as the merge's tables).
    catalog: Vec<usize>,
    tables: std::sync::Arc<Vec<OnlineTable>>,
    rules: OnlineRules,
    /// The ends found for the next round's chunks of tables shared by several readers.
    splits: Vec<Splits>,
    /// The key distance that holds about a chunk's rows, per table (by index) with a
    /// single-column integer key, from its last round (see `stride`).
    strides: Vec<(usize, i128)>,
    /// Where the previous anchor put its rows, and the next ordinal there.
    anchor_lsn: Lsn,
    next_ordinal: u64,
    /// The progress the handed-out batches cover, and the steps placed after it.
    progress: CoveredProgress,
    not_before: Option<Instant>,
    /// Tables whose next chunk must be preceded by a TRUNCATE (copied again on request).
    truncate_first: Vec<usize>,
    /// A read round was planned and its reads not yet placed.
    reading: bool,
    /// See [`Self::optimistic`].
    optimistic: bool,
    /// The last position handed out before this phase began (a restart or reconnect):
    /// no chunk is placed before the stream has passed its transaction, so new rows order
    /// after it and before everything the stream sends next.
    floor: Option<Position>,
    /// A table without a primary key being read whole (the stream waits meanwhile).
    whole: Option<WholeCopy>,
    /// Where this backfill's `SnapshotMarker::Started` went (before its first placed row
    /// or marker), once it did; kept by a new session when it was handed out.
    announced: Option<Position>,
    /// Whether some table's keys only the server can compare (see `held`).
    server_ordered: bool,
    /// Streamed events, transaction ends and idle progress waiting, in stream order, for
    /// the server to compare keys (see `held`).
    held: VecDeque<Held>,
    /// After a comparison failed on a lost connection: not again before this.
    compare_not_before: Option<Instant>,
    /// A deliberate mistake for the source simulation's fault test: chunks are placed
    /// without checking that their snapshot shows what the stream passed.
    #[cfg(test)]
    pub(crate) fault_skip_visibility: bool,
    /// A deliberate mistake: events sent again after a reconnect or restart act on the
    /// merge as if new (the bug the source simulation found at seed 7964).
    #[cfg(test)]
    pub(crate) fault_forget_floor: bool,
}

impl OnlineSnapshot {
    /// A backfill of the tables `progress` lists (those of `tables`, the driver's list;
    /// the others were removed from the stream), starting where `progress` says (a
    /// fresh start: every table not started), with the stream at `processed` (where it
    /// starts) and the last handed-out position `after`.
    pub fn new(
        tables: std::sync::Arc<Vec<OnlineTable>>,
        progress: BackfillProgress,
        processed: Lsn,
        after: Option<Position>,
        rules: OnlineRules,
    ) -> Result<Self, Error> {
        let unshown = progress.unshown_xids;
        let mut states = Vec::new();
        let mut catalog = Vec::new();
        let mut covered = BackfillProgress::default();
        let mut truncate_first = Vec::new();
        let mut removed = Vec::new();
        for entry in progress.tables {
            let Some(index) = tables.iter().position(|t| t.schema.name == entry.table) else {
                // Not in this run's set: its changes are not delivered, and the token
                // keeps it as removed (see `table_set`), after the merged tables so that
                // the token's entries and the merge's tables share their indexes.
                removed.push(TableBackfill {
                    removed: true,
                    windows: Vec::new(),
                    ..entry
                });
                continue;
            };
            let Some(table) = tables.get(index) else {
                continue;
            };
            // A table without a primary key (or whose key order only the server knows
            // and which was read whole before) is one range, read whole (`whole`).
            let whole = table.key_columns.is_empty();
            let keyed_progress = entry.upto.is_some()
                || entry
                    .windows
                    .iter()
                    .any(|w| w.after.is_some() || w.upto.is_some());
            // Whether the sink's copy is replaced: a TRUNCATE of it, then a new copy.
            let recopy = if entry.removed {
                // Back in the stream after a run without it: the sink's copy is stale (its
                // changes meanwhile are missing). The token keeps it `removed` until that
                // TRUNCATE is covered.
                tracing::info!(table = %entry.table, "copying the table again: it is back in the stream after a run without it");
                true
            } else if whole && keyed_progress {
                // Copied by key before (an earlier version ordered this key itself): the
                // token's ranges mean nothing to a whole-table read.
                tracing::warn!(table = %entry.table, "copying the table again: its copy was made in key order, which this run cannot reproduce");
                true
            } else {
                // Begun but not completed without a key to continue from — read whole (also
                // a keyed table an earlier version read whole): the sink holds part of it.
                !entry.done && entry.upto.is_none() && (entry.chunks > 0 || entry.rows > 0)
            };
            let (frontier, windows) = if recopy {
                truncate_first.push(states.len());
                (Frontier::NotStarted, Vec::new())
            } else {
                restored_frontier_and_windows(table, &entry, processed)?
            };
            // A copy that starts over is counted anew (its `TableStarted` comes again).
            states.push(TableState {
                table: entry.table.clone(),
                key_columns: table.key_columns.clone(),
                order: table.order.clone(),
                frontier,
                windows,
                chunks: if recopy { 0 } else { entry.chunks },
                rows: if recopy { 0 } else { entry.rows },
            });
            catalog.push(index);
            covered.tables.push(entry);
        }
        covered.tables.extend(removed);
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
        let server_ordered = states.iter().any(|s| s.order.is_by_server());
        Ok(OnlineSnapshot {
            // Transactions an earlier session passed that no snapshot has shown yet: every
            // table's next chunk must show them (this session's stream starts after them).
            merge: Backfill::new(states, processed).with_unshown(&unshown),
            catalog,
            tables,
            rules,
            splits: Vec::new(),
            strides: Vec::new(),
            anchor_lsn,
            next_ordinal,
            progress: CoveredProgress::new(covered),
            not_before: None,
            truncate_first,
            reading: false,
            optimistic: true,
            floor: after,
            whole: None,
            announced: None,
            server_ordered,
            held: VecDeque::new(),
            compare_not_before: None,
            #[cfg(test)]
            fault_skip_visibility: false,
            #[cfg(test)]
            fault_forget_floor: false,
        })
    }

    /// The same backfill for a new replication session starting at `start`, from the
    /// progress the handed-out batches cover (`covered`; chunk rows still queued when the
    /// connection was lost are gone with the queue, so they are read again; `None`:
    /// nothing of it was handed out, `fresh` starts it anew), with new positions after
    /// `after`.
    pub fn for_new_session(
        &self,
        covered: Option<BackfillProgress>,
        fresh: BackfillProgress,
        start: Lsn,
        after: Option<Position>,
    ) -> Result<Self, Error> {
        let mut progress = covered.unwrap_or(fresh);
        // What this session passed that no snapshot has shown yet (live, which may name
        // more than the handed-out batches cover: only ever more careful).
        progress.unshown_xids = self.merge.unshown();
        let mut phase = Self::new(self.tables.clone(), progress, start, after, self.rules)?;
        for &index in &self.truncate_first {
            if let Some(state) = self.merge.tables().get(index) {
                phase.restart(&state.table)?;
            }
        }
        // The same backfill goes on: announced again only if its `Started` marker was
        // lost with the queue (not yet handed out).
        phase.announced = self
            .announced
            .filter(|&at| after.is_some_and(|handed_out| at <= handed_out));
        #[cfg(test)]
        {
            phase.fault_skip_visibility = self.fault_skip_visibility;
            phase.fault_forget_floor = self.fault_forget_floor;
        }
        Ok(phase)
    }

    /// The driver's tables.
    pub fn tables(&self) -> &std::sync::Arc<Vec<OnlineTable>> {
        &self.tables
    }

    /// The index in the driver's list of the merge's table `index`.
    pub fn catalog_index(&self, index: usize) -> Option<usize> {
        self.catalog.get(index).copied()
    }

    /// Tables whose copy is still to do and which have no primary key (they are read
    /// whole, with the stream waiting).
    pub fn keyless_pending(&self) -> Vec<TableName> {
        self.merge
            .pending_tables()
            .filter(|(_, t)| t.key_columns.is_empty())
            .map(|(_, t)| t.table.clone())
            .collect()
    }

    /// Copies `table` again from its first row: a TRUNCATE of the table goes first (at
    /// the anchor of its first chunk), so the sink drops its copy before the new rows.
    pub fn restart(&mut self, table: &TableName) -> Result<(), Error> {
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

    /// Tables whose copy starts over with a TRUNCATE not yet placed.
    pub fn tables_to_truncate(&self) -> Vec<TableName> {
        self.truncate_first
            .iter()
            .filter_map(|&index| self.merge.tables().get(index))
            .map(|state| state.table.clone())
            .collect()
    }

    /// Whether chunks remain to be read and it is time (at `now`) to read them.
    pub fn wants_chunk(&self, now: Instant) -> bool {
        !self.reading
            && self.whole.is_none()
            && self.keyed_pending().next().is_some()
            && self.not_before.is_none_or(|t| now >= t)
    }

    /// Tables with a primary key whose chunks remain to be read.
    fn keyed_pending(&self) -> impl Iterator<Item = usize> + '_ {
        self.merge
            .pending_tables()
            .filter(|(_, t)| !t.key_columns.is_empty())
            .map(|(i, _)| i)
    }

    /// What the streaming loop needs to know of the online snapshot at `now` to choose
    /// its next step (`machine::schedule`); `round_ready`: the driver's reads of the
    /// planned round are back.
    pub fn facts(&self, now: Instant, round_ready: bool) -> BackfillFacts {
        BackfillFacts {
            wants_resolving: self.wants_resolving(now),
            held: self.held_len(),
            copying_whole: self.copying_whole(),
            round_ready: round_ready && self.reading && self.may_place(),
            round_events: self.round_events(),
            wants_chunk: self.wants_chunk(now),
            optimistic: self.optimistic(),
            may_place: self.may_place(),
            wants_whole: self.wants_whole(now),
            finished: self.is_finished(),
        }
    }

    /// Whether rows are left to copy (a table not yet complete, or one to copy again).
    pub fn copies(&self) -> bool {
        self.whole.is_some()
            || !self.truncate_first.is_empty()
            || self.merge.pending_tables().next().is_some()
    }

    /// Whether nothing is left to read or decide (the phase can end once the token's
    /// progress says so too).
    pub fn is_finished(&self) -> bool {
        self.whole.is_none()
            && self.held.is_empty()
            && self.merge.is_finished()
            && self.progress.is_finished()
    }

    /// See [`CoveredProgress::progress_for`].
    pub fn progress_for(
        &mut self,
        last: Option<Position>,
        commit_end: Option<Lsn>,
        last_event: Option<&ChangeEvent>,
    ) -> Option<BackfillProgress> {
        let mut progress = self.progress.progress_for(last, commit_end, last_event)?;
        // The live list, which may name transactions after the token's: only ever more
        // careful (a transaction a snapshot showed stays visible to later ones).
        progress.unshown_xids = self.merge.unshown();
        Some(progress)
    }

    /// Passes one streamed event through the merge: `Some` to deliver. An event whose keys
    /// only the server can compare, and every one after it, is held instead until
    /// [`Self::comparisons_answered`].
    pub fn on_event(&mut self, event: ChangeEvent) -> Result<Option<ChangeEvent>, Error> {
        #[cfg(test)]
        let floor = self.floor.filter(|_| !self.fault_forget_floor);
        #[cfg(not(test))]
        let floor = self.floor;
        if floor.is_some_and(|floor| event.position <= floor)
            && !matches!(event.kind, EventKind::Begin(_) | EventKind::Commit(_))
        {
            // Sent again after a reconnect or a restart: already handed out, and its
            // effect on the copy is in the progress this phase began from (a TRUNCATE
            // seen again would start the table's copy over a second time, with the
            // sink still holding the chunks placed after the first). The batches drop
            // it. (Begin and Commit go through: the merge follows transactions by them.)
            return Ok(Some(event));
        }
        if self.server_ordered
            && (!self.held.is_empty() || !self.merge.comparisons_needed(&event)?.is_empty())
        {
            self.held.push_back(Held::Event(event));
            return Ok(None);
        }
        self.pass(event)
    }

    /// Passes one streamed event through the merge (its keys compared already).
    fn pass(&mut self, event: ChangeEvent) -> Result<Option<ChangeEvent>, Error> {
        if let EventKind::Truncate { tables, .. } = &event.kind {
            for table in tables {
                // Only a TRUNCATE that starts the table's copy over changes the token's
                // view of it; a done table's is an ordinary change.
                if let Some(index) = self.merge.merging_index(&table.name) {
                    self.progress.push(Step::Restart {
                        table: index,
                        at: event.position,
                    });
                }
            }
        }
        self.merge.on_event(event)
    }

    /// The stream is idle up to `lsn` (after the events held, if any).
    pub fn progress(&mut self, lsn: Lsn) {
        if self.held.is_empty() {
            self.merge.progress(lsn);
        } else {
            self.held.push_back(Held::Idle(lsn));
        }
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
}

/// A key of `table` from its text form (as `token_progress::key_text` wrote it into a
/// token).
pub fn parse_key(table: &OnlineTable, text: &[String]) -> Result<Key, Error> {
    let name = &table.schema.name;
    if table.key_columns.len() != text.len() {
        return Err(Error::protocol(format!(
            "the resume token's backfill key of {name} has {} values, the primary key has {} columns",
            text.len(),
            table.key_columns.len()
        )));
    }
    table
        .key_columns
        .iter()
        .zip(text)
        .map(|(&index, value)| {
            let Some(ty) = table.column_types.get(index) else {
                return Err(Error::protocol("internal: key column without a type"));
            };
            crate::types::decode_text(ty, &Bytes::copy_from_slice(value.as_bytes())).map_err(|e| {
                Error::protocol(format!(
                    "the resume token's backfill key of {name} does not decode: {e}"
                ))
            })
        })
        .collect()
}

/// A table's frontier and still-open merge windows as `entry` of a token has them (windows
/// closed by `processed` left out).
fn restored_frontier_and_windows(
    table: &OnlineTable,
    entry: &TableBackfill,
    processed: Lsn,
) -> Result<(Frontier, Vec<Window>), Error> {
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
