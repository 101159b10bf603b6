//! Turning the copy workers' rows into snapshot events with positions and markers.

use std::sync::Arc;

use cdc_core::{
    ChangeEvent, Error, EventKind, Lsn, Position, SnapshotMarker, SnapshotProgress, TableName,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::catalog::CatalogTable;
use crate::snapshot::CopyMessage;
use crate::source::pending::EventQueue;

/// A running snapshot: the workers' channel and the bookkeeping that orders markers.
#[derive(Debug)]
pub(crate) struct SnapshotPhase {
    rx: mpsc::Receiver<CopyMessage>,
    workers: JoinSet<()>,
    tables: Arc<Vec<CatalogTable>>,
    consistent_point: Lsn,
    items_left: Vec<usize>,
    rows: Vec<u64>,
    started: Vec<bool>,
    completed: Vec<TableName>,
    next_ordinal: u64,
    finished: bool,
}

impl SnapshotPhase {
    /// Wraps running workers (their channel and tasks). `restarted` puts a [`SnapshotMarker::Restarted`] first.
    pub(crate) fn new(
        (rx, workers): (mpsc::Receiver<CopyMessage>, JoinSet<()>),
        tables: Arc<Vec<CatalogTable>>,
        items_per_table: Vec<usize>,
        consistent_point: Lsn,
        restarted: bool,
        after: Option<Position>,
        out: &mut EventQueue<'_>,
    ) -> Result<Self, Error> {
        let n = tables.len();
        // Snapshot rows sit just before the consistent point; after a restart they must
        // still order after every position already handed out.
        let commit_lsn = Lsn(consistent_point.0.saturating_sub(1));
        let next_ordinal = match after {
            Some(p) if p.commit_lsn > commit_lsn => {
                return Err(Error::resync_required(format!(
                    "the new slot's consistent point {consistent_point} is not after the stream's position {p}; start over with a new slot"
                )));
            }
            Some(p) if p.commit_lsn == commit_lsn => p.ordinal + 1,
            _ => 0,
        };
        let mut phase = SnapshotPhase {
            rx,
            workers,
            tables,
            consistent_point,
            items_left: items_per_table,
            rows: vec![0; n],
            started: vec![false; n],
            completed: Vec::new(),
            next_ordinal,
            finished: false,
        };
        if restarted {
            phase.marker(SnapshotMarker::Restarted, out);
        }
        phase.marker(SnapshotMarker::Started, out);
        // Tables with nothing to copy (no work items) complete at once.
        for index in 0..n {
            if phase.items_left.get(index) == Some(&0) {
                phase.start_table(index, out);
                phase.complete_table(index, out);
            }
        }
        phase.finish_if_done(out);
        Ok(phase)
    }

    /// The position space of snapshot rows: just before the consistent point, so every
    /// streamed transaction (committing after it) orders after them.
    fn position(&mut self) -> Position {
        let p = Position::new(
            Lsn(self.consistent_point.0.saturating_sub(1)),
            self.next_ordinal,
        );
        self.next_ordinal += 1;
        p
    }

    fn marker(&mut self, marker: SnapshotMarker, out: &mut EventQueue<'_>) {
        let position = self.position();
        out.push_back(ChangeEvent {
            lsn: cdc_core::Lsn::ZERO,
            position,
            kind: EventKind::Snapshot(marker),
        });
    }

    fn start_table(&mut self, index: usize, out: &mut EventQueue<'_>) {
        if self.started.get(index) == Some(&false) {
            if let Some(s) = self.started.get_mut(index) {
                *s = true;
            }
            if let Some(table) = self.tables.get(index) {
                let name = table.schema.name.clone();
                self.marker(SnapshotMarker::TableStarted(name), out);
            }
        }
    }

    fn complete_table(&mut self, index: usize, out: &mut EventQueue<'_>) {
        if let Some(table) = self.tables.get(index) {
            let name = table.schema.name.clone();
            let rows = self.rows.get(index).copied().unwrap_or(0);
            self.completed.push(name.clone());
            self.marker(SnapshotMarker::TableCompleted { table: name, rows }, out);
        }
    }

    fn finish_if_done(&mut self, out: &mut EventQueue<'_>) {
        if !self.finished && self.items_left.iter().all(|n| *n == 0) {
            self.finished = true;
            let consistent_point = self.consistent_point;
            self.marker(SnapshotMarker::Completed { consistent_point }, out);
        }
    }

    /// Whether every table is copied (the Completed marker was produced).
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// The slot's consistent point.
    pub(crate) fn consistent_point(&self) -> Lsn {
        self.consistent_point
    }

    /// Progress for resume tokens.
    pub(crate) fn progress(&self) -> SnapshotProgress {
        SnapshotProgress {
            consistent_point: self.consistent_point,
            completed_tables: self.completed.clone(),
        }
    }

    /// Receives the next worker message and appends its events. Cancel-safe (the only
    /// await is the channel receive).
    pub(crate) async fn pull(&mut self, out: &mut EventQueue<'_>) -> Result<(), Error> {
        let Some(message) = self.rx.recv().await else {
            return Err(Error::transient(
                "the snapshot copy workers stopped before the snapshot was complete",
            ));
        };
        match message {
            CopyMessage::Rows { table, rows } => {
                self.start_table(table, out);
                let Some(schema) = self.tables.get(table).map(|t| schema_for_rows(&t.schema))
                else {
                    return Err(Error::protocol(
                        "internal: rows for an unknown snapshot table",
                    ));
                };
                if let Some(count) = self.rows.get_mut(table) {
                    *count += rows.len() as u64;
                }
                for new in rows {
                    let position = self.position();
                    out.push_back(ChangeEvent {
                        lsn: cdc_core::Lsn::ZERO,
                        position,
                        kind: EventKind::Insert {
                            table: schema.clone(),
                            new,
                        },
                    });
                }
            }
            CopyMessage::ItemDone { table, .. } => {
                self.start_table(table, out);
                if let Some(left) = self.items_left.get_mut(table) {
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        self.complete_table(table, out);
                    }
                }
                self.finish_if_done(out);
                if self.finished {
                    // Let the workers commit and close their connections.
                    while self.workers.join_next().await.is_some() {}
                }
            }
            CopyMessage::Failed(error) => return Err(error),
        }
        Ok(())
    }
}

pub(super) use cdc_pgoutput::backfill::online::schema_for_rows;
