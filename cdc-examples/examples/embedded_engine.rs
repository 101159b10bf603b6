//! Embedding pgcdc in an engine that checkpoints on its own schedule.
//!
//! The "engine" keeps its tables in memory and ingests every batch at once (`write` →
//! `Ack::Done`: processed). Durability is its own business: every two seconds it writes
//! its whole state, together with the [`ResumeToken`] that covers exactly that state, to
//! one checkpoint file (atomically: temporary file, fsync, rename), and only then reports
//! `Acknowledger::durable(token)`. The pipeline's `checkpoint` call returns `Ack::Pending`
//! and writing continues meanwhile; the replication slot advances only to what a
//! completed engine checkpoint covers.
//!
//! Which token covers the state? Every batch arrives with the token that resumes right
//! after it, and a `checkpoint` request carries the token covering everything written
//! before it (including progress the pipeline did not write, such as other tables'
//! transactions). The latest token received, by either route, covers the state exactly.
//!
//! At restart, `open` loads the engine's checkpoint and hands its token back: the stream
//! resumes right after it, so every change is applied exactly once even though the engine
//! crashed or stopped between its checkpoints.
//!
//! Run it with `cargo run -p cdc-examples --example embedded_engine`: it starts a
//! throwaway cluster, runs the engine, stops it, changes the source while it is down,
//! restarts it and checks the engine's table against `SELECT`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, Error, EventKind, Pipeline, PipelineConfig, Result, ResumeToken, Row, Sink,
    SinkBatch, SnapshotMarker, TableSchema, Value,
};
use cdc_postgres::conn::SourceConfig;
use cdc_postgres::source::{PgSource, PgSourceOptions};
use serde::{Deserialize, Serialize};

/// A table: primary key text → column → value text.
type Table = BTreeMap<String, BTreeMap<String, Option<String>>>;

/// What the engine persists: its state and the token it covers, in one file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct EngineCheckpoint {
    tables: BTreeMap<String, Table>,
    token: Option<ResumeToken>,
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
struct EngineSink {
    path: PathBuf,
    every: Duration,
    state: Arc<Mutex<EngineState>>,
    checkpointer: Option<tokio::task::JoinHandle<()>>,
}

impl EngineSink {
    fn new(path: PathBuf, every: Duration) -> Self {
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

/// Runs the engine on the source until `stop_after`, then stops it gracefully.
async fn run_engine(config: &SourceConfig, path: &Path, stop_after: Duration) -> Result<()> {
    let source = PgSource::new(PgSourceOptions::new(config.clone()));
    let sink = EngineSink::new(path.to_owned(), Duration::from_secs(2));
    let pipeline = Pipeline::new(source, sink, PipelineConfig::default());
    let stop = pipeline.shutdown_handle();
    tokio::spawn(async move {
        tokio::time::sleep(stop_after).await;
        stop.shutdown();
    });
    let summary = pipeline.run().await?;
    eprintln!(
        "engine stopped: {} events this run, slot confirmed up to {}",
        summary.stats.events, summary.confirmed
    );
    Ok(())
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let cluster = cdc_testkit::Cluster::new().await?;
    cluster
        .execute(
            "CREATE TABLE public.stock (sku text PRIMARY KEY, qty int NOT NULL);
             INSERT INTO public.stock SELECT 'sku-' || g, g FROM generate_series(1, 1000) g;
             CREATE PUBLICATION engine FOR TABLE public.stock;",
        )
        .await?;
    let uri = cluster.uri("postgres", cdc_testkit::ADMIN_USER, None);
    let config = SourceConfig::new(&uri, "engine")?.with_tables(["public.stock"])?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("engine-checkpoint.json");

    let writes = "UPDATE public.stock SET qty = qty + 1 WHERE sku = 'sku-7';
                  DELETE FROM public.stock WHERE sku = 'sku-9';
                  INSERT INTO public.stock VALUES ('sku-new-' || txid_current(), 1);";
    let writer = {
        let conn = cluster.connect("postgres").await?;
        tokio::spawn(async move {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = conn.batch_execute(writes).await;
            }
        })
    };
    run_engine(&config, &path, Duration::from_secs(4)).await?;
    writer.await?;
    // Changes while the engine is down are waiting in the slot.
    cluster.execute(writes).await?;
    run_engine(&config, &path, Duration::from_secs(4)).await?;

    let saved: EngineCheckpoint = serde_json::from_slice(&std::fs::read(&path)?)?;
    let engine = saved
        .tables
        .get("public.stock")
        .cloned()
        .unwrap_or_default();
    let client = cluster.connect("postgres").await?;
    let rows = client
        .query("SELECT sku, qty::text FROM public.stock", &[])
        .await?;
    let source: BTreeMap<String, Option<String>> =
        rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let engine_rows: BTreeMap<String, Option<String>> = engine
        .iter()
        .map(|(k, row)| (k.clone(), row.get("qty").cloned().flatten()))
        .collect();
    println!(
        "source has {} rows, the engine's checkpoint has {}: {}",
        source.len(),
        engine_rows.len(),
        if source == engine_rows {
            "identical"
        } else {
            "DIFFERENT"
        }
    );
    if source != engine_rows {
        return Err("the engine's checkpoint differs from the source".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs_against_a_throwaway_cluster() {
        if let Err(e) = super::main() {
            panic!("the example failed: {e}");
        }
    }
}
