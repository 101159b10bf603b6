//! Live statistics of a running pipeline, readable from any thread at any time.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::table_counts::{ChangeOp, TableCounts, TableSnapshotProgress};
use crate::{ChangeBatch, ChangeEvent, ErrorKind, EventKind, Lsn, SnapshotMarker, TableName};

/// Counters updated by the pipeline. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct PipelineStats {
    inner: Arc<Counters>,
}

#[derive(Debug)]
struct Counters {
    started: Instant,
    events: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
    batches_in_flight: AtomicU64,
    received_lsn: AtomicU64,
    confirmed_lsn: AtomicU64,
    last_commit_time_micros: AtomicU64,
    checkpoints: AtomicU64,
    snapshot_tables_done: AtomicU64,
    snapshot_rows: AtomicU64,
    snapshot_done: AtomicU64,
    durable_lsn: AtomicU64,
    /// Changes per table and operation, snapshot progress per table.
    tables: Mutex<TableCounts>,
    checkpoints_timing: Mutex<CheckpointTiming>,
    /// Errors that ended a run, by kind.
    errors: Mutex<Vec<(ErrorKind, u64)>>,
}

#[derive(Debug, Default)]
struct CheckpointTiming {
    requested_at: Option<Instant>,
    seconds_sum: f64,
    last_seconds: f64,
    last_durable_at: Option<Instant>,
}

/// Checkpoint timings, for metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointStats {
    /// Durable checkpoints.
    pub count: u64,
    /// Sum of the seconds from each checkpoint's request to its durable acknowledgement.
    pub seconds_sum: f64,
    /// That time for the last one.
    pub last_seconds: f64,
    /// How long ago the last one became durable (`None` before the first).
    pub last_durable_age: Option<Duration>,
}

/// A point-in-time copy of the statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Seconds since the pipeline started.
    pub elapsed_micros: u64,
    /// Events written to the sink.
    pub events: u64,
    /// Approximate bytes of events written.
    pub bytes: u64,
    /// Batches written.
    pub batches: u64,
    /// Batches written and not yet acknowledged under the commit mode.
    pub batches_in_flight: u64,
    /// Commit LSN of the latest event received.
    pub received_lsn: Lsn,
    /// LSN confirmed to the source.
    pub confirmed_lsn: Lsn,
    /// Commit time (µs since 2000-01-01 UTC) of the latest transaction received, 0 if none.
    pub last_commit_time_micros: i64,
    /// Completed sink checkpoints.
    pub checkpoints: u64,
    /// Tables whose snapshot copy completed.
    pub snapshot_tables_done: u64,
    /// Snapshot rows written.
    pub snapshot_rows: u64,
    /// Whether the initial snapshot completed (or none was taken) in this run.
    pub snapshot_complete: bool,
    /// The end of what the sink's last durable checkpoint covers.
    pub durable_lsn: Lsn,
}

impl StatsSnapshot {
    /// Events per second over the whole run.
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / (self.elapsed_micros.max(1) as f64 / 1e6)
    }

    /// Bytes per second over the whole run.
    pub fn bytes_per_second(&self) -> f64 {
        self.bytes as f64 / (self.elapsed_micros.max(1) as f64 / 1e6)
    }

    /// WAL bytes between what was received and what is confirmed.
    pub fn lag_bytes(&self) -> u64 {
        self.received_lsn.bytes_since(self.confirmed_lsn)
    }

    /// Seconds between now and the commit time of the latest transaction received (how far
    /// behind the source the stream is), or `None` before any transaction.
    pub fn lag_seconds(&self) -> Option<f64> {
        if self.last_commit_time_micros == 0 {
            return None;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_micros() as i64;
        let commit_unix = self.last_commit_time_micros
            + crate::value::UNIX_TO_POSTGRES_EPOCH_DAYS * crate::value::USECS_PER_DAY;
        Some((now - commit_unix).max(0) as f64 / 1e6)
    }
}

impl Default for PipelineStats {
    fn default() -> Self {
        PipelineStats {
            inner: Arc::new(Counters {
                started: Instant::now(),
                events: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                batches: AtomicU64::new(0),
                batches_in_flight: AtomicU64::new(0),
                received_lsn: AtomicU64::new(0),
                confirmed_lsn: AtomicU64::new(0),
                last_commit_time_micros: AtomicU64::new(0),
                checkpoints: AtomicU64::new(0),
                snapshot_tables_done: AtomicU64::new(0),
                snapshot_rows: AtomicU64::new(0),
                snapshot_done: AtomicU64::new(0),
                durable_lsn: AtomicU64::new(0),
                tables: Mutex::new(TableCounts::default()),
                checkpoints_timing: Mutex::new(CheckpointTiming::default()),
                errors: Mutex::new(Vec::new()),
            }),
        }
    }
}

impl PipelineStats {
    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let c = &self.inner;
        StatsSnapshot {
            elapsed_micros: u64::try_from(c.started.elapsed().as_micros()).unwrap_or(u64::MAX),
            events: c.events.load(Relaxed),
            bytes: c.bytes.load(Relaxed),
            batches: c.batches.load(Relaxed),
            batches_in_flight: c.batches_in_flight.load(Relaxed),
            received_lsn: Lsn(c.received_lsn.load(Relaxed)),
            confirmed_lsn: Lsn(c.confirmed_lsn.load(Relaxed)),
            last_commit_time_micros: c.last_commit_time_micros.load(Relaxed) as i64,
            checkpoints: c.checkpoints.load(Relaxed),
            snapshot_tables_done: c.snapshot_tables_done.load(Relaxed),
            snapshot_rows: c.snapshot_rows.load(Relaxed),
            snapshot_complete: c.snapshot_done.load(Relaxed) != 0,
            durable_lsn: Lsn(c.durable_lsn.load(Relaxed)),
        }
    }

    /// Changes written to the sink: `(table, operation, count)`, every operation of every
    /// table seen.
    pub fn changes_by_table(&self) -> Vec<(TableName, ChangeOp, u64)> {
        lock(&self.inner.tables).changes()
    }

    /// The snapshot's progress per table (tables whose copy started in this run).
    pub fn snapshot_by_table(&self) -> Vec<(TableName, TableSnapshotProgress)> {
        lock(&self.inner.tables).snapshot()
    }

    /// Checkpoint count and timings.
    pub fn checkpoints(&self) -> CheckpointStats {
        let timing = lock(&self.inner.checkpoints_timing);
        CheckpointStats {
            count: self.inner.checkpoints.load(Relaxed),
            seconds_sum: timing.seconds_sum,
            last_seconds: timing.last_seconds,
            last_durable_age: timing.last_durable_at.map(|t| t.elapsed()),
        }
    }

    /// Errors that ended a run, by kind.
    pub fn errors(&self) -> Vec<(ErrorKind, u64)> {
        lock(&self.inner.errors).clone()
    }

    /// Counts an error that ended a run (the pipeline does; an embedder that retries runs
    /// with the same stats sees each).
    pub fn record_error(&self, kind: ErrorKind) {
        let mut errors = lock(&self.inner.errors);
        match errors.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => errors.push((kind, 1)),
        }
    }

    pub(crate) fn record_batch(&self, batch: &ChangeBatch) {
        let c = &self.inner;
        // A block of rows counts as the inserts it stands for, as a sink that does not
        // take blocks sees them.
        let events: usize = batch.events.iter().map(ChangeEvent::events_held).sum();
        c.events.fetch_add(events as u64, Relaxed);
        c.bytes.fetch_add(batch.byte_size as u64, Relaxed);
        c.batches.fetch_add(1, Relaxed);
        if let Some(p) = batch.last_position() {
            c.received_lsn.fetch_max(p.commit_lsn.0, Relaxed);
        }
        let mut in_snapshot_rows = 0;
        // One lock per batch for the per-table counts.
        lock(&c.tables).record_all(&batch.events);
        for event in &batch.events {
            match &event.kind {
                EventKind::Commit(commit) => c
                    .last_commit_time_micros
                    .store(commit.commit_time_micros as u64, Relaxed),
                EventKind::Snapshot(SnapshotMarker::TableCompleted { rows, .. }) => {
                    c.snapshot_tables_done.fetch_add(1, Relaxed);
                    in_snapshot_rows += rows;
                }
                EventKind::Snapshot(SnapshotMarker::Started) => {
                    // A backfill of tables added or copied again on a live stream.
                    c.snapshot_done.store(0, Relaxed);
                }
                EventKind::Snapshot(SnapshotMarker::Completed { .. }) => {
                    c.snapshot_done.store(1, Relaxed);
                }
                EventKind::Snapshot(SnapshotMarker::Restarted) => {
                    c.snapshot_tables_done.store(0, Relaxed);
                    c.snapshot_rows.store(0, Relaxed);
                }
                _ => {}
            }
        }
        c.snapshot_rows.fetch_add(in_snapshot_rows, Relaxed);
    }

    pub(crate) fn set_in_flight(&self, n: usize) {
        self.inner.batches_in_flight.store(n as u64, Relaxed);
    }

    pub(crate) fn set_confirmed(&self, lsn: Lsn) {
        self.inner.confirmed_lsn.store(lsn.0, Relaxed);
    }

    pub(crate) fn record_checkpoint(&self, durable_end: Option<Lsn>) {
        self.inner.checkpoints.fetch_add(1, Relaxed);
        if let Some(end) = durable_end {
            self.inner.durable_lsn.fetch_max(end.0, Relaxed);
        }
        let mut timing = lock(&self.inner.checkpoints_timing);
        let now = Instant::now();
        if let Some(requested) = timing.requested_at.take() {
            let seconds = now.duration_since(requested).as_secs_f64();
            timing.seconds_sum += seconds;
            timing.last_seconds = seconds;
        }
        timing.last_durable_at = Some(now);
    }

    pub(crate) fn checkpoint_requested(&self) {
        let mut timing = lock(&self.inner.checkpoints_timing);
        if timing.requested_at.is_none() {
            timing.requested_at = Some(Instant::now());
        }
    }
}

/// The lock, also after a panic elsewhere poisoned it (counters stay usable).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
