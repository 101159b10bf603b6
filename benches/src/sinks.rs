//! Sinks for benchmarks: [`Discard`] does nothing, [`Counted`] counts what passes through
//! to any sink. `Counted<Discard>` (alias [`CountingSink`]) is the cost of a pipeline run
//! without any sink work, for comparing the source side with other consumers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use cdc_core::{Ack, Acknowledger, EventKind, Result, ResumeToken, Sink, SinkBatch};

/// What a [`Counted`] sink saw; shared with whoever reads the counts after the run.
#[derive(Debug, Default)]
pub struct Counts {
    events: AtomicU64,
    changes: AtomicU64,
    batches: AtomicU64,
}

impl Counts {
    /// Insert, update and delete events (the row changes) so far.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Every event so far (including Begin, Commit and snapshot markers).
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Batches written so far.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
}

/// Acknowledges every write and checkpoint at once (`Ack::Done`) and keeps nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Discard;

#[async_trait]
impl Sink for Discard {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        Ok(None)
    }

    async fn write(&mut self, _batch: SinkBatch) -> Result<Ack> {
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        Ok(Ack::Done)
    }
}

/// Counts the events of every batch, then hands the batch to the inner sink.
#[derive(Debug)]
pub struct Counted<S> {
    inner: S,
    counts: Arc<Counts>,
}

/// A sink that only counts.
pub type CountingSink = Counted<Discard>;

impl<S> Counted<S> {
    /// Wraps `inner` with fresh counters.
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            counts: Arc::default(),
        }
    }

    /// The counters, readable while and after the pipeline runs.
    pub fn counts(&self) -> Arc<Counts> {
        self.counts.clone()
    }
}

#[async_trait]
impl<S: Sink> Sink for Counted<S> {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        self.inner.open(acks).await
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        let events = &batch.batch.events;
        let changes = events
            .iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    EventKind::Insert { .. } | EventKind::Update { .. } | EventKind::Delete { .. }
                )
            })
            .count() as u64;
        self.counts
            .events
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        self.counts.changes.fetch_add(changes, Ordering::Relaxed);
        self.counts.batches.fetch_add(1, Ordering::Relaxed);
        self.inner.write(batch).await
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        self.inner.checkpoint(token).await
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }
}
