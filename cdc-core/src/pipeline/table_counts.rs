//! Changes written to the sink per table and operation, and the initial snapshot's progress
//! per table, counted from the batches the pipeline writes (so they count what the sink
//! was handed, not what the source read). The one place that decides what a snapshot row
//! is: an insert of a table while its copy (a whole table, or one online chunk) is being
//! written — not every insert between a snapshot's start and end, which under an online
//! snapshot are mostly the stream's.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::{ChangeEvent, EventKind, SchemaRef, SnapshotMarker, TableName};

/// What a change did, as metrics label it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeOp {
    /// A row copied by the snapshot (consistent or online).
    Snapshot,
    /// An insert from the stream.
    Insert,
    /// An update.
    Update,
    /// A delete.
    Delete,
    /// A TRUNCATE of the table.
    Truncate,
}

impl ChangeOp {
    /// Every operation, in label order.
    pub const ALL: [ChangeOp; 5] = [
        ChangeOp::Snapshot,
        ChangeOp::Insert,
        ChangeOp::Update,
        ChangeOp::Delete,
        ChangeOp::Truncate,
    ];

    /// The label value (`snapshot`, `insert`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeOp::Snapshot => "snapshot",
            ChangeOp::Insert => "insert",
            ChangeOp::Update => "update",
            ChangeOp::Delete => "delete",
            ChangeOp::Truncate => "truncate",
        }
    }
}

/// Changes of one table (or of all tables), by operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    /// Rows copied by the initial snapshot (consistent or online).
    pub snapshot: u64,
    /// Streamed inserts.
    pub insert: u64,
    /// Streamed updates.
    pub update: u64,
    /// Streamed deletes.
    pub delete: u64,
    /// TRUNCATE statements that included the table.
    pub truncate: u64,
}

impl OpCounts {
    /// Every change, snapshot rows included.
    pub fn total(&self) -> u64 {
        self.snapshot + self.insert + self.update + self.delete + self.truncate
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &OpCounts) {
        self.snapshot += other.snapshot;
        self.insert += other.insert;
        self.update += other.update;
        self.delete += other.delete;
        self.truncate += other.truncate;
    }

    /// The count of `op`.
    pub fn get(&self, op: ChangeOp) -> u64 {
        match op {
            ChangeOp::Snapshot => self.snapshot,
            ChangeOp::Insert => self.insert,
            ChangeOp::Update => self.update,
            ChangeOp::Delete => self.delete,
            ChangeOp::Truncate => self.truncate,
        }
    }

    fn slot(&mut self, op: ChangeOp) -> &mut u64 {
        match op {
            ChangeOp::Snapshot => &mut self.snapshot,
            ChangeOp::Insert => &mut self.insert,
            ChangeOp::Update => &mut self.update,
            ChangeOp::Delete => &mut self.delete,
            ChangeOp::Truncate => &mut self.truncate,
        }
    }
}

/// A table's initial-snapshot progress as written to the sink.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableSnapshotProgress {
    /// Rows copied.
    pub rows: u64,
    /// Online snapshot chunks completed.
    pub chunks: u64,
    /// Whether the table's copy is complete.
    pub done: bool,
}

/// Per-table counters of what a sink was handed: the pipeline's statistics keep one, and
/// so can a sink wrapper (the CLI's summary). Update it a batch at a time.
#[derive(Clone, Debug, Default)]
pub struct TableCounts {
    changes: BTreeMap<TableName, OpCounts>,
    snapshot: BTreeMap<TableName, TableSnapshotProgress>,
    /// Tables whose copy (a whole table, or one chunk) is being written: their inserts
    /// are snapshot rows.
    copying: BTreeSet<TableName>,
}

impl TableCounts {
    /// Counts one event written to the sink.
    #[cfg(test)]
    pub(crate) fn record(&mut self, event: &ChangeEvent) {
        self.record_times(event, 1);
    }

    /// Counts the events of a batch written to the sink. A run of row changes of one
    /// kind to one table (a snapshot chunk, a bulk insert) is counted once for all:
    /// the map look-ups by table name cost more than the rest of the per-row work.
    pub fn record_all(&mut self, events: &[ChangeEvent]) {
        for run in events.chunk_by(ChangeEvent::same_row_run) {
            if let Some(first) = run.first() {
                self.record_times(first, run.len() as u64);
            }
        }
    }

    /// Counts `event` as if written `times` times: the first event of a run of row
    /// changes of one kind to one table (`ChangeEvent::same_row_run`) stands for the run.
    /// For a caller that walks a batch's runs itself (and counts more per run).
    pub fn record_run(&mut self, event: &ChangeEvent, times: u64) {
        self.record_times(event, times);
    }

    /// Counts `event` as if written `times` times (`times` > 1 only for row changes).
    fn record_times(&mut self, event: &ChangeEvent, times: u64) {
        match &event.kind {
            EventKind::Insert { table, .. } => self.insert(table, times),
            EventKind::InsertBlock { table, rows } => {
                self.insert(table, times.saturating_mul(rows.len() as u64));
            }
            EventKind::Update { table, .. } => self.count(&table.name, ChangeOp::Update, times),
            EventKind::Delete { table, .. } => self.count(&table.name, ChangeOp::Delete, times),
            EventKind::Truncate { tables, .. } => {
                for table in tables {
                    self.count(&table.name, ChangeOp::Truncate, 1);
                }
            }
            EventKind::Snapshot(marker) => self.snapshot_marker(marker),
            _ => {}
        }
    }

    /// Counts `times` inserts into `table`: snapshot rows while its copy is being written.
    fn insert(&mut self, table: &SchemaRef, times: u64) {
        let op = if self.copying.contains(&table.name) {
            if let Some(p) = self.snapshot.get_mut(&table.name) {
                p.rows += times;
            }
            ChangeOp::Snapshot
        } else {
            ChangeOp::Insert
        };
        self.count(&table.name, op, times);
    }

    fn count(&mut self, table: &TableName, op: ChangeOp, times: u64) {
        // Not `entry`: that would clone the name for every run of events.
        match self.changes.get_mut(table) {
            Some(counts) => *counts.slot(op) += times,
            None => {
                let mut counts = OpCounts::default();
                *counts.slot(op) += times;
                self.changes.insert(table.clone(), counts);
            }
        }
    }

    fn snapshot_marker(&mut self, marker: &SnapshotMarker) {
        match marker {
            SnapshotMarker::Restarted => {
                // The sink discards the abandoned snapshot's rows; so do the counts.
                self.snapshot.clear();
                self.copying.clear();
                for counts in self.changes.values_mut() {
                    counts.snapshot = 0;
                }
            }
            SnapshotMarker::TableStarted(table) => {
                self.snapshot.entry(table.clone()).or_default().done = false;
                self.copying.insert(table.clone());
                self.changes.entry(table.clone()).or_default();
            }
            SnapshotMarker::TableCompleted { table, .. } => {
                self.snapshot.entry(table.clone()).or_default().done = true;
                self.copying.remove(table);
            }
            SnapshotMarker::ChunkStarted { table, .. } => {
                self.snapshot.entry(table.clone()).or_default();
                self.copying.insert(table.clone());
                self.changes.entry(table.clone()).or_default();
            }
            SnapshotMarker::ChunkCompleted { table, .. } => {
                self.snapshot.entry(table.clone()).or_default().chunks += 1;
                self.copying.remove(table);
            }
            _ => {}
        }
    }

    /// `(table, op, count)` for every table seen.
    pub fn changes(&self) -> Vec<(TableName, ChangeOp, u64)> {
        self.changes
            .iter()
            .flat_map(|(table, counts)| {
                ChangeOp::ALL
                    .iter()
                    .map(move |op| (table.clone(), *op, counts.get(*op)))
            })
            .collect()
    }

    /// Each table's counts.
    pub fn by_table(&self) -> &BTreeMap<TableName, OpCounts> {
        &self.changes
    }

    /// The counts over all tables.
    pub fn totals(&self) -> OpCounts {
        let mut total = OpCounts::default();
        for counts in self.changes.values() {
            total.add(counts);
        }
        total
    }

    /// Rows of the current snapshot written so far (since the last restart), all tables.
    pub fn snapshot_rows(&self) -> u64 {
        self.snapshot.values().map(|p| p.rows).sum()
    }

    /// Tables whose snapshot copy completed (since the last restart).
    pub fn snapshot_tables_done(&self) -> u64 {
        self.snapshot.values().filter(|p| p.done).count() as u64
    }

    /// Each table's snapshot progress.
    pub fn snapshot(&self) -> Vec<(TableName, TableSnapshotProgress)> {
        self.snapshot
            .iter()
            .map(|(t, p)| (t.clone(), p.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChangeEvent, ColumnSchema, ColumnType, Lsn, Position, TableSchema, Value};
    use std::sync::Arc;

    fn schema(name: &str) -> crate::SchemaRef {
        Arc::new(TableSchema {
            name: TableName::new("public", name),
            relation_id: 1,
            columns: vec![ColumnSchema {
                name: "id".into(),
                column_type: ColumnType {
                    oid: 23,
                    modifier: -1,
                    name: None,
                    definition: Default::default(),
                },
                nullable: false,
                part_of_key: true,
                generated: false,
            }],
            replica_identity: crate::ReplicaIdentity::Default,
            primary_key: vec!["id".into()],
        })
    }

    fn event(kind: EventKind) -> ChangeEvent {
        ChangeEvent {
            lsn: crate::Lsn::ZERO,
            position: Position::new(Lsn(1), 0),
            kind,
        }
    }

    #[test]
    fn snapshot_rows_and_stream_changes_are_counted_apart() {
        let t = schema("t");
        let insert = || {
            event(EventKind::Insert {
                table: t.clone(),
                new: vec![Value::Int4(1)],
            })
        };
        let mut counts = TableCounts::default();
        let events = [
            event(EventKind::Snapshot(SnapshotMarker::TableStarted(
                t.name.clone(),
            ))),
            insert(),
            insert(),
            event(EventKind::Snapshot(SnapshotMarker::TableCompleted {
                table: t.name.clone(),
                rows: 2,
            })),
            insert(),
            event(EventKind::Delete {
                table: t.clone(),
                old: None,
            }),
        ];
        for e in &events {
            counts.record(e);
        }
        let changes = counts.changes();
        let get = |op: ChangeOp| {
            changes
                .iter()
                .find(|(_, o, _)| *o == op)
                .map(|(_, _, n)| *n)
        };
        assert_eq!(get(ChangeOp::Snapshot), Some(2));
        assert_eq!(get(ChangeOp::Insert), Some(1));
        assert_eq!(get(ChangeOp::Delete), Some(1));
        assert_eq!(get(ChangeOp::Update), Some(0));
        assert_eq!(
            counts.snapshot(),
            [(
                t.name.clone(),
                TableSnapshotProgress {
                    rows: 2,
                    chunks: 0,
                    done: true
                }
            )]
        );
        // Counted a batch at a time (runs of one kind to one table counted at once), the
        // same, also with a second schema object of the same table in the run.
        let mut batched = TableCounts::default();
        let mut more = events.to_vec();
        more.insert(
            2,
            event(EventKind::Insert {
                table: schema("t"),
                new: vec![Value::Int4(2)],
            }),
        );
        more.push(event(EventKind::Insert {
            table: schema("u"),
            new: vec![Value::Int4(1)],
        }));
        let mut one_by_one = TableCounts::default();
        for e in &more {
            one_by_one.record(e);
        }
        batched.record_all(&more);
        assert_eq!(batched.changes(), one_by_one.changes());
        assert_eq!(batched.snapshot(), one_by_one.snapshot());
    }
}
