//! The embedded engine's sink (see `main.rs`): in-memory tables, and its own checkpoint
//! schedule that writes them with the token covering them to one file, atomically. Also
//! run through the sink conformance kit (`cdc-examples/tests/conformance_engine.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, Error, EventKind, Result, ResumeToken, Row, Sink, SinkBatch, SnapshotMarker,
    TableSchema, Value,
};
use serde::{Deserialize, Serialize};

/// A table: primary key text → column → value text.
pub type Table = BTreeMap<String, BTreeMap<String, Option<String>>>;

/// What the engine persists: its state and the token it covers, in one file.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct EngineCheckpoint {
    /// Table name → its rows.
    pub tables: BTreeMap<String, Table>,
    /// The token covering exactly `tables`.
    pub token: Option<ResumeToken>,
}

/// The engine's live state, shared between the sink and the checkpoint task.
#[derive(Debug, Default)]
struct EngineState {
    tables: BTreeMap<String, Table>,
    /// The token covering exactly `tables`.
    latest: Option<ResumeToken>,
    /// Changed since the last engine checkpoint.
    dirty: bool,
}

/// The sink side of the engine.
#[derive(Debug)]
pub struct EngineSink {
    path: PathBuf,
    every: Duration,
    state: Arc<Mutex<EngineState>>,
    checkpointer: Option<tokio::task::JoinHandle<()>>,
}

impl EngineSink {
    /// A sink checkpointing to `path` every `every`.
    pub fn new(path: PathBuf, every: Duration) -> Self {
        EngineSink {
            path,
            every,
            state: Arc::default(),
            checkpointer: None,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, EngineState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(table: &TableSchema, row: &Row) -> String {
    let parts: Vec<String> = table
        .key_indexes()
        .into_iter()
        .map(|i| row.get(i).and_then(Value::to_pg_text).unwrap_or_default())
        .collect();
    parts.join(",")
}

fn apply(tables: &mut BTreeMap<String, Table>, kind: &EventKind) {
    match kind {
        EventKind::Insert { table, new } | EventKind::Update { table, new, .. } => {
            let rows = tables.entry(table.name.to_string()).or_default();
            if let EventKind::Update { old: Some(old), .. } = kind {
                // The key changed: the row moves.
                rows.remove(&key(table, &old.values));
            }
            let row = rows.entry(key(table, new)).or_default();
            for (column, value) in table.columns.iter().zip(new) {
                // An unchanged TOAST value keeps what the engine has.
                if !value.is_unchanged() {
                    row.insert(column.name.clone(), value.to_pg_text());
                }
            }
        }
        EventKind::Delete {
            table,
            old: Some(old),
        } => {
            if let Some(rows) = tables.get_mut(&table.name.to_string()) {
                rows.remove(&key(table, &old.values));
            }
        }
        EventKind::Truncate { tables: names, .. } => {
            for table in names {
                tables.remove(&table.name.to_string());
            }
        }
        // A snapshot is only ever restarted before streaming began: everything held came
        // from the abandoned snapshot.
        EventKind::Snapshot(SnapshotMarker::Restarted) => tables.clear(),
        _ => {}
    }
}

/// Writes `checkpoint` to `path` atomically.
fn persist(path: &Path, checkpoint: &EngineCheckpoint) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&serde_json::to_vec(checkpoint)?)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[async_trait]
impl Sink for EngineSink {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        let saved: EngineCheckpoint = match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::sink("the engine checkpoint is unreadable").with_source(e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => EngineCheckpoint::default(),
            Err(e) => {
                return Err(Error::sink("reading the engine checkpoint failed").with_source(e));
            }
        };
        let token = saved.token.clone();
        self.state().tables = saved.tables;
        // The engine's own checkpoint schedule.
        let (state, path, every) = (self.state.clone(), self.path.clone(), self.every);
        self.checkpointer = Some(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            loop {
                ticker.tick().await;
                let checkpoint = {
                    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                    if !std::mem::take(&mut state.dirty) {
                        continue;
                    }
                    EngineCheckpoint {
                        tables: state.tables.clone(),
                        token: state.latest.clone(),
                    }
                };
                let path = path.clone();
                let written = tokio::task::spawn_blocking(move || {
                    persist(&path, &checkpoint).map(|()| checkpoint.token)
                })
                .await;
                match written {
                    Ok(Ok(Some(token))) => acks.durable(token),
                    // Not durable: the pipeline keeps the slot where it is; a crash
                    // resumes from the previous checkpoint.
                    Ok(Err(e)) => eprintln!("engine checkpoint failed: {e}"),
                    _ => {}
                }
            }
        }));
        Ok(token)
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        let mut state = self.state();
        for event in &batch.batch.events {
            apply(&mut state.tables, &event.kind);
        }
        state.latest = Some(batch.resume_token);
        state.dirty = true;
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        // Nothing is made durable now: the engine's next checkpoint covers this token (or
        // a later one) and reports it.
        let mut state = self.state();
        state.latest = Some(token.clone());
        state.dirty = true;
        Ok(Ack::Pending)
    }

    async fn close(&mut self) -> Result<()> {
        if let Some(task) = self.checkpointer.take() {
            task.abort();
        }
        Ok(())
    }
}

/// A dropped sink (a crash, or the end of the program) checkpoints no more.
impl Drop for EngineSink {
    fn drop(&mut self) {
        if let Some(task) = self.checkpointer.take() {
            task.abort();
        }
    }
}
