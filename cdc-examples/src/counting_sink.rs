//! [`CountingSink`]: wraps any [`Sink`] and counts what reaches it, per table and
//! operation, for summaries and progress displays.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, ChangeEvent, EventKind, Lsn, Result, ResumeToken, Sink, SinkBatch,
    SnapshotMarker, TableCounts,
};

pub use cdc_core::OpCounts;

/// Everything counted so far. Only batches the inner sink accepted are counted.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Changes per table, and each table's snapshot progress (counted as the pipeline's
    /// statistics count them: an insert is a snapshot row while its table's copy is
    /// being written).
    pub tables: TableCounts,
    /// Transactions (commits) written.
    pub transactions: u64,
    /// Commit LSN of the first transaction written.
    pub first_lsn: Option<Lsn>,
    /// Commit LSN of the last transaction written.
    pub last_lsn: Option<Lsn>,
    /// A snapshot is being copied (between its start and completion markers).
    pub snapshot_running: bool,
    /// The snapshot's completion marker was written.
    pub snapshot_complete: bool,
    /// When the sink was opened (the run started).
    pub opened: Option<Instant>,
    /// When the current snapshot started (its first rows may arrive in the same batch as
    /// its completion, so this is the run's start when the first batch starts it).
    pub snapshot_started: Option<Instant>,
    /// How long the snapshot took, once complete.
    pub snapshot_duration_secs: Option<f64>,
    /// The slot's consistent point, once the snapshot completed.
    pub consistent_point: Option<Lsn>,
}

impl Counts {
    /// The counts over all tables.
    pub fn totals(&self) -> OpCounts {
        self.tables.totals()
    }

    /// Streamed changes (not snapshot rows) over all tables.
    pub fn streamed_changes(&self) -> u64 {
        let t = self.totals();
        t.insert + t.update + t.delete + t.truncate
    }

    /// Rows of the current snapshot written so far.
    pub fn snapshot_rows(&self) -> u64 {
        self.tables.snapshot_rows()
    }

    /// Tables whose snapshot copy completed.
    pub fn snapshot_tables_done(&self) -> u64 {
        self.tables.snapshot_tables_done()
    }

    /// Counts a batch's events: per table in [`TableCounts`], the rest here (row changes
    /// come in runs, whose first event stands for the run).
    fn record_all(&mut self, events: &[ChangeEvent]) {
        // One walk over the batch: a second one costs a snapshot's client measurably.
        for run in events.chunk_by(ChangeEvent::same_row_run) {
            if let Some(first) = run.first() {
                self.tables.record_run(first, run.len() as u64);
                self.record_marker(first);
            }
        }
    }

    /// What `event` changes beyond the per-table counts.
    fn record_marker(&mut self, event: &ChangeEvent) {
        match &event.kind {
            EventKind::Commit(commit) => {
                self.transactions += 1;
                self.first_lsn.get_or_insert(commit.commit_lsn);
                self.last_lsn = Some(commit.commit_lsn);
            }
            EventKind::Snapshot(SnapshotMarker::Started) => {
                self.snapshot_running = true;
                self.snapshot_complete = false;
                self.snapshot_started = Some(match self.opened {
                    Some(opened) if self.transactions == 0 => opened,
                    _ => Instant::now(),
                });
            }
            EventKind::Snapshot(SnapshotMarker::Completed { consistent_point }) => {
                self.snapshot_running = false;
                self.snapshot_complete = true;
                self.consistent_point = Some(*consistent_point);
                self.snapshot_duration_secs = self
                    .snapshot_started
                    .map(|started| started.elapsed().as_secs_f64());
            }
            _ => {}
        }
    }
}

/// A shared view of a [`CountingSink`]'s counts, readable while the pipeline runs.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    inner: Arc<Mutex<Counts>>,
}

impl Tally {
    /// A copy of the counts now.
    pub fn counts(&self) -> Counts {
        self.lock().clone()
    }

    /// Reads the counts without copying them.
    pub fn with<T>(&self, f: impl FnOnce(&Counts) -> T) -> T {
        f(&self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Counting never panics while holding the lock; a poisoned lock still holds
        // consistent counts.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Delegates everything to `inner` and counts the events of every batch `inner` accepted.
///
/// Counting happens after a successful `write` (so a rejected batch is not counted) and
/// takes one short lock per batch.
#[derive(Debug)]
pub struct CountingSink<S> {
    inner: S,
    /// Kept open for the pipeline's sake: `Pipeline::run` (cdc-core as of this writing)
    /// spins on a closed acknowledgement channel, and sinks that acknowledge
    /// synchronously (the stream, stdout and file sinks) drop theirs at `open`.
    acks: Option<Acknowledger>,
    /// Counts of the batch being written, applied once the write succeeded.
    pending: Counts,
    tally: Tally,
}

impl<S: Sink> CountingSink<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        CountingSink {
            inner,
            acks: None,
            pending: Counts::default(),
            tally: Tally::default(),
        }
    }

    /// The shared counts.
    pub fn tally(&self) -> Tally {
        self.tally.clone()
    }

    /// The wrapped sink.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: Sink> Sink for CountingSink<S> {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        self.acks = Some(acks.clone());
        self.tally.lock().opened = Some(Instant::now());
        self.inner.open(acks).await
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        // Count into a copy first: the state that markers carry across batches (snapshot
        // running or not) must not change if the write fails.
        self.pending.clone_from(&self.tally.lock());
        self.pending.record_all(&batch.batch.events);
        let ack = self.inner.write(batch).await?;
        std::mem::swap(&mut *self.tally.lock(), &mut self.pending);
        Ok(ack)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        self.inner.checkpoint(token).await
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }

    fn takes_row_blocks(&self) -> bool {
        self.inner.takes_row_blocks()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use cdc_core::{
        BatchId, ChangeBatch, ColumnSchema, ColumnType, Position, ReplicaIdentity, SourceIdentity,
        TableName, TableSchema, TxCommit, Value,
    };

    use super::*;

    #[derive(Default)]
    struct Refusing {
        fail: bool,
    }

    #[async_trait]
    impl Sink for Refusing {
        async fn open(&mut self, _: Acknowledger) -> Result<Option<ResumeToken>> {
            Ok(None)
        }
        async fn write(&mut self, _: SinkBatch) -> Result<Ack> {
            if self.fail {
                Err(cdc_core::Error::sink("no"))
            } else {
                Ok(Ack::Done)
            }
        }
        async fn checkpoint(&mut self, _: &ResumeToken) -> Result<Ack> {
            Ok(Ack::Done)
        }
    }

    fn schema() -> Arc<TableSchema> {
        schema_named("t")
    }

    fn schema_named(name: &str) -> Arc<TableSchema> {
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
            replica_identity: ReplicaIdentity::Default,
            primary_key: vec!["id".into()],
        })
    }

    fn batch(events: Vec<EventKind>) -> SinkBatch {
        let mut batch = ChangeBatch::new();
        for (i, kind) in events.into_iter().enumerate() {
            batch.push(ChangeEvent {
                lsn: cdc_core::Lsn::ZERO,
                position: Position::new(Lsn(100), i as u64),
                kind,
            });
        }
        let identity = SourceIdentity {
            system_identifier: "1".into(),
            timeline: 1,
            database: "d".into(),
            slot: "s".into(),
        };
        SinkBatch {
            id: BatchId(0),
            batch,
            resume_token: ResumeToken::new(identity, None),
        }
    }

    #[tokio::test]
    async fn counts_snapshot_rows_and_streamed_changes_per_table() {
        let t = schema();
        let mut sink = CountingSink::new(Refusing::default());
        let tally = sink.tally();
        let insert = || EventKind::Insert {
            table: t.clone(),
            new: vec![Value::Int4(1)],
        };
        sink.write(batch(vec![
            EventKind::Snapshot(SnapshotMarker::Started),
            EventKind::Snapshot(SnapshotMarker::TableStarted(t.name.clone())),
            insert(),
            insert(),
            EventKind::Snapshot(SnapshotMarker::TableCompleted {
                table: t.name.clone(),
                rows: 2,
            }),
            // Streamed while an online snapshot runs, outside the table's copy: an insert.
            insert(),
        ]))
        .await
        .unwrap();
        assert!(tally.counts().snapshot_running);
        sink.write(batch(vec![
            EventKind::Snapshot(SnapshotMarker::Completed {
                consistent_point: Lsn(90),
            }),
            insert(),
            EventKind::Delete {
                table: t.clone(),
                old: None,
            },
            EventKind::Commit(TxCommit {
                commit_lsn: Lsn(100),
                end_lsn: Lsn(108),
                commit_time_micros: 0,
            }),
        ]))
        .await
        .unwrap();
        let counts = tally.counts();
        let table = counts.tables.by_table()[&TableName::new("public", "t")];
        assert_eq!((table.snapshot, table.insert, table.delete), (2, 2, 1));
        assert_eq!(
            (counts.snapshot_rows(), counts.snapshot_tables_done()),
            (2, 1)
        );
        assert_eq!(counts.first_lsn, Some(Lsn(100)));
        assert!(counts.snapshot_complete && !counts.snapshot_running);
    }

    #[tokio::test]
    async fn runs_of_tables_and_kinds_in_one_batch_are_each_counted() {
        let (a, b) = (schema_named("a"), schema_named("b"));
        // A second schema object for `a`, as after a relation message: same name, other Arc.
        let a_again = schema_named("a");
        let mut sink = CountingSink::new(Refusing::default());
        let tally = sink.tally();
        let insert = |t: &Arc<TableSchema>| EventKind::Insert {
            table: t.clone(),
            new: vec![Value::Int4(1)],
        };
        let update = |t: &Arc<TableSchema>| EventKind::Update {
            table: t.clone(),
            old: None,
            new: vec![Value::Int4(1)],
        };
        let delete = |t: &Arc<TableSchema>| EventKind::Delete {
            table: t.clone(),
            old: None,
        };
        sink.write(batch(vec![
            insert(&a),
            insert(&a_again),
            insert(&b),
            insert(&a),
            update(&a),
            update(&a),
            delete(&a),
            delete(&b),
            delete(&b),
            EventKind::Snapshot(SnapshotMarker::Started),
            EventKind::Snapshot(SnapshotMarker::ChunkStarted {
                table: b.name.clone(),
                chunk: 0,
            }),
            insert(&b),
            insert(&b),
            EventKind::Snapshot(SnapshotMarker::ChunkCompleted {
                table: b.name.clone(),
                chunk: 0,
                rows: 2,
            }),
            EventKind::Snapshot(SnapshotMarker::Completed {
                consistent_point: Lsn(90),
            }),
            insert(&b),
        ]))
        .await
        .unwrap();
        let counts = tally.counts();
        let of = |name: &str| {
            let c = counts.tables.by_table()[&TableName::new("public", name)];
            (c.snapshot, c.insert, c.update, c.delete)
        };
        assert_eq!(of("a"), (0, 3, 2, 1));
        assert_eq!(of("b"), (2, 2, 0, 2));
        assert_eq!(counts.snapshot_rows(), 2);
    }

    #[tokio::test]
    async fn a_refused_batch_is_not_counted() {
        let t = schema();
        let mut sink = CountingSink::new(Refusing { fail: true });
        let tally = sink.tally();
        let result = sink
            .write(batch(vec![
                EventKind::Snapshot(SnapshotMarker::Started),
                EventKind::Insert {
                    table: t,
                    new: vec![Value::Int4(1)],
                },
            ]))
            .await;
        assert!(result.is_err());
        let counts = tally.counts();
        assert!(counts.tables.by_table().is_empty() && !counts.snapshot_running);
    }
}
