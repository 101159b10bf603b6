//! `Pipeline`: drives a [`Source`] into a [`Sink`] and confirms to the source only what
//! the sink has acknowledged under the [`CommitMode`].

mod stats;
mod watermark;

use std::time::Duration;

use tokio::sync::{mpsc, watch};

pub use stats::{PipelineStats, StatsSnapshot};
pub use watermark::Watermark;

use crate::{
    Ack, AckEvent, Acknowledger, BatchId, ChangeBatch, CommitMode, Error, Lsn, Position, Result,
    ResumeToken, Sink, SinkBatch, Source,
};

/// How the pipeline runs.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// Which acknowledgement moves the source's confirmed position. See [`CommitMode`]:
    /// `Completion` is only correct for stateless sinks with idempotent output.
    pub commit_mode: CommitMode,
    /// How often the pipeline asks the sink to checkpoint while data is flowing.
    pub checkpoint_interval: Duration,
    /// Bytes written to the sink and not yet processed before the pipeline stops reading
    /// from the source (backpressure).
    pub max_in_flight_bytes: usize,
    /// Batches written and not yet processed before the pipeline stops reading.
    pub max_in_flight_batches: usize,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            commit_mode: CommitMode::Checkpoint,
            checkpoint_interval: Duration::from_secs(1),
            max_in_flight_bytes: 64 << 20,
            max_in_flight_batches: 64,
        }
    }
}

/// Asks a running pipeline to stop gracefully: stop reading, drain, final checkpoint,
/// final confirmation, close. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    tx: watch::Sender<bool>,
}

impl ShutdownHandle {
    /// Requests a graceful shutdown; [`Pipeline::run`] returns once it is complete.
    pub fn shutdown(&self) {
        let _ = self.tx.send(true);
    }
}

/// What a finished run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// Statistics at the end.
    pub stats: StatsSnapshot,
    /// The last LSN confirmed to the source.
    pub confirmed: Lsn,
    /// The resume token of the last durable checkpoint.
    pub last_token: Option<ResumeToken>,
    /// Why the run ended.
    pub end: RunEnd,
}

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// The source ended (end position reached, snapshot-only run done).
    SourceEnded,
    /// A shutdown was requested.
    Shutdown,
}

/// Drives a source into a sink.
///
/// Guarantees: the position confirmed to the source never exceeds what the sink has
/// acknowledged under the commit mode, never moves backwards, and is always a transaction
/// end. Events at or before the sink's resume token position are never written again.
#[derive(Debug)]
pub struct Pipeline<So, Si> {
    source: So,
    sink: Si,
    config: PipelineConfig,
    stats: PipelineStats,
    shutdown_tx: watch::Sender<bool>,
    shutdown_rx: watch::Receiver<bool>,
}

struct RunState {
    watermark: Watermark,
    next_id: u64,
    resume_after: Option<Position>,
    /// Token of the last batch written.
    last_written: Option<ResumeToken>,
    /// Token of the last checkpoint requested.
    last_requested: Option<ResumeToken>,
    last_durable: Option<ResumeToken>,
    confirmed: Lsn,
}

impl<So: Source, Si: Sink> Pipeline<So, Si> {
    /// A pipeline from `source` to `sink`.
    pub fn new(source: So, sink: Si, config: PipelineConfig) -> Self {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        Pipeline {
            source,
            sink,
            config,
            stats: PipelineStats::default(),
            shutdown_tx,
            shutdown_rx,
        }
    }

    /// A handle that stops the pipeline gracefully.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            tx: self.shutdown_tx.clone(),
        }
    }

    /// Live statistics.
    pub fn stats(&self) -> PipelineStats {
        self.stats.clone()
    }

    /// Runs until the source ends or a shutdown is requested, then drains: waits for the
    /// sink to acknowledge everything written (a final checkpoint), confirms it to the
    /// source and closes both.
    ///
    /// An error from the source or the sink stops the run at once; nothing after the last
    /// acknowledgement is confirmed, so a restart resumes without loss. Dropping the future
    /// is a crash from the sink's and source's point of view, with the same guarantee.
    pub async fn run(mut self) -> Result<RunSummary> {
        let (acks, mut ack_rx) = Acknowledger::channel();
        let resume = self.sink.open(acks).await?;
        let start = self.source.start(resume.as_ref()).await?;
        self.stats.set_confirmed(start);
        let mut state = RunState {
            watermark: Watermark::new(self.config.commit_mode, start),
            next_id: 0,
            resume_after: resume.as_ref().and_then(|t| t.position),
            last_written: None,
            last_requested: None,
            last_durable: resume,
            confirmed: start,
        };
        let mut checkpoint_timer = tokio::time::interval(self.config.checkpoint_interval);
        checkpoint_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown_rx = self.shutdown_rx.clone();
        let end = loop {
            if *shutdown_rx.borrow() {
                break RunEnd::Shutdown;
            }
            let may_read = state.watermark.pending_bytes() < self.config.max_in_flight_bytes
                && state.watermark.uncompleted() < self.config.max_in_flight_batches;
            tokio::select! {
                biased;
                _ = shutdown_rx.changed() => {}
                ack = ack_rx.recv() => {
                    if let Some(ack) = ack {
                        self.on_ack(&mut state, ack);
                    }
                }
                _ = checkpoint_timer.tick() => {
                    self.checkpoint(&mut state).await?;
                }
                batch = self.source.next_batch(), if may_read => {
                    match batch? {
                        Some(batch) => self.write(&mut state, batch).await?,
                        None => break RunEnd::SourceEnded,
                    }
                }
            }
            self.confirm(&mut state);
        };
        self.drain(&mut state, &mut ack_rx).await?;
        self.source.close().await?;
        self.sink.close().await?;
        Ok(RunSummary {
            stats: self.stats.snapshot(),
            confirmed: state.confirmed,
            last_token: state.last_durable,
            end,
        })
    }

    async fn write(&mut self, state: &mut RunState, mut batch: ChangeBatch) -> Result<()> {
        let id = BatchId(state.next_id);
        state.next_id += 1;
        if batch.events.is_empty() {
            // Progress without events (transactions of tables not configured, an idle
            // server's WAL end): confirmable once a durable token covers its end (in
            // checkpoint mode), so the token and the slot never disagree.
            let resume_token = self.source.resume_token(&batch);
            state.watermark.written(id, None, batch.commit_end, 0);
            state.watermark.completed(id);
            state.last_written = Some(resume_token);
            return Ok(());
        }
        if let Some(after) = state.resume_after {
            let before = batch.events.len();
            batch.events.retain(|e| e.position > after);
            if batch.events.len() != before {
                batch.byte_size = batch.events.iter().map(|e| e.approx_size()).sum();
            }
            if batch.events.is_empty() {
                // A replay of what the sink's durable state already holds.
                state.watermark.already_acknowledged(id, batch.commit_end);
                return Ok(());
            }
        }
        let resume_token = self.source.resume_token(&batch);
        state
            .watermark
            .written(id, batch.last_position(), batch.commit_end, batch.byte_size);
        self.stats.record_batch(&batch);
        state.last_written = Some(resume_token.clone());
        let ack = self
            .sink
            .write(SinkBatch {
                id,
                batch,
                resume_token,
            })
            .await?;
        if ack == Ack::Done {
            state.watermark.completed(id);
        }
        Ok(())
    }

    async fn checkpoint(&mut self, state: &mut RunState) -> Result<()> {
        let Some(token) = state.last_written.clone() else {
            return Ok(());
        };
        if state.last_requested.as_ref() == Some(&token) {
            return Ok(());
        }
        state.last_requested = Some(token.clone());
        if self.sink.checkpoint(&token).await? == Ack::Done {
            self.on_ack(state, AckEvent::Durable(token));
        }
        Ok(())
    }

    fn on_ack(&mut self, state: &mut RunState, ack: AckEvent) {
        match ack {
            AckEvent::Completed(id) => state.watermark.completed(id),
            AckEvent::Durable(token) => {
                state.watermark.durable(token.position, token.commit_end);
                self.stats.record_checkpoint();
                let newer = state.last_durable.as_ref().is_none_or(|old| {
                    (old.position, old.commit_end) <= (token.position, token.commit_end)
                });
                if newer {
                    state.last_durable = Some(token);
                }
            }
        }
    }

    fn confirm(&mut self, state: &mut RunState) {
        let lsn = state.watermark.confirmable();
        let idle = state.watermark.is_idle();
        self.stats.set_in_flight(state.watermark.in_flight());
        if lsn > state.confirmed || idle {
            state.confirmed = state.confirmed.max(lsn);
            self.stats.set_confirmed(state.confirmed);
            self.source.confirm(state.confirmed, idle);
        }
    }

    /// Final checkpoint, then wait until everything written is acknowledged.
    async fn drain(
        &mut self,
        state: &mut RunState,
        ack_rx: &mut mpsc::UnboundedReceiver<AckEvent>,
    ) -> Result<()> {
        self.checkpoint(state).await?;
        let final_token = state
            .last_written
            .as_ref()
            .map(|t| (t.position, t.commit_end));
        let durable = |state: &RunState| {
            final_token.is_none_or(|last| {
                state
                    .last_durable
                    .as_ref()
                    .is_some_and(|t| (t.position, t.commit_end) >= last)
            })
        };
        while !(state.watermark.is_idle() && durable(state)) {
            match ack_rx.recv().await {
                Some(ack) => self.on_ack(state, ack),
                None => {
                    return Err(Error::sink(
                        "the sink stopped acknowledging before the final checkpoint completed",
                    ));
                }
            }
        }
        self.confirm(state);
        Ok(())
    }
}
