//! The `Source` trait: what the pipeline pulls batches from.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::{ChangeBatch, CommitMode, Lsn, Result, ResumeToken};

/// A stream of change batches with a position that can be confirmed.
///
/// The pipeline calls `start` once, then `next_batch` repeatedly, and reports its
/// acknowledged watermark through the source's [`ConfirmHandle`]. Implemented by
/// `PgSource`, and by scripted sources in tests of the pipeline's gating.
#[async_trait]
pub trait Source: Send {
    /// Prepares the stream. With `resume`, the source must verify that the token belongs
    /// to this stream (else a `ResyncRequired` error) and deliver only events after the
    /// token's position. Without it, the source starts fresh (e.g. with a snapshot).
    ///
    /// Returns the position already confirmed at the source (for Postgres the slot's
    /// `confirmed_flush_lsn`); the pipeline's confirmations start from there and never go
    /// below it.
    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn>;

    /// The next batch, or `None` once the stream has ended (an end position was reached,
    /// a snapshot-only run finished). Batches respect the source's [`crate::BatchLimits`].
    ///
    /// The pipeline keeps one call in progress until it completes (it does not drop it to
    /// do other work), so the source may run long operations here (reconnecting with
    /// backoff, retaking a snapshot). Dropping the future happens only when the pipeline
    /// stops; what was not yet returned is then simply not confirmed.
    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>>;

    /// The token that resumes right after `batch` (its last position plus the source's
    /// identity and any snapshot progress). Tokens never cover less than the previous
    /// one, nor less than the resume token given to `start`.
    fn resume_token(&self, batch: &ChangeBatch) -> ResumeToken;

    /// The handle through which the pipeline confirms positions while a `next_batch` call
    /// is in progress. Every call returns a handle to the same shared state.
    fn confirm_handle(&self) -> ConfirmHandle;

    /// Checks what can be checked before the pipeline opens the sink (the configuration,
    /// the server), so that a run that cannot work is refused before its output is
    /// touched. Called once, before [`Self::start`]; what `start` retries (a server not
    /// reachable yet) may be left to it. Default: nothing to check.
    async fn check(&mut self) -> Result<()> {
        Ok(())
    }

    /// Which acknowledgement may move this source's confirmed position; the pipeline
    /// follows it. The source's configuration is its one home (for Postgres,
    /// `SourceConfig::commit_mode`, also read from the connector's JSON), so no second
    /// setting can contradict it. Default: [`CommitMode::Checkpoint`].
    fn commit_mode(&self) -> CommitMode {
        CommitMode::Checkpoint
    }

    /// Told once, before [`Self::check`] and [`Self::start`], whether the sink takes
    /// [`EventKind::InsertBlock`](crate::EventKind::InsertBlock) events; a source may then
    /// hand snapshot rows in blocks instead of one `Insert` each. Default: ignored. A
    /// source that sends blocks to a sink that does not take them still works (the
    /// pipeline turns them into inserts), only slower.
    fn offer_row_blocks(&mut self, sink_takes_them: bool) {
        let _ = sink_takes_them;
    }

    /// Stops the stream after a final status update. Called once at graceful shutdown.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }

    /// Called instead of [`Self::close`] when a shutdown interrupted [`Self::start`] (its
    /// future was dropped): undoes what the interrupted start left behind that nothing
    /// can refer to yet, e.g. a replication slot it created, which no resume token names.
    async fn abandon_start(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Where the pipeline reports how far the source may confirm, and where the source reads
/// it. Cheap to clone; usable from any task.
///
/// `confirm(lsn, idle)`: every transaction that ends at or before `lsn` is acknowledged
/// under the commit mode; the source may report `lsn` as flushed. `lsn` is always a
/// transaction end (a [`ChangeBatch::commit_end`]) and never decreases. `idle` is true when
/// nothing is in flight in the pipeline.
#[derive(Clone, Default)]
pub struct ConfirmHandle {
    inner: Arc<ConfirmState>,
}

#[derive(Default)]
struct ConfirmState {
    lsn: AtomicU64,
    idle: AtomicBool,
    changed: Notify,
    observer: Option<Box<dyn Fn(Lsn, bool) + Send + Sync>>,
}

impl std::fmt::Debug for ConfirmHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmHandle")
            .field("confirmed", &self.confirmed())
            .field("idle", &self.idle())
            .finish()
    }
}

impl ConfirmHandle {
    /// A handle that also calls `observer` on every confirmation (for tests and metrics).
    pub fn with_observer(observer: impl Fn(Lsn, bool) + Send + Sync + 'static) -> Self {
        ConfirmHandle {
            inner: Arc::new(ConfirmState {
                observer: Some(Box::new(observer)),
                ..ConfirmState::default()
            }),
        }
    }

    /// Reports the acknowledged watermark (see the type's documentation).
    pub fn confirm(&self, lsn: Lsn, idle: bool) {
        if let Some(observer) = &self.inner.observer {
            observer(lsn, idle);
        }
        self.inner.lsn.fetch_max(lsn.0, Ordering::AcqRel);
        self.inner.idle.store(idle, Ordering::Release);
        self.inner.changed.notify_waiters();
    }

    /// The highest position confirmed so far.
    pub fn confirmed(&self) -> Lsn {
        Lsn(self.inner.lsn.load(Ordering::Acquire))
    }

    /// Whether the pipeline had nothing in flight at the last confirmation.
    pub fn idle(&self) -> bool {
        self.inner.idle.load(Ordering::Acquire)
    }

    /// Resolves at the next confirmation.
    pub async fn changed(&self) {
        self.inner.changed.notified().await;
    }
}
