//! The consistent snapshot's driver: receives the copy workers' messages and hands each
//! to `cdc_pgoutput::machine::consistent::ConsistentCopy`, which turns them into events
//! with positions and markers.

use std::sync::Arc;

use cdc_core::{Error, Lsn, Position, SnapshotProgress};
use cdc_pgoutput::machine::consistent::ConsistentCopy;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::catalog::CatalogTable;
use crate::snapshot::CopyMessage;
use crate::source::pending::EventQueue;

/// A running snapshot: the workers' channel and tasks, and the copy's bookkeeping.
#[derive(Debug)]
pub(crate) struct SnapshotPhase {
    rx: mpsc::Receiver<CopyMessage>,
    workers: JoinSet<()>,
    copy: ConsistentCopy,
}

impl SnapshotPhase {
    /// Wraps running workers (their channel and tasks). `restarted` puts a
    /// `SnapshotMarker::Restarted` first.
    pub(crate) fn new(
        (rx, workers): (mpsc::Receiver<CopyMessage>, JoinSet<()>),
        tables: Arc<Vec<CatalogTable>>,
        items_per_table: Vec<usize>,
        consistent_point: Lsn,
        restarted: bool,
        after: Option<Position>,
        out: &mut EventQueue<'_>,
    ) -> Result<Self, Error> {
        let copy = ConsistentCopy::new(
            tables.iter().map(|t| t.schema.clone()).collect(),
            items_per_table,
            consistent_point,
            restarted,
            after,
            out,
        )?;
        Ok(SnapshotPhase { rx, workers, copy })
    }

    /// Whether every table is copied (the Completed marker was produced).
    pub(crate) fn is_finished(&self) -> bool {
        self.copy.is_finished()
    }

    /// The slot's consistent point.
    pub(crate) fn consistent_point(&self) -> Lsn {
        self.copy.consistent_point()
    }

    /// Progress for resume tokens.
    pub(crate) fn progress(&self) -> SnapshotProgress {
        self.copy.progress()
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
            CopyMessage::Rows { table, rows } => self.copy.rows(table, rows, out)?,
            CopyMessage::Block { table, rows } => self.copy.block(table, rows, out)?,
            CopyMessage::ItemDone { table, .. } => {
                self.copy.item_done(table, out);
                if self.copy.is_finished() {
                    // Let the workers commit and close their connections.
                    while self.workers.join_next().await.is_some() {}
                }
            }
            CopyMessage::Failed(error) => return Err(error),
        }
        Ok(())
    }
}
