//! The `Source` trait: what the pipeline pulls batches from.

use async_trait::async_trait;

use crate::{ChangeBatch, Lsn, Result, ResumeToken};

/// A stream of change batches with a position that can be confirmed.
///
/// The pipeline calls `start` once, then `next_batch` repeatedly, and `confirm` whenever
/// its acknowledged watermark moves. Implemented by `PgSource`, and by scripted sources in
/// tests of the pipeline's gating.
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
    /// Cancel safety: dropping the returned future before it completes must lose nothing;
    /// a later call returns the events that would have been in the batch.
    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>>;

    /// The token that resumes right after `batch` (its last position plus the source's
    /// identity and any snapshot progress).
    fn resume_token(&self, batch: &ChangeBatch) -> ResumeToken;

    /// Every transaction that ends at or before `lsn` is acknowledged under the commit
    /// mode; the source may report `lsn` as flushed. `lsn` is always a transaction end
    /// (a [`ChangeBatch::commit_end`]) and never decreases. `idle` is true when nothing is
    /// in flight in the pipeline, which lets the source confirm further positions that
    /// carry no events for it (keepalive `wal_end`), so an idle slot does not retain WAL.
    fn confirm(&mut self, lsn: Lsn, idle: bool);

    /// Stops the stream after a final status update. Called once at graceful shutdown.
    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}
