//! What an online snapshot's resume token says, for exactly the events the token covers:
//! the chunks and restarts placed in the stream, applied to the token's progress as the
//! batches holding them are handed out — also when a batch ends inside a chunk.

use std::collections::VecDeque;

use cdc_core::{
    BackfillProgress, BackfillWindow, ChangeEvent, EventKind, Lsn, Position, TableBackfill,
};
use cdc_core::{Error, Result};

use super::merge::Key;

/// A key's values as text, the form a resume token keeps them in.
pub fn key_text(key: &Key) -> Result<Vec<String>> {
    key.iter()
        .map(|v| {
            v.to_pg_text().ok_or_else(|| {
                Error::protocol(format!(
                    "a primary key value ({}) has no text form",
                    v.kind_name()
                ))
            })
        })
        .collect()
}

/// One placed chunk as the token needs it: which rows it put where.
#[derive(Debug)]
pub struct ChunkRecord {
    pub table: usize,
    /// Position of its `ChunkCompleted` marker (and `TableCompleted`, if any).
    pub end: Position,
    /// Where its rows are and what their keys are.
    pub rows: ChunkRows,
    /// The chunk's merge window; `None` for a piece of a table read whole that is not
    /// its last (the table's one window comes with its last piece: until then a restart
    /// copies the table again).
    pub window: Option<BackfillWindow>,
    pub complete: bool,
}

/// A chunk's rows as the token needs them: they sit at consecutive positions from `first`
/// (one anchor, ordinals one apart). A token that ends inside the chunk (none does while
/// every chunk ends its batch, see `batching`; kept exact should that change) takes the key
/// of the batch's last row from that row itself, so no row's key is kept.
#[derive(Debug)]
pub struct ChunkRows {
    /// Position of the first row (`None`: an empty chunk).
    pub first: Option<Position>,
    pub count: usize,
    /// Where the key columns are in a row (empty: a table read whole, without a key).
    pub key_columns: Vec<usize>,
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

    /// The key of row `index` (0-based), read from `row` if that is the event at the row's
    /// position; `None` otherwise, and for a table without a key.
    fn key(&self, index: usize, row: Option<&ChangeEvent>) -> Option<Key> {
        if self.key_columns.is_empty() {
            return None;
        }
        let first = self.first?;
        let ordinal = first.ordinal.checked_add(u64::try_from(index).ok()?)?;
        let row = row.filter(|e| e.position == Position::new(first.commit_lsn, ordinal))?;
        let EventKind::Insert { new, .. } = &row.kind else {
            return None;
        };
        self.key_columns
            .iter()
            .map(|&column| new.get(column).cloned())
            .collect()
    }
}

/// What changes the token's view of a table, in stream order.
#[derive(Debug)]
pub enum Step {
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
pub struct CoveredProgress {
    covered: BackfillProgress,
    steps: VecDeque<Step>,
}

impl CoveredProgress {
    /// Progress as a token (or the start) had it, with nothing placed since.
    pub fn new(covered: BackfillProgress) -> Self {
        CoveredProgress {
            covered,
            steps: VecDeque::new(),
        }
    }

    /// Records a chunk or restart placed in the stream (in stream order).
    pub fn push(&mut self, step: Step) {
        self.steps.push_back(step);
    }

    /// Whether every placed step is covered, every table done and every window closed.
    pub fn is_finished(&self) -> bool {
        self.steps.is_empty()
            && self
                .covered
                .tables
                .iter()
                .all(|t| t.removed || (t.done && t.windows.is_empty()))
    }

    /// The progress a token covering everything up to `last` (and transactions up to
    /// `commit_end`) carries (every table done, once the backfill is over). `last_event`:
    /// the event at `last`, whose key a token ending inside a chunk takes.
    pub fn progress_for(
        &mut self,
        last: Option<Position>,
        commit_end: Option<Lsn>,
        last_event: Option<&ChangeEvent>,
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
                    // The sink holds nothing of the table from here: its copy starts
                    // over (counted anew), and a table back in the stream is no longer
                    // stale.
                    if let Some(entry) = self.covered.tables.get_mut(table) {
                        entry.done = false;
                        entry.removed = false;
                        entry.upto = None;
                        entry.chunks = 0;
                        entry.rows = 0;
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
                    } else if chunk.rows.key_columns.is_empty() {
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
                            removed: false,
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
                            .and_then(|index| chunk.rows.key(index, last_event))
                            .map(|key| key_text(&key));
                        if let Some(key) = key {
                            let key = match key {
                                Ok(key) => key,
                                Err(_) => {
                                    // The chunk's last key had a text form when it was
                                    // placed, and a table's keys share their types; should
                                    // one lack it, the token keeps the last whole chunk
                                    // (exact, only further back).
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
                                removed: false,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cdc_core::{ColumnSchema, ColumnType, ReplicaIdentity, TableName, TableSchema, Value};

    use super::*;

    fn pos(ordinal: u64) -> Position {
        Position::new(Lsn(100), ordinal)
    }

    fn schema() -> Arc<TableSchema> {
        let column = |name: &str, oid: u32, key: bool| ColumnSchema {
            name: name.into(),
            column_type: ColumnType {
                oid,
                modifier: -1,
                name: None,
                definition: Default::default(),
            },
            nullable: !key,
            part_of_key: key,
            generated: false,
        };
        Arc::new(TableSchema {
            name: TableName::new("public", "t"),
            relation_id: 1,
            // The key is the second column, so a key taken from the wrong place shows.
            columns: vec![column("v", 25, false), column("id", 23, true)],
            replica_identity: ReplicaIdentity::Default,
            primary_key: vec!["id".into()],
        })
    }

    fn row_at(ordinal: u64, id: i32) -> ChangeEvent {
        ChangeEvent {
            lsn: cdc_core::Lsn::ZERO,
            position: pos(ordinal),
            kind: EventKind::Insert {
                table: schema(),
                new: vec![Value::Int4(-1), Value::Int4(id)],
            },
        }
    }

    /// A table with nothing delivered, and one chunk of ten rows at ordinals 2..=11 (its
    /// start marker at 1, its end at 12) whose keys are 21..=30.
    fn one_chunk() -> CoveredProgress {
        let mut progress = CoveredProgress::new(BackfillProgress {
            tables: vec![TableBackfill {
                table: TableName::new("public", "t"),
                done: false,
                removed: false,
                upto: None,
                chunks: 0,
                rows: 0,
                windows: Vec::new(),
            }],
            unshown_xids: Vec::new(),
        });
        progress.push(Step::Chunk(ChunkRecord {
            table: 0,
            end: pos(12),
            rows: ChunkRows {
                first: Some(pos(2)),
                count: 10,
                key_columns: vec![1],
            },
            window: Some(BackfillWindow {
                after: Some(vec!["20".into()]),
                upto: Some(vec!["30".into()]),
                snapshot: "5:5:".into(),
                until: Lsn(90),
            }),
            complete: false,
        }));
        progress
    }

    #[test]
    fn a_token_inside_a_chunk_ends_at_the_key_of_the_batch_s_last_row() {
        let mut progress = one_chunk();
        // Rows at ordinals 2..=6 delivered: five rows, the last one with key 25.
        let last = row_at(6, 25);
        let token = progress
            .progress_for(Some(pos(6)), None, Some(&last))
            .unwrap();
        let table = &token.tables[0];
        assert_eq!(table.upto, Some(vec!["25".to_owned()]));
        assert_eq!((table.rows, table.chunks, table.done), (5, 1, false));
        assert_eq!(table.windows.len(), 1);
        assert_eq!(table.windows[0].upto, Some(vec!["25".to_owned()]));
        assert_eq!(table.windows[0].after, Some(vec!["20".to_owned()]));

        // The rest of the chunk comes with the next batch.
        let token = progress.progress_for(Some(pos(12)), None, None).unwrap();
        let table = &token.tables[0];
        assert_eq!(table.upto, Some(vec!["30".to_owned()]));
        assert_eq!((table.rows, table.chunks), (10, 1));
        assert!(progress.steps.is_empty());
    }

    #[test]
    fn without_the_row_itself_a_token_inside_a_chunk_keeps_the_last_whole_chunk() {
        for last in [None, Some(row_at(5, 24))] {
            let mut progress = one_chunk();
            let token = progress
                .progress_for(Some(pos(6)), None, last.as_ref())
                .unwrap();
            let table = &token.tables[0];
            assert_eq!((table.upto.clone(), table.rows, table.chunks), (None, 0, 0));
            assert_eq!(progress.steps.len(), 1, "the chunk still waits");
        }
    }
}
