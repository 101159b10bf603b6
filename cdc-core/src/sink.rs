//! The `Sink` trait: where batches go, and how the sink acknowledges them.

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::{ChangeBatch, Result, ResumeToken};

/// How far the pipeline lets the replication slot advance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CommitMode {
    /// Strict (default): the slot follows the **durable** watermark — only what a completed
    /// sink checkpoint covers is confirmed to the source. Nothing acknowledged can be lost,
    /// whatever the sink is.
    #[default]
    Checkpoint,
    /// Fast, opt-in: the slot follows the **completed** watermark — what the sink has
    /// processed, durable or not. Correct only when the sink needs no recovery (it keeps no
    /// state of its own, or its state is rebuilt elsewhere) and its output is idempotent:
    /// a stateful sink that crashes between a completion and its next checkpoint loses that
    /// window, because the slot has already moved past it. At restart the source detects a
    /// token older than the slot and reports the gap.
    Completion,
}

/// Identifies one batch written to a sink; increases by one per batch, in write order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

/// A sink's answer to [`Sink::write`] or [`Sink::checkpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// Done when the call returned (processed for `write`, durable for `checkpoint`).
    Done,
    /// The sink will report it later through its [`Acknowledger`].
    Pending,
}

/// An acknowledgement reported asynchronously by a sink.
// A few per checkpoint, moved through a channel: the token inline costs less than a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckEvent {
    /// The batch (and, since sinks process in order, every earlier batch) is processed.
    Completed(BatchId),
    /// Every batch whose events are covered by `token` (positions at or before
    /// `token.position`) is durable together with `token`.
    Durable(ResumeToken),
}

/// The handle a sink uses to acknowledge asynchronously, e.g. an engine that checkpoints on
/// its own schedule and reports durability later while writing continues. Cheap to clone;
/// usable from any thread; reports after the pipeline stopped are ignored.
#[derive(Clone, Debug)]
pub struct Acknowledger {
    tx: mpsc::UnboundedSender<AckEvent>,
}

impl Acknowledger {
    /// A connected pair: the handle for the sink and the receiver for the pipeline.
    pub fn channel() -> (Acknowledger, mpsc::UnboundedReceiver<AckEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Acknowledger { tx }, rx)
    }

    /// Reports that the batch `id` and every earlier one are processed.
    pub fn completed(&self, id: BatchId) {
        let _ = self.tx.send(AckEvent::Completed(id));
    }

    /// Reports that the state covering `token` is durable. Pass a token the pipeline
    /// handed to [`Sink::write`] or [`Sink::checkpoint`], unchanged.
    pub fn durable(&self, token: ResumeToken) {
        let _ = self.tx.send(AckEvent::Durable(token));
    }
}

/// A batch as the pipeline hands it to a sink.
#[derive(Clone, Debug)]
pub struct SinkBatch {
    /// The batch's id.
    pub id: BatchId,
    /// The events.
    pub batch: ChangeBatch,
    /// The token that resumes right after this batch. A sink that stores it atomically
    /// with the batch's effects gets exactly-once effect across restarts.
    pub resume_token: ResumeToken,
}

/// Where change batches go.
///
/// The pipeline calls `open` once, then `write` for each batch in order and `checkpoint`
/// from time to time (at the configured interval and at shutdown), from one task, never
/// concurrently. It may keep several batches in flight: a `write` may be called while
/// earlier ones are still pending completion, and while a checkpoint is pending
/// durability.
///
/// Contract:
/// - `write` returning `Ok(Ack::Done)` means the batch is **processed**; `Ok(Ack::Pending)`
///   means the sink will call [`Acknowledger::completed`] later. Completion is reported in
///   batch order.
/// - `checkpoint` asks the sink to make everything written so far durable **atomically
///   with** the given token. The pipeline always passes the token of the last batch it
///   wrote, so the token covers every batch written before the call. `Ok(Ack::Done)` means it is durable now; `Ok(Ack::Pending)`
///   means the sink will call [`Acknowledger::durable`] with that token later. A sink may
///   also report durability of any token it received on its own schedule.
/// - After a crash, `open` returns the token of the last durable checkpoint (or `None`);
///   the stream resumes after that token's position. A sink that keeps state must drop
///   anything not covered by the returned token.
/// - In [`CommitMode::Checkpoint`] the source is confirmed only up to what durable tokens
///   cover; in [`CommitMode::Completion`] up to what completed batches cover.
/// - An `Err` stops the pipeline; nothing after the last acknowledgement is confirmed.
/// - Cancel safety: the pipeline does not drop an in-progress `write` or `checkpoint`
///   future except when it is itself being dropped (a crash, from the sink's view).
#[async_trait]
pub trait Sink: Send {
    /// Prepares the sink and returns the token stored with its durable state, if any.
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>>;

    /// Processes (or accepts for asynchronous processing) one batch.
    async fn write(&mut self, batch: SinkBatch) -> Result<Ack>;

    /// Makes everything written so far durable together with `token`.
    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack>;

    /// Called once at graceful shutdown, after the final checkpoint.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }

    /// Whether `write` takes [`EventKind::InsertBlock`](crate::EventKind::InsertBlock)
    /// events (snapshot rows left in the source's form, see [`crate::RowBlock`]). Asked
    /// once, before `open`. Default `false`: the pipeline hands this sink one `Insert` per
    /// row instead. A sink that says `true` must write a block's rows exactly as it would
    /// write those inserts.
    fn takes_row_blocks(&self) -> bool {
        false
    }
}

/// Limits that end a batch: whichever is reached first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchLimits {
    /// Maximum events in one batch.
    pub max_events: usize,
    /// Maximum approximate bytes in one batch.
    pub max_bytes: usize,
    /// Longest time the first event of a batch waits for the batch to be handed on.
    pub max_latency: Duration,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_events: 10_000,
            max_bytes: 8 << 20,
            max_latency: Duration::from_millis(100),
        }
    }
}
