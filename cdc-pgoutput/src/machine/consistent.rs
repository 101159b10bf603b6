//! The consistent snapshot's events: the copy workers' rows as inserts with positions
//! just before the slot's consistent point, between the snapshot's and each table's
//! start and completion markers, and what a resume token says of it. The driver
//! (`cdc-postgres`'s `source/snapshot_phase`) receives the workers' messages and hands
//! each over; it decides nothing about positions or markers.

use cdc_core::{
    ChangeEvent, Error, EventKind, Lsn, Position, Row, RowBlock, SchemaRef, SnapshotMarker,
    SnapshotProgress, TableName,
};

use super::batches::EventQueue;

/// A consistent snapshot being copied.
#[derive(Debug)]
pub struct ConsistentCopy {
    /// The tables' schemas, by the index the workers' messages use.
    tables: Vec<SchemaRef>,
    consistent_point: Lsn,
    items_left: Vec<usize>,
    rows: Vec<u64>,
    started: Vec<bool>,
    completed: Vec<TableName>,
    next_ordinal: u64,
    finished: bool,
}

impl ConsistentCopy {
    /// A copy of `tables` in `items_per_table` work items each, under the snapshot of the
    /// slot whose consistent point is `consistent_point`, after the last position handed
    /// out (`after`). `restarted`: the copy is taken again, [`SnapshotMarker::Restarted`]
    /// goes first. Its markers (and the completion of tables with nothing to copy) go to
    /// `out`.
    pub fn new(
        tables: Vec<SchemaRef>,
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
        let mut copy = ConsistentCopy {
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
            copy.marker(SnapshotMarker::Restarted, out);
        }
        copy.marker(SnapshotMarker::Started, out);
        // Tables with nothing to copy (no work items) complete at once.
        for index in 0..n {
            if copy.items_left.get(index) == Some(&0) {
                copy.start_table(index, out);
                copy.complete_table(index, out);
            }
        }
        copy.finish_if_done(out);
        Ok(copy)
    }

    /// Rows of table `table` a worker copied: inserts (after the table's start marker).
    pub fn rows(
        &mut self,
        table: usize,
        rows: Vec<Row>,
        out: &mut EventQueue<'_>,
    ) -> Result<(), Error> {
        self.start_table(table, out);
        let Some(schema) = self.tables.get(table).map(|t| schema_for_rows(t)) else {
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
                lsn: Lsn::ZERO,
                position,
                kind: EventKind::Insert {
                    table: schema.clone(),
                    new,
                },
            });
        }
        Ok(())
    }

    /// Rows of table `table` a worker copied and left undecoded, for a sink that takes
    /// row blocks: one `InsertBlock` (after the table's start marker) whose rows take the
    /// positions as many inserts would.
    pub fn block(
        &mut self,
        table: usize,
        rows: RowBlock,
        out: &mut EventQueue<'_>,
    ) -> Result<(), Error> {
        self.start_table(table, out);
        let Some(schema) = self.tables.get(table).map(|t| schema_for_rows(t)) else {
            return Err(Error::protocol(
                "internal: rows for an unknown snapshot table",
            ));
        };
        let n = rows.len() as u64;
        if n == 0 {
            return Ok(());
        }
        if let Some(count) = self.rows.get_mut(table) {
            *count += n;
        }
        let first = self.position();
        // The block's position is its last row's; the rows take the ordinals between.
        self.next_ordinal += n - 1;
        out.push_back(ChangeEvent {
            lsn: Lsn::ZERO,
            position: Position::new(first.commit_lsn, first.ordinal + (n - 1)),
            kind: EventKind::InsertBlock {
                table: schema,
                rows,
            },
        });
        Ok(())
    }

    /// A work item of table `table` is done: after its last, the table's completion,
    /// and after every table's, the snapshot's.
    pub fn item_done(&mut self, table: usize, out: &mut EventQueue<'_>) {
        self.start_table(table, out);
        if let Some(left) = self.items_left.get_mut(table) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.complete_table(table, out);
            }
        }
        self.finish_if_done(out);
    }

    /// Whether every table is copied (the Completed marker was produced).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The slot's consistent point.
    pub fn consistent_point(&self) -> Lsn {
        self.consistent_point
    }

    /// Progress for resume tokens.
    pub fn progress(&self) -> SnapshotProgress {
        SnapshotProgress {
            consistent_point: self.consistent_point,
            completed_tables: self.completed.clone(),
        }
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
            lsn: Lsn::ZERO,
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
                let name = table.name.clone();
                self.marker(SnapshotMarker::TableStarted(name), out);
            }
        }
    }

    fn complete_table(&mut self, index: usize, out: &mut EventQueue<'_>) {
        if let Some(table) = self.tables.get(index) {
            let name = table.name.clone();
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
}

/// A reference of its own to `schema` for one batch of snapshot rows (a COPY message, a
/// chunk). Every row clones it where it is made and drops it on the sink's thread; with
/// one reference for all rows, both threads would bump one count at once and its cache
/// line would bounce between the cores.
pub fn schema_for_rows(schema: &cdc_core::TableSchema) -> SchemaRef {
    std::sync::Arc::new(schema.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Arc;

    use cdc_core::{ReplicaIdentity, TableSchema, Value};

    use super::*;
    use crate::machine::batches::Pending;

    fn table(name: &str) -> SchemaRef {
        Arc::new(TableSchema {
            name: TableName::new("public", name),
            relation_id: 1,
            columns: Vec::new(),
            replica_identity: ReplicaIdentity::Default,
            primary_key: Vec::new(),
        })
    }

    fn kinds(queue: &VecDeque<Pending>) -> Vec<String> {
        queue
            .iter()
            .map(|p| match p {
                Pending::Event(e) => match &e.kind {
                    EventKind::Insert { table, .. } => format!("insert {}", table.name.name),
                    EventKind::Snapshot(m) => format!("{m:?}"),
                    other => format!("{other:?}"),
                },
                Pending::End(lsn) | Pending::Complete(lsn) => format!("end {lsn}"),
            })
            .collect()
    }

    #[test]
    fn rows_sit_between_markers_just_before_the_consistent_point() {
        let mut queue = VecDeque::new();
        let mut copy = ConsistentCopy::new(
            vec![table("a"), table("b")],
            vec![2, 0],
            Lsn(1000),
            false,
            None,
            &mut EventQueue(&mut queue),
        )
        .unwrap();
        copy.rows(0, vec![vec![Value::Int4(1)]], &mut EventQueue(&mut queue))
            .unwrap();
        copy.item_done(0, &mut EventQueue(&mut queue));
        assert!(!copy.is_finished());
        copy.item_done(0, &mut EventQueue(&mut queue));
        assert!(copy.is_finished());
        let b = TableName::new("public", "b");
        let a = TableName::new("public", "a");
        assert_eq!(
            kinds(&queue),
            [
                "Started".to_owned(),
                format!("{:?}", SnapshotMarker::TableStarted(b.clone())),
                format!("{:?}", SnapshotMarker::TableCompleted { table: b, rows: 0 }),
                format!("{:?}", SnapshotMarker::TableStarted(a.clone())),
                "insert a".to_owned(),
                format!(
                    "{:?}",
                    SnapshotMarker::TableCompleted {
                        table: a.clone(),
                        rows: 1
                    }
                ),
                format!(
                    "{:?}",
                    SnapshotMarker::Completed {
                        consistent_point: Lsn(1000)
                    }
                ),
            ]
        );
        let positions: Vec<Position> = queue
            .iter()
            .filter_map(|p| match p {
                Pending::Event(e) => Some(e.position),
                Pending::End(_) | Pending::Complete(_) => None,
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert!(positions.iter().all(|p| p.commit_lsn == Lsn(999)));
        assert_eq!(
            copy.progress().completed_tables,
            [TableName::new("public", "b"), a]
        );
    }

    #[test]
    fn a_copy_taken_again_orders_after_what_was_handed_out() {
        let mut queue = VecDeque::new();
        let copy = ConsistentCopy::new(
            vec![table("a")],
            vec![1],
            Lsn(1000),
            true,
            Some(Position::new(Lsn(999), 41)),
            &mut EventQueue(&mut queue),
        )
        .unwrap();
        assert_eq!(kinds(&queue)[..2], ["Restarted", "Started"]);
        assert!(
            matches!(queue.front(), Some(Pending::Event(e)) if e.position == Position::new(Lsn(999), 42))
        );
        assert!(!copy.is_finished());
        let err = ConsistentCopy::new(
            vec![table("a")],
            vec![1],
            Lsn(1000),
            true,
            Some(Position::new(Lsn(1500), 0)),
            &mut EventQueue(&mut queue),
        )
        .unwrap_err();
        assert_eq!(err.kind(), cdc_core::ErrorKind::ResyncRequired);
    }
}
