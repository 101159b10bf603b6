//! An in-memory sink: materialized tables plus the ordered change log, with durable and
//! volatile state kept apart so tests can simulate a crash and restart from the token.
//!
//! Tests keep a [`MemoryHandle`] (cheap to clone) while the pipeline owns the
//! [`MemorySink`]; the handle reads the state, simulates crashes, and completes
//! asynchronous acknowledgements.

mod table;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, BatchId, ChangeEvent, Error, EventKind, Position, Result, ResumeToken, Row,
    SchemaRef, Sink, SinkBatch, SnapshotMarker, TableName, Value,
};

use self::table::MaterializedTable;

/// Options of the in-memory sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct MemorySinkOptions {
    /// `write` returns `Ack::Pending`; [`MemoryHandle::complete_pending_writes`] reports
    /// completion through the `Acknowledger`.
    pub async_writes: bool,
    /// `checkpoint` returns `Ack::Pending`; [`MemoryHandle::complete_pending_checkpoints`]
    /// makes the state durable and reports it through the `Acknowledger`.
    pub async_checkpoints: bool,
    /// Keep every applied event in the change log (default `true`).
    pub keep_log: bool,
}

impl Default for MemorySinkOptions {
    fn default() -> Self {
        MemorySinkOptions {
            async_writes: false,
            async_checkpoints: false,
            keep_log: true,
        }
    }
}

/// Counters of the in-memory sink.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Successful `open` calls.
    pub opens: u64,
    /// Batches written.
    pub writes: u64,
    /// Events applied (duplicates excluded).
    pub events: u64,
    /// Checkpoints that became durable.
    pub checkpoints: u64,
    /// Simulated crashes.
    pub crashes: u64,
}

/// The state a checkpoint captures. Tables are shared copy-on-write, so a checkpoint is
/// cheap; the log is shared too (a checkpoint records its length).
#[derive(Clone, Debug, Default)]
struct State {
    tables: BTreeMap<TableName, Arc<MaterializedTable>>,
    log_len: usize,
    applied_through: Option<Position>,
    token: Option<ResumeToken>,
}

#[derive(Debug)]
struct Shared {
    options: MemorySinkOptions,
    durable: State,
    current: State,
    log: Vec<ChangeEvent>,
    pending_checkpoints: Vec<(ResumeToken, State)>,
    pending_write: Option<BatchId>,
    acks: Option<Acknowledger>,
    /// Incremented by every open and simulated crash; a sink from an older epoch is dead.
    epoch: u64,
    duplicates: Vec<Position>,
    anomalies: Vec<String>,
    stats: MemoryStats,
    fail_next_write: Option<String>,
    fail_next_checkpoint: Option<String>,
    hold_writes: bool,
    writes_waiting: usize,
}

/// A shared handle on the in-memory sink's state: clone it freely, keep it in the test
/// while the pipeline owns the sink.
#[derive(Clone, Debug)]
pub struct MemoryHandle {
    shared: Arc<Mutex<Shared>>,
}

/// The in-memory sink. Create it with [`MemoryHandle::sink`]; several sinks made from one
/// handle share state, but only the most recently opened one is alive (an older one, like
/// one whose process "crashed", gets errors).
#[derive(Debug)]
pub struct MemorySink {
    handle: MemoryHandle,
    epoch: u64,
}

impl Default for MemoryHandle {
    fn default() -> Self {
        MemoryHandle::new(MemorySinkOptions::default())
    }
}

impl MemoryHandle {
    /// Fresh, empty state.
    pub fn new(options: MemorySinkOptions) -> Self {
        MemoryHandle {
            shared: Arc::new(Mutex::new(Shared {
                options,
                durable: State::default(),
                current: State::default(),
                log: Vec::new(),
                pending_checkpoints: Vec::new(),
                pending_write: None,
                acks: None,
                epoch: 0,
                duplicates: Vec::new(),
                anomalies: Vec::new(),
                stats: MemoryStats::default(),
                fail_next_write: None,
                fail_next_checkpoint: None,
                hold_writes: false,
                writes_waiting: 0,
            })),
        }
    }

    /// A sink on this state (it becomes the live one when opened).
    pub fn sink(&self) -> MemorySink {
        MemorySink {
            handle: self.clone(),
            epoch: u64::MAX,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic in another test thread must not hide this state.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Names of the tables that have been seen, sorted.
    pub fn tables(&self) -> Vec<TableName> {
        self.lock().current.tables.keys().cloned().collect()
    }

    /// The current rows of `table` (empty if never seen), sorted by their Postgres text.
    pub fn rows(&self, table: &TableName) -> Vec<Row> {
        let shared = self.lock();
        let mut rows: Vec<(Vec<Option<String>>, Row)> = shared
            .current
            .tables
            .get(table)
            .map(|t| t.all_rows())
            .unwrap_or_default()
            .into_iter()
            .map(|r| (render_row(&r), r))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows.into_iter().map(|(_, r)| r).collect()
    }

    /// The current rows of `table` as Postgres text (`None` for NULL;
    /// `Some("<unchanged>")` for an unchanged TOAST value that could not be merged),
    /// sorted: compare with `SELECT *::text … ORDER BY` the same way.
    pub fn rows_text(&self, table: &TableName) -> Vec<Vec<Option<String>>> {
        let shared = self.lock();
        let mut rows: Vec<Vec<Option<String>>> = shared
            .current
            .tables
            .get(table)
            .map(|t| t.all_rows())
            .unwrap_or_default()
            .iter()
            .map(|r| render_row(r.as_slice()))
            .collect();
        rows.sort();
        rows
    }

    /// Number of current rows of `table`.
    pub fn row_count(&self, table: &TableName) -> usize {
        self.lock().current.tables.get(table).map_or(0, |t| t.len())
    }

    /// The latest schema seen for `table`.
    pub fn schema(&self, table: &TableName) -> Option<SchemaRef> {
        self.lock()
            .current
            .tables
            .get(table)
            .map(|t| t.schema().clone())
    }

    /// The change log: every applied event in order (duplicates excluded; after a crash,
    /// only what the durable state covers plus what was applied since).
    pub fn changes(&self) -> Vec<ChangeEvent> {
        let shared = self.lock();
        shared.log[..shared.current.log_len.min(shared.log.len())].to_vec()
    }

    /// The token of the last durable checkpoint.
    pub fn durable_token(&self) -> Option<ResumeToken> {
        self.lock().durable.token.clone()
    }

    /// Position of the last applied event.
    pub fn last_position(&self) -> Option<Position> {
        self.lock().current.applied_through
    }

    /// Positions of events that arrived although an event at or after their position was
    /// already applied (a replay the source should not have sent); they were not applied.
    pub fn duplicate_positions(&self) -> Vec<Position> {
        self.lock().duplicates.clone()
    }

    /// Changes that did not fit the state (update or delete of a missing row, insert of an
    /// existing key, unmergeable unchanged TOAST values), each with its position. Empty
    /// when source and sink agree.
    pub fn anomalies(&self) -> Vec<String> {
        self.lock().anomalies.clone()
    }

    /// Counters.
    pub fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    /// Simulates a crash of the process holding the sink: the volatile state (everything
    /// after the last durable checkpoint, and checkpoints still pending) is dropped, and
    /// the sink currently alive fails every further call. Restart with a new
    /// [`MemoryHandle::sink`], whose `open` returns the durable token.
    pub fn simulate_crash(&self) {
        let mut shared = self.lock();
        shared.epoch += 1;
        shared.current = shared.durable.clone();
        let keep = shared.durable.log_len;
        shared.log.truncate(keep);
        shared.pending_checkpoints.clear();
        shared.pending_write = None;
        shared.stats.crashes += 1;
    }

    /// Makes every pending checkpoint durable, in order, and reports each through the
    /// `Acknowledger`. Returns how many completed.
    pub fn complete_pending_checkpoints(&self) -> usize {
        let mut shared = self.lock();
        let pending = std::mem::take(&mut shared.pending_checkpoints);
        let n = pending.len();
        for (token, state) in pending {
            shared.durable = state;
            shared.stats.checkpoints += 1;
            if let Some(acks) = &shared.acks {
                acks.durable(token);
            }
        }
        n
    }

    /// Reports the last pending write (and so every earlier one) completed. Returns
    /// whether there was one.
    pub fn complete_pending_writes(&self) -> bool {
        let mut shared = self.lock();
        match shared.pending_write.take() {
            Some(id) => {
                if let Some(acks) = &shared.acks {
                    acks.completed(id);
                }
                true
            }
            None => false,
        }
    }

    /// Number of checkpoints waiting for [`MemoryHandle::complete_pending_checkpoints`].
    pub fn pending_checkpoints(&self) -> usize {
        self.lock().pending_checkpoints.len()
    }

    /// Makes the next `write` fail with a sink error carrying `message` (fault injection).
    pub fn fail_next_write(&self, message: impl Into<String>) {
        self.lock().fail_next_write = Some(message.into());
    }

    /// Makes the next `checkpoint` fail with a sink error carrying `message`.
    pub fn fail_next_checkpoint(&self, message: impl Into<String>) {
        self.lock().fail_next_checkpoint = Some(message.into());
    }

    /// While `hold` is true, `write` waits (checking every 5 ms) before it looks at its
    /// batch. A test holds the pipeline this way, and through its bounded channels the
    /// source, at a point it chooses: a server-side read stays in progress until released.
    pub fn hold_writes(&self, hold: bool) {
        self.lock().hold_writes = hold;
    }

    /// Number of `write` calls waiting because writes are held ([`MemoryHandle::hold_writes`]).
    pub fn writes_waiting(&self) -> usize {
        self.lock().writes_waiting
    }

    /// Waits until `condition` holds (checked every 10 ms) or `timeout` passes; returns
    /// whether it held. For tests that wait for the pipeline to catch up.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut condition: impl FnMut(&MemoryHandle) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if condition(self) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn render_row(row: &[Value]) -> Vec<Option<String>> {
    row.iter()
        .map(|v| match v {
            Value::Unchanged => Some("<unchanged>".to_owned()),
            v => v.to_pg_text(),
        })
        .collect()
}

impl Shared {
    fn check_epoch(&self, epoch: u64) -> Result<()> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(Error::sink(
                "this in-memory sink was superseded (simulated crash, or another sink opened on the same state)",
            ))
        }
    }

    fn table(&mut self, schema: &SchemaRef) -> &mut MaterializedTable {
        let entry = self
            .current
            .tables
            .entry(schema.name.clone())
            .or_insert_with(|| Arc::new(MaterializedTable::new(schema.clone())));
        let table = Arc::make_mut(entry);
        if !Arc::ptr_eq(table.schema(), schema) && **table.schema() != **schema {
            table.set_schema(schema.clone());
        }
        table
    }

    fn apply(&mut self, event: &ChangeEvent) {
        let result = match &event.kind {
            EventKind::Insert { table, new } => self.table(table).insert(new.clone()),
            EventKind::Update { table, old, new } => self.table(table).update(old.as_ref(), new),
            EventKind::Delete { table, old } => self.table(table).delete(old.as_ref()),
            EventKind::Truncate { tables, .. } => {
                for t in tables {
                    self.table(t).truncate();
                }
                Ok(())
            }
            EventKind::SchemaChange { new, .. } => {
                let _ = self.table(new);
                Ok(())
            }
            EventKind::Snapshot(SnapshotMarker::Restarted) => {
                // Every row so far came from the abandoned snapshot (streaming starts only
                // after a snapshot completes).
                for t in self.current.tables.values_mut() {
                    Arc::make_mut(t).truncate();
                }
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(anomaly) = result {
            self.anomalies
                .push(format!("position {}: {anomaly}", event.position));
        }
    }
}

impl MemorySink {
    /// Returns once writes are not held ([`MemoryHandle::hold_writes`]), counted as waiting
    /// meanwhile (also when the write is dropped while it waits).
    async fn wait_while_held(&self) {
        struct Waiting<'a>(&'a MemoryHandle);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.lock().writes_waiting -= 1;
            }
        }
        {
            let mut shared = self.handle.lock();
            if !shared.hold_writes {
                return;
            }
            shared.writes_waiting += 1;
        }
        let _waiting = Waiting(&self.handle);
        while self.handle.lock().hold_writes {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[async_trait]
impl Sink for MemorySink {
    /// Drops volatile state (as after a crash), makes this sink the live one, and returns
    /// the durable token.
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        let mut shared = self.handle.lock();
        shared.epoch += 1;
        self.epoch = shared.epoch;
        shared.current = shared.durable.clone();
        let keep = shared.durable.log_len;
        shared.log.truncate(keep);
        shared.pending_checkpoints.clear();
        shared.pending_write = None;
        shared.acks = Some(acks);
        shared.stats.opens += 1;
        Ok(shared.durable.token.clone())
    }

    /// Applies the batch to the current (volatile) state. Events at or before the last
    /// applied position are recorded as duplicates and not applied.
    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        self.wait_while_held().await;
        let mut shared = self.handle.lock();
        shared.check_epoch(self.epoch)?;
        if let Some(message) = shared.fail_next_write.take() {
            return Err(Error::sink(message));
        }
        for event in &batch.batch.events {
            if shared
                .current
                .applied_through
                .is_some_and(|p| event.position <= p)
            {
                shared.duplicates.push(event.position);
                continue;
            }
            shared.apply(event);
            shared.current.applied_through = Some(event.position);
            shared.stats.events += 1;
            if shared.options.keep_log {
                shared.log.push(event.clone());
                shared.current.log_len = shared.log.len();
            }
        }
        shared.stats.writes += 1;
        if shared.options.async_writes {
            shared.pending_write = Some(batch.id);
            Ok(Ack::Pending)
        } else {
            Ok(Ack::Done)
        }
    }

    /// Captures the current state with `token`: durable at once, or pending until
    /// [`MemoryHandle::complete_pending_checkpoints`] with `async_checkpoints`.
    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        let mut shared = self.handle.lock();
        shared.check_epoch(self.epoch)?;
        if let Some(message) = shared.fail_next_checkpoint.take() {
            return Err(Error::sink(message));
        }
        let mut state = shared.current.clone();
        state.token = Some(token.clone());
        shared.current.token = Some(token.clone());
        if shared.options.async_checkpoints {
            shared.pending_checkpoints.push((token.clone(), state));
            Ok(Ack::Pending)
        } else {
            shared.durable = state;
            shared.stats.checkpoints += 1;
            Ok(Ack::Done)
        }
    }
}

#[cfg(test)]
mod tests;
