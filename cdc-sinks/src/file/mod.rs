//! Durable Feldera JSON files — or Debezium records ([`FileSinkOptions::debezium`]) — with
//! exactly-once effect.
//!
//! The output directory holds the data files — one per table (named by
//! [`table_file_name`], e.g. `public.orders.json`, the form a Feldera file input reads
//! directly) or one multiplexed `changes.json` (Debezium records always go there, one
//! line each, in stream order) — the checkpoint file
//! `pgcdc-checkpoint.json`, which records the [`ResumeToken`] together with the length of
//! every data file at that checkpoint, and the lock file `pgcdc.lock`.
//!
//! A checkpoint writes out pending bytes, fsyncs the data files, writes the checkpoint to
//! a temporary file, fsyncs it, renames it over the previous one and fsyncs the
//! directory. The rename is the commit point: before it the previous checkpoint holds,
//! after it the new one. At `open`, every data file is truncated back to its recorded
//! length and data files created after the checkpoint are removed, so the files hold
//! exactly what the returned token covers. The pipeline resumes after the token; events
//! at or before the last applied position that arrive anyway are skipped. Together:
//! nothing is duplicated or lost (exactly-once files).
//!
//! A consumer must read only up to the lengths in the checkpoint file (or only after the
//! writer stopped): bytes past them may still be withdrawn by a recovery.
//!
//! # Files pgcdc owns, and what it refuses
//!
//! The sink writes, truncates or removes only its own files: the lock file, the checkpoint
//! file and its temporary file, and the data files its checkpoint names.
//! - Before it creates a data file, it records the name in the checkpoint file as pending
//!   (durably), then creates the file exclusively. Recovery removes exactly the pending
//!   files no checkpoint covers; other files in the directory, whatever their names, are
//!   never touched. (A checkpoint edited to name another file of the directory under a
//!   name pgcdc could write would still make pgcdc treat it as its own: give pgcdc a
//!   directory of its own.)
//! - A checkpoint that lists a name pgcdc never writes under its layout (a path, `..`,
//!   anything but `changes.json` for the multiplexed layout or a name [`table_file_name`]
//!   can produce) is refused as not one pgcdc wrote.
//! - Symbolic links are never followed: new files are created exclusively, existing ones
//!   opened with `O_NOFOLLOW`, the checkpoint replaced by an exclusively created
//!   temporary file and a rename. A link, a FIFO or any other non-regular file at one of
//!   pgcdc's names is an error naming it. (The directory itself may be a link.)
//! - Only one sink may use a directory at a time: it holds an exclusive `flock` on
//!   `pgcdc.lock`, which contains its pid, from `open` until it is dropped. A second sink
//!   (in any process, including the same one) fails naming that pid.
//!
//! Per-table file names stay at most 255 bytes and distinct on case-insensitive
//! filesystems: a name with upper-case letters (`"Orders"`) or too long for its readable
//! form gets a readable prefix and a hash of the exact name (see [`table_file_name`]).
//! A directory whose checkpoint lists the readable upper-case names of earlier versions
//! is refused with the new name to use.

mod core;
mod io_error;
mod lock;
mod names;
mod no_follow;
mod options;
mod records;
mod state;
mod writeback;

use async_trait::async_trait;
use cdc_core::{Ack, Acknowledger, Error, Result, ResumeToken, Sink, SinkBatch};

use self::core::Core;
use crate::feldera::{PolicyCount, PolicyLog};

pub use lock::LOCK_FILE;
pub use names::{MULTIPLEXED_FILE, table_file_name};
pub use options::{CrashInjection, CrashPoint, FileLayout, FileSinkOptions};
pub use state::CHECKPOINT_FILE;

/// Feldera JSON files with checkpoints that make them exactly-once (see the module docs).
///
/// `write` encodes a batch and hands it to the OS (`Ack::Done`: processed, not durable);
/// `checkpoint` makes everything written durable atomically with the token (`Ack::Done`
/// when it returns). File I/O runs on tokio's blocking pool, so the sink must be driven
/// inside a tokio runtime. If a call fails or its future is dropped half-way, the sink
/// refuses further calls; reopening (a new sink on the same directory) recovers. From
/// `open` until it is dropped the sink holds the directory's lock: no other sink, in this
/// process or another, can open the directory meanwhile.
#[derive(Debug)]
pub struct FelderaFileSink {
    options: FileSinkOptions,
    core: Option<Box<Core>>,
    /// Policy counts, shared with the encoder of every core opened.
    policy_log: PolicyLog,
}

impl FelderaFileSink {
    /// A sink writing into `options.dir`. Nothing is touched before [`Sink::open`].
    pub fn new(options: FileSinkOptions) -> Result<Self> {
        options.validate()?;
        Ok(FelderaFileSink {
            options,
            core: None,
            policy_log: PolicyLog::default(),
        })
    }

    /// The options.
    pub fn options(&self) -> &FileSinkOptions {
        &self.options
    }

    /// Non-error policies applied so far, per column (empty before `open`).
    pub fn policy_counts(&self) -> Vec<PolicyCount> {
        self.policy_log.counts()
    }

    /// The policy counts, shared: readable while the sink runs in a pipeline.
    pub fn policy_log(&self) -> PolicyLog {
        self.policy_log.clone()
    }

    /// Replayed events skipped because their position was already in the files.
    pub fn skipped_replays(&self) -> u64 {
        self.core.as_ref().map_or(0, |c| c.skipped)
    }

    /// Runs `f` on the core on a blocking thread.
    async fn run<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Core) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let mut core = self.core.take().ok_or_else(|| {
            Error::sink(format!(
                "the file sink for {} is not open, or an earlier call was interrupted; open a new sink on the directory",
                self.options.dir.display()
            ))
        })?;
        let (core, result) = tokio::task::spawn_blocking(move || {
            let result = f(&mut core);
            (core, result)
        })
        .await
        .map_err(|e| Error::sink("the file sink's I/O task failed").with_source(e))?;
        self.core = Some(core);
        result
    }
}

#[async_trait]
impl Sink for FelderaFileSink {
    /// Locks the directory (until the sink is dropped), recovers it (see the module docs)
    /// and returns the token of the last checkpoint, `None` for a new directory.
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        // A sink opened again gives up its own lock first, or it would lock itself out.
        self.core = None;
        let options = self.options.clone();
        let log = self.policy_log.clone();
        let (core, token) = tokio::task::spawn_blocking(move || Core::open(options, log))
            .await
            .map_err(|e| Error::sink("the file sink's I/O task failed").with_source(e))??;
        tracing::info!(dir = %core.dir().display(), token = ?token.as_ref().map(|t| t.position), "file sink opened");
        self.core = Some(Box::new(core));
        Ok(token)
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        self.run(move |core| core.write_batch(&batch.batch.events))
            .await?;
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        let token = token.clone();
        self.run(move |core| core.checkpoint(&token)).await?;
        Ok(Ack::Done)
    }
}

#[cfg(test)]
mod debezium_tests;
#[cfg(test)]
mod safety_tests;
#[cfg(test)]
mod tests;
