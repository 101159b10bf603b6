//! Changes written to the sink per table and operation, and the initial snapshot's progress
//! per table, counted from the batches the pipeline writes (so they count what the sink
//! was handed, not what the source read).

use std::collections::{BTreeMap, BTreeSet};

use crate::{ChangeEvent, EventKind, SnapshotMarker, TableName};

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

    fn index(self) -> usize {
        self as usize
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

/// Per-table counters (kept under the stats' lock; updated once per batch).
#[derive(Debug, Default)]
pub(super) struct TableCounts {
    changes: BTreeMap<TableName, [u64; 5]>,
    snapshot: BTreeMap<TableName, TableSnapshotProgress>,
    /// Tables whose copy (a whole table, or one chunk) is being written: their inserts
    /// are snapshot rows.
    copying: BTreeSet<TableName>,
}

impl TableCounts {
    /// Counts one event written to the sink.
    #[cfg(test)]
    pub(super) fn record(&mut self, event: &ChangeEvent) {
        self.record_times(event, 1);
    }

    /// Counts the events of a batch written to the sink. A run of row changes of one
    /// kind to one table (a snapshot chunk, a bulk insert) is counted once for all:
    /// the map look-ups by table name cost more than the rest of the per-row work.
    pub(super) fn record_all(&mut self, events: &[ChangeEvent]) {
        for run in events.chunk_by(ChangeEvent::same_row_run) {
            if let Some(first) = run.first() {
                self.record_times(first, run.len() as u64);
            }
        }
    }

    /// Counts `event` as if written `times` times (`times` > 1 only for row changes).
    fn record_times(&mut self, event: &ChangeEvent, times: u64) {
        match &event.kind {
            EventKind::Insert { table, .. } => {
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

    fn count(&mut self, table: &TableName, op: ChangeOp, times: u64) {
        match self.changes.get_mut(table) {
            Some(counts) => counts[op.index()] += times,
            None => {
                let mut counts = [0; 5];
                counts[op.index()] = times;
                self.changes.insert(table.clone(), counts);
            }
        }
    }

    fn snapshot_marker(&mut self, marker: &SnapshotMarker) {
        match marker {
            SnapshotMarker::Restarted => {
                self.snapshot.clear();
                self.copying.clear();
            }
            SnapshotMarker::TableStarted(table) => {
                self.snapshot.entry(table.clone()).or_default().done = false;
                self.copying.insert(table.clone());
            }
            SnapshotMarker::TableCompleted { table, .. } => {
                self.snapshot.entry(table.clone()).or_default().done = true;
                self.copying.remove(table);
            }
            SnapshotMarker::ChunkStarted { table, .. } => {
                self.snapshot.entry(table.clone()).or_default();
                self.copying.insert(table.clone());
            }
            SnapshotMarker::ChunkCompleted { table, .. } => {
                self.snapshot.entry(table.clone()).or_default().chunks += 1;
                self.copying.remove(table);
            }
            _ => {}
        }
    }

    /// `(table, op, count)` for every table seen.
    pub(super) fn changes(&self) -> Vec<(TableName, ChangeOp, u64)> {
        self.changes
            .iter()
            .flat_map(|(table, counts)| {
                ChangeOp::ALL
                    .iter()
                    .map(move |op| (table.clone(), *op, counts[op.index()]))
            })
            .collect()
    }

    pub(super) fn snapshot(&self) -> Vec<(TableName, TableSnapshotProgress)> {
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
