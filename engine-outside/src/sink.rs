//! The engine's sink: applies each batch to its tables at once, and makes them durable,
//! with the token covering them, at each checkpoint.

use std::path::PathBuf;

use async_trait::async_trait;
use cdc_core::{Ack, Acknowledger, Error, Result, ResumeToken, Sink, SinkBatch};
use serde::{Deserialize, Serialize};

use crate::table::Tables;

/// What the engine stores: its tables and the token covering exactly them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EngineCheckpoint {
    /// The tables.
    pub tables: Tables,
    /// The token covering them.
    pub token: Option<ResumeToken>,
}

/// The sink.
#[derive(Debug)]
pub struct EngineSink {
    path: PathBuf,
    tables: Tables,
}

impl EngineSink {
    /// A sink checkpointing to `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        EngineSink {
            path: path.into(),
            tables: Tables::default(),
        }
    }

    /// What `path` holds (an empty checkpoint when there is none yet).
    pub fn read(path: &std::path::Path) -> Result<EngineCheckpoint> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| Error::sink("the engine checkpoint is unreadable").with_source(e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(EngineCheckpoint::default()),
            Err(e) => Err(Error::sink("reading the engine checkpoint").with_source(e)),
        }
    }
}

#[async_trait]
impl Sink for EngineSink {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        // Whatever was applied after the last checkpoint is gone: the stream resumes
        // right after the stored token.
        let saved = Self::read(&self.path)?;
        self.tables = saved.tables;
        Ok(saved.token)
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        for event in &batch.batch.events {
            self.tables.apply(&event.kind).map_err(Error::sink)?;
        }
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        let checkpoint = EngineCheckpoint {
            tables: self.tables.clone(),
            token: Some(token.clone()),
        };
        let bytes = serde_json::to_vec(&checkpoint)
            .map_err(|e| Error::sink("encoding the engine checkpoint").with_source(e))?;
        let tmp = self.path.with_extension("tmp");
        let io = |what: &'static str| move |e: std::io::Error| Error::sink(what).with_source(e);
        std::fs::write(&tmp, bytes).map_err(io("writing the engine checkpoint"))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io("syncing the engine checkpoint"))?;
        std::fs::rename(&tmp, &self.path).map_err(io("renaming the engine checkpoint"))?;
        Ok(Ack::Done)
    }
}
