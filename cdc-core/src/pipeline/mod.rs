//! `Pipeline`: drives a [`Source`] into a [`Sink`] and confirms to the source only what
//! the sink has acknowledged under the [`CommitMode`](crate::CommitMode).

mod stats;
mod table_counts;
mod watermark;

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

pub use stats::{CheckpointStats, PipelineStats, StatsSnapshot};
pub use table_counts::{ChangeOp, OpCounts, TableCounts, TableSnapshotProgress};
pub use watermark::Watermark;

use crate::row_block;
use crate::{
    Ack, AckEvent, Acknowledger, BatchId, ChangeBatch, ConfirmHandle, Error, Lsn, Position, Result,
    ResumeToken, Sink, SinkBatch, Source,
};

/// How the pipeline runs. (Which acknowledgement moves the source's confirmed position,
/// the [`CommitMode`](crate::CommitMode), is the source's setting: [`Source::commit_mode`].)
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PipelineConfig {
    /// How often the pipeline asks the sink to checkpoint while data is flowing (at
    /// least every millisecond: a zero interval counts as 1 ms).
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
            checkpoint_interval: Duration::from_secs(1),
            max_in_flight_bytes: 64 << 20,
            max_in_flight_batches: 64,
        }
    }
}

impl PipelineConfig {
    /// The same configuration checkpointing every `interval`.
    pub fn with_checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint_interval = interval;
        self
    }

    /// The same configuration with these backpressure limits (bytes and batches written
    /// and not yet processed).
    pub fn with_max_in_flight(mut self, bytes: usize, batches: usize) -> Self {
        self.max_in_flight_bytes = bytes;
        self.max_in_flight_batches = batches;
        self
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
#[non_exhaustive]
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
    /// Taken by `run`.
    source: Option<So>,
    sink: Si,
    config: PipelineConfig,
    stats: PipelineStats,
    shutdown_tx: watch::Sender<bool>,
    shutdown_rx: watch::Receiver<bool>,
}

struct RunState {
    /// The sink takes `InsertBlock` events; else they are expanded into inserts.
    sink_takes_blocks: bool,
    watermark: Watermark,
    next_id: u64,
    resume_after: Option<Position>,
    /// Token of the last batch written.
    last_written: Option<ResumeToken>,
    /// Token of the last checkpoint requested.
    last_requested: Option<ResumeToken>,
    last_durable: Option<ResumeToken>,
    confirmed: Lsn,
    reported_idle: bool,
}

impl<So: Source + 'static, Si: Sink> Pipeline<So, Si> {
    /// A pipeline from `source` to `sink`.
    pub fn new(source: So, sink: Si, config: PipelineConfig) -> Self {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        Pipeline {
            source: Some(source),
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
    pub async fn run(self) -> Result<RunSummary> {
        let stats = self.stats.clone();
        let result = self.run_to_end().await;
        if let Err(e) = &result {
            stats.record_error(e.kind());
        }
        result
    }

    async fn run_to_end(mut self) -> Result<RunSummary> {
        let (acks, mut ack_rx) = Acknowledger::channel();
        let Some(source) = self.source.as_mut() else {
            return Err(Error::config(
                "the pipeline's source is gone (run called twice?)",
            ));
        };
        let sink_takes_blocks = self.sink.takes_row_blocks();
        source.offer_row_blocks(sink_takes_blocks);
        // Refused before the output is touched, when the source can tell.
        source.check().await?;
        let resume = self.sink.open(acks).await?;
        // A start may wait long (a slot created on a standby waits for the primary's next
        // running-transactions record): a shutdown request interrupts it.
        let mut shutdown_rx = self.shutdown_rx.clone();
        let started = tokio::select! {
            biased;
            started = source.start(resume.as_ref()) => Some(started?),
            _ = shutdown_rx.wait_for(|stop| *stop) => None,
        };
        let Some(start) = started else {
            source.abandon_start().await?;
            self.sink.close().await?;
            return Ok(RunSummary {
                stats: self.stats.snapshot(),
                confirmed: resume
                    .as_ref()
                    .and_then(|t| t.commit_end)
                    .unwrap_or(Lsn::ZERO),
                last_token: resume,
                end: RunEnd::Shutdown,
            });
        };
        self.stats.set_confirmed(start);
        let commit_mode = source.commit_mode();
        let mut state = RunState {
            sink_takes_blocks,
            watermark: Watermark::new(commit_mode, start),
            next_id: 0,
            resume_after: resume.as_ref().and_then(|t| t.position),
            last_written: None,
            last_requested: None,
            last_durable: resume,
            confirmed: start,
            reported_idle: false,
        };
        // A zero interval would make tokio's timer panic; 1 ms is as often as makes sense.
        let mut checkpoint_timer = tokio::time::interval(
            self.config
                .checkpoint_interval
                .max(Duration::from_millis(1)),
        );
        checkpoint_timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let confirm_handle = source.confirm_handle();
        // The source runs in its own task, so a `next_batch` call is never interrupted by
        // acknowledgements or checkpoint ticks: the source may do long work there
        // (reconnect with backoff, retake a snapshot). One batch waits in the channel.
        let (batch_tx, mut batch_rx) = mpsc::channel(1);
        let (stop_tx, stop_rx) = oneshot::channel();
        let source = self.source.take();
        let Some(source) = source else {
            return Err(Error::config(
                "the pipeline's source is gone (run called twice?)",
            ));
        };
        let reader = AbortOnDrop(Some(tokio::spawn(read_source(source, batch_tx, stop_rx))));
        let mut acks_open = true;
        let result = async {
            let end = loop {
                if *shutdown_rx.borrow() {
                    break RunEnd::Shutdown;
                }
                let may_read = state.watermark.pending_bytes() < self.config.max_in_flight_bytes
                    && state.watermark.uncompleted() < self.config.max_in_flight_batches;
                tokio::select! {
                    biased;
                    _ = shutdown_rx.changed() => {}
                    ack = ack_rx.recv(), if acks_open => {
                        match ack {
                            Some(ack) => Self::on_ack(&self.stats, &mut state, ack),
                            // A sink that acknowledges only by return value may drop its
                            // Acknowledger; stop listening instead of spinning.
                            None => acks_open = false,
                        }
                    }
                    _ = checkpoint_timer.tick() => {
                        Self::checkpoint(&mut self.sink, &self.stats, &mut state).await?;
                    }
                    message = batch_rx.recv(), if may_read => {
                        match message {
                            Some(Ok(Some((batch, token)))) => self.write(&mut state, batch, token).await?,
                            Some(Ok(None)) => break RunEnd::SourceEnded,
                            Some(Err(e)) => return Err(e),
                            None => return Err(Error::protocol("the source task ended unexpectedly")),
                        }
                    }
                }
                Self::confirm(&self.stats, &confirm_handle, &mut state);
            };
            Ok(end)
        }
        .await;
        let _ = stop_tx.send(());
        let mut source = reader.join().await?;
        let end = result?;
        self.drain(&mut state, &mut ack_rx, &confirm_handle).await?;
        source.close().await?;
        self.sink.close().await?;
        Ok(RunSummary {
            stats: self.stats.snapshot(),
            confirmed: state.confirmed,
            last_token: state.last_durable,
            end,
        })
    }

    async fn write(
        &mut self,
        state: &mut RunState,
        mut batch: ChangeBatch,
        resume_token: ResumeToken,
    ) -> Result<()> {
        let id = BatchId(state.next_id);
        state.next_id += 1;
        if batch.events.is_empty() {
            // Progress without events (transactions of tables not configured, an idle
            // server's WAL end): confirmable once a durable token covers its end (in
            // checkpoint mode), so the token and the slot never disagree.
            state.watermark.written(id, None, batch.commit_end, 0);
            state.watermark.completed(id);
            state.last_written = Some(resume_token);
            Self::covered_by_durable(state);
            return Ok(());
        }
        if !state.sink_takes_blocks && row_block::expand_blocks(&mut batch.events)? {
            batch.byte_size = batch.events.iter().map(|e| e.approx_size()).sum();
        }
        if let Some(after) = state.resume_after {
            if row_block::drop_replayed(&mut batch.events, after) {
                batch.byte_size = batch.events.iter().map(|e| e.approx_size()).sum();
            }
            if batch.events.is_empty() {
                // A replay of what the sink's durable state already holds.
                state.watermark.already_acknowledged(id, batch.commit_end);
                return Ok(());
            }
        }
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
        Self::covered_by_durable(state);
        Ok(())
    }

    /// A batch whose token equals (or is covered by) one the sink already made durable —
    /// a replay after a restart, or progress that adds nothing — is durable already; no
    /// new checkpoint would be requested for an identical token.
    fn covered_by_durable(state: &mut RunState) {
        if let Some(durable) = &state.last_durable {
            state
                .watermark
                .durable(durable.position, durable.commit_end);
        }
    }

    async fn checkpoint(sink: &mut Si, stats: &PipelineStats, state: &mut RunState) -> Result<()> {
        let Some(token) = state.last_written.clone() else {
            return Ok(());
        };
        if state.last_requested.as_ref() == Some(&token) {
            return Ok(());
        }
        state.last_requested = Some(token.clone());
        stats.checkpoint_requested();
        if sink.checkpoint(&token).await? == Ack::Done {
            Self::on_ack(stats, state, AckEvent::Durable(token));
        }
        Ok(())
    }

    fn on_ack(stats: &PipelineStats, state: &mut RunState, ack: AckEvent) {
        match ack {
            AckEvent::Completed(id) => state.watermark.completed(id),
            AckEvent::Durable(token) => {
                state.watermark.durable(token.position, token.commit_end);
                stats.record_checkpoint(token.commit_end.max(token.position.map(|p| p.commit_lsn)));
                let newer = state.last_durable.as_ref().is_none_or(|old| {
                    (old.position, old.commit_end) <= (token.position, token.commit_end)
                });
                if newer {
                    state.last_durable = Some(token);
                }
            }
        }
    }

    fn confirm(stats: &PipelineStats, handle: &ConfirmHandle, state: &mut RunState) {
        let lsn = state.watermark.confirmable();
        let idle = state.watermark.is_idle();
        stats.set_in_flight(state.watermark.in_flight());
        if lsn > state.confirmed || (idle && !state.reported_idle) {
            state.confirmed = state.confirmed.max(lsn);
            stats.set_confirmed(state.confirmed);
            handle.confirm(state.confirmed, idle);
        }
        state.reported_idle = idle;
    }

    /// Final checkpoint, then wait until everything written is acknowledged.
    async fn drain(
        &mut self,
        state: &mut RunState,
        ack_rx: &mut mpsc::UnboundedReceiver<AckEvent>,
        confirm_handle: &ConfirmHandle,
    ) -> Result<()> {
        Self::checkpoint(&mut self.sink, &self.stats, state).await?;
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
                Some(ack) => Self::on_ack(&self.stats, state, ack),
                None => {
                    return Err(Error::sink(
                        "the sink stopped acknowledging before the final checkpoint completed",
                    ));
                }
            }
        }
        Self::confirm(&self.stats, confirm_handle, state);
        Ok(())
    }
}

/// What the source task hands over: a batch with its resume token, the end, or an error.
type SourceMessage = Result<Option<(ChangeBatch, ResumeToken)>>;

/// Pulls batches from `source` until told to stop, the stream ends, or it fails; returns
/// the source so the pipeline can close it.
async fn read_source<So: Source>(
    mut source: So,
    tx: mpsc::Sender<SourceMessage>,
    mut stop: oneshot::Receiver<()>,
) -> So {
    loop {
        let next = tokio::select! {
            _ = &mut stop => return source,
            next = source.next_batch() => next,
        };
        let (message, last) = match next {
            Ok(Some(batch)) => {
                let token = source.resume_token(&batch);
                (Ok(Some((batch, token))), false)
            }
            Ok(None) => (Ok(None), true),
            Err(e) => (Err(e), true),
        };
        tokio::select! {
            _ = &mut stop => return source,
            sent = tx.send(message) => {
                if sent.is_err() || last {
                    // Keep the source until the pipeline asks for it back.
                    let _ = stop.await;
                    return source;
                }
            }
        }
    }
}

/// A task aborted when dropped: a dropped pipeline (a crash, from the source's view) must
/// not leave its source running.
struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> AbortOnDrop<T> {
    async fn join(mut self) -> Result<T> {
        let Some(handle) = self.0.take() else {
            return Err(Error::protocol("the source task was already joined"));
        };
        handle
            .await
            .map_err(|e| Error::protocol(format!("the source task failed: {e}")))
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }
}
