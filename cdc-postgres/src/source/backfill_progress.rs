//! What an online snapshot's resume token says, for exactly the events the token covers:
//! the chunks and restarts placed in the stream, applied to the token's progress as the
//! batches holding them are handed out — also when a batch ends inside a chunk.

use std::collections::VecDeque;

use cdc_core::{BackfillProgress, BackfillWindow, Lsn, Position, TableBackfill, Value};
use cdc_pgoutput::backfill::merge::Key;

use super::backfill_keys::key_text;

/// One placed chunk as the token needs it: which rows it put where.
#[derive(Debug)]
pub(super) struct ChunkRecord {
    pub(super) table: usize,
    /// Position of its `ChunkCompleted` marker (and `TableCompleted`, if any).
    pub(super) end: Position,
    /// Where its rows are and what their keys are.
    pub(super) rows: ChunkRows,
    /// The chunk's merge window; `None` for a piece of a table read whole that is not
    /// its last (the table's one window comes with its last piece: until then a restart
    /// copies the table again).
    pub(super) window: Option<BackfillWindow>,
    pub(super) complete: bool,
}

/// A chunk's rows as the token needs them: they sit at consecutive positions from `first`
/// (one anchor, ordinals one apart), and their keys are kept as values, side by side, to
/// be turned into text only for a token that ends inside the chunk (rare: a chunk ends its
/// batch) — not a string per row for every chunk.
#[derive(Debug)]
pub(super) struct ChunkRows {
    /// Position of the first row (`None`: an empty chunk).
    pub(super) first: Option<Position>,
    pub(super) count: usize,
    /// Key columns per row.
    pub(super) key_width: usize,
    /// `count × key_width` key values, row after row.
    pub(super) keys: Vec<Value>,
}

impl ChunkRows {
    /// How many of the rows lie at or before `last`.
    fn covered_by(&self, last: Position) -> usize {
        let Some(first) = self.first else {
            return 0;
        };
        if last.commit_lsn != first.commit_lsn {
            return if last.commit_lsn > first.commit_lsn {
                self.count
            } else {
                0
            };
        }
        match last.ordinal.checked_sub(first.ordinal) {
            None => 0,
            Some(offset) => {
                usize::try_from(offset).map_or(self.count, |o| o.saturating_add(1).min(self.count))
            }
        }
    }

    /// The key of row `index` (0-based); `None` also for a table without a key.
    fn key(&self, index: usize) -> Option<Key> {
        if self.key_width == 0 {
            return None;
        }
        let start = index.checked_mul(self.key_width)?;
        self.keys
            .get(start..start.checked_add(self.key_width)?)
            .map(<[Value]>::to_vec)
    }
}

/// What changes the token's view of a table, in stream order.
#[derive(Debug)]
pub(super) enum Step {
    Chunk(ChunkRecord),
    /// A TRUNCATE at this position started the table's backfill over.
    Restart {
        table: usize,
        at: Position,
    },
}

impl Step {
    fn first_position(&self) -> Position {
        match self {
            Step::Chunk(chunk) => chunk.rows.first.unwrap_or(chunk.end),
            Step::Restart { at, .. } => *at,
        }
    }
}

/// The progress the handed-out batches cover, and the steps placed after it.
#[derive(Debug)]
pub(super) struct CoveredProgress {
    covered: BackfillProgress,
    steps: VecDeque<Step>,
}

impl CoveredProgress {
    /// Progress as a token (or the start) had it, with nothing placed since.
    pub(super) fn new(covered: BackfillProgress) -> Self {
        CoveredProgress {
            covered,
            steps: VecDeque::new(),
        }
    }

    /// Records a chunk or restart placed in the stream (in stream order).
    pub(super) fn push(&mut self, step: Step) {
        self.steps.push_back(step);
    }

    /// Whether every placed step is covered, every table done and every window closed.
    pub(super) fn is_finished(&self) -> bool {
        self.steps.is_empty()
            && self
                .covered
                .tables
                .iter()
                .all(|t| t.done && t.windows.is_empty())
    }

    /// The progress a token covering everything up to `last` (and transactions up to
    /// `commit_end`) carries (every table done, once the backfill is over).
    pub(super) fn progress_for(
        &mut self,
        last: Option<Position>,
        commit_end: Option<Lsn>,
    ) -> Option<BackfillProgress> {
        let commit_end = commit_end.unwrap_or(Lsn::ZERO);
        while let Some(step) = self.steps.front() {
            if last.is_none_or(|l| step.first_position() > l) {
                break;
            }
            let Some(step) = self.steps.pop_front() else {
                break;
            };
            match step {
                Step::Restart { table, .. } => {
                    if let Some(entry) = self.covered.tables.get_mut(table) {
                        entry.done = false;
                        entry.upto = None;
                        entry.windows.clear();
                    }
                }
                Step::Chunk(chunk) => {
                    let fully = last.is_some_and(|l| chunk.end <= l);
                    let Some(entry) = self.covered.tables.get_mut(chunk.table) else {
                        continue;
                    };
                    if fully {
                        entry.chunks += 1;
                        entry.rows += chunk.rows.count as u64;
                        entry.done = chunk.complete;
                        if let Some(window) = chunk.window {
                            entry.upto = window.upto.clone().or(entry.upto.take());
                            entry.windows.push(window);
                        }
                    } else if chunk.rows.key_width == 0 {
                        // A piece of a table read whole, partly covered: there is no key to
                        // continue from; the token says the copy began, so a restart
                        // copies the table again after a TRUNCATE of it.
                        let delivered = last.map_or(0, |l| chunk.rows.covered_by(l));
                        if delivered == 0 {
                            self.steps.push_front(Step::Chunk(chunk));
                            break;
                        }
                        let partial = TableBackfill {
                            table: entry.table.clone(),
                            done: false,
                            upto: None,
                            chunks: entry.chunks + 1,
                            rows: entry.rows + delivered as u64,
                            windows: entry.windows.clone(),
                        };
                        let result = self.snapshot_with(chunk.table, partial, commit_end);
                        self.steps.push_front(Step::Chunk(chunk));
                        return result;
                    } else {
                        // The batch ends inside this chunk: the rows up to `last` are the
                        // sink's; the rest is read again after a restart.
                        let delivered = last.map_or(0, |l| chunk.rows.covered_by(l));
                        let key = delivered
                            .checked_sub(1)
                            .and_then(|index| chunk.rows.key(index))
                            .map(|key| key_text(&key));
                        if let Some(key) = key {
                            let key = match key {
                                Ok(key) => key,
                                Err(e) => {
                                    // The chunk's last key had a text form when it was
                                    // placed, and a table's keys share their types; should
                                    // one lack it, the token keeps the last whole chunk.
                                    tracing::warn!(error = %e, "a chunk row's key has no text form");
                                    self.steps.push_front(Step::Chunk(chunk));
                                    break;
                                }
                            };
                            let Some(mut window) = chunk.window.clone() else {
                                self.steps.push_front(Step::Chunk(chunk));
                                break;
                            };
                            window.upto = Some(key.clone());
                            let mut partial = TableBackfill {
                                table: entry.table.clone(),
                                done: false,
                                upto: Some(key.clone()),
                                chunks: entry.chunks + 1,
                                rows: entry.rows + delivered as u64,
                                windows: entry.windows.clone(),
                            };
                            partial.windows.push(window);
                            // Not popped for good: later batches cover more of it.
                            let result = self.snapshot_with(chunk.table, partial, commit_end);
                            self.steps.push_front(Step::Chunk(chunk));
                            return result;
                        }
                        self.steps.push_front(Step::Chunk(chunk));
                        break;
                    }
                }
            }
        }
        for entry in &mut self.covered.tables {
            entry.windows.retain(|w| w.until > commit_end);
        }
        // Kept after every table is done: a later run learns from it which tables it
        // need not copy again (and backfills only a table added since).
        Some(self.covered.clone())
    }

    /// The covered progress with `entry` in place of table `index`'s.
    fn snapshot_with(
        &self,
        index: usize,
        entry: TableBackfill,
        commit_end: Lsn,
    ) -> Option<BackfillProgress> {
        let mut progress = self.covered.clone();
        if let Some(slot) = progress.tables.get_mut(index) {
            *slot = entry;
        }
        for entry in &mut progress.tables {
            entry.windows.retain(|w| w.until > commit_end);
        }
        Some(progress)
    }
}
