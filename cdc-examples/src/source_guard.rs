//! [`GuardedSource`]: a [`PgSource`] that creates or replaces a replication slot only when
//! the user asked for it (`--create-slot`), and that shares what it learns at start (the
//! tables' estimated sizes, the received WAL position) with the progress display.
//!
//! Only at start does the source know whether the sink holds a resume position, so this
//! is where the decision is made: a stream resuming from its own saved position needs no
//! permission; a fresh stream that would create a slot, or drop an existing one to take a
//! new snapshot, does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use cdc_core::{ChangeBatch, ConfirmHandle, Error, Lsn, Result, ResumeToken, Source, TableName};
use cdc_postgres::source::PgSource;

/// What the user allowed, and what the slot looked like before the run.
#[derive(Clone, Debug)]
pub struct SlotPermission {
    /// The slot's name.
    pub slot: String,
    /// Whether the slot existed when the run was prepared.
    pub exists: bool,
    /// `--create-slot`.
    pub may_create: bool,
    /// The run wants an initial snapshot (which needs a new slot).
    pub wants_snapshot: bool,
    /// `--snapshot initial-only`: a temporary slot that disappears with the session.
    pub temporary: bool,
}

impl SlotPermission {
    /// Checks that starting with `resume` does not create or replace a slot without
    /// permission. A Config error says which flag to add.
    pub fn check(&self, resume: Option<&ResumeToken>) -> Result<()> {
        if self.may_create {
            return Ok(());
        }
        let slot = &self.slot;
        match resume {
            // Resuming the stream, or redoing our own interrupted snapshot: the run that
            // created the slot had permission.
            Some(_) => Ok(()),
            None if !self.exists && self.temporary => Ok(()),
            None if !self.exists => Err(Error::config(format!(
                "replication slot {slot:?} does not exist: pass --create-slot to create it (a slot keeps WAL on the server until it is dropped, e.g. with `pgcdc drop-slot {slot}`)"
            ))),
            None if self.wants_snapshot => Err(Error::config(format!(
                "replication slot {slot:?} exists, but the output holds no saved position: a new initial snapshot needs a new slot; pass --create-slot to drop and recreate it, or --snapshot never to stream from the slot's position"
            ))),
            None => Ok(()),
        }
    }
}

/// Facts about a running source, shared with the progress display.
#[derive(Clone, Debug, Default)]
pub struct SourceInfo {
    inner: Arc<InfoInner>,
}

#[derive(Debug, Default)]
struct InfoInner {
    started: AtomicBool,
    resumed: AtomicBool,
    received: AtomicU64,
    tables: Mutex<Vec<(TableName, i64)>>,
    source: cdc_postgres::source::SourceStats,
}

impl SourceInfo {
    /// Whether the source has started.
    pub fn started(&self) -> bool {
        self.inner.started.load(Ordering::Acquire)
    }

    /// Whether it resumed from a saved position.
    pub fn resumed(&self) -> bool {
        self.inner.resumed.load(Ordering::Relaxed)
    }

    /// The highest WAL position received from the server.
    pub fn received(&self) -> Lsn {
        Lsn(self.inner.received.load(Ordering::Relaxed))
    }

    /// The streamed tables with the catalog's row estimate (`reltuples`; ≤ 0 when
    /// unknown).
    pub fn tables(&self) -> Vec<(TableName, i64)> {
        self.inner
            .tables
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Tables this run's online snapshot copies whole while the stream waits, and why.
    pub fn tables_read_whole(&self) -> Vec<cdc_postgres::source::TableReadWhole> {
        self.inner.source.snapshot().tables_read_whole
    }

    /// Sum of the known row estimates, `None` when no table has one.
    pub fn estimated_rows(&self) -> Option<u64> {
        let tables = self.tables();
        let known: Vec<u64> = tables
            .iter()
            .filter_map(|(_, rows)| u64::try_from(*rows).ok().filter(|r| *r > 0))
            .collect();
        (!known.is_empty()).then(|| known.iter().sum())
    }
}

/// A [`PgSource`] with a slot permission check at start and shared [`SourceInfo`].
#[derive(Debug)]
pub struct GuardedSource {
    inner: PgSource,
    permission: SlotPermission,
    info: SourceInfo,
}

impl GuardedSource {
    /// Wraps `inner`.
    pub fn new(inner: PgSource, permission: SlotPermission) -> Self {
        let info = SourceInfo {
            inner: Arc::new(InfoInner {
                source: inner.stats(),
                ..InfoInner::default()
            }),
        };
        GuardedSource {
            inner,
            permission,
            info,
        }
    }

    /// The shared facts.
    pub fn info(&self) -> SourceInfo {
        self.info.clone()
    }

    /// The source's live statistics.
    pub fn stats(&self) -> cdc_postgres::source::SourceStats {
        self.inner.stats()
    }
}

#[async_trait]
impl Source for GuardedSource {
    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
        self.permission.check(resume)?;
        let start = self.inner.start(resume).await?;
        let tables = self
            .inner
            .tables()
            .iter()
            .map(|t| (t.schema.name.clone(), t.estimated_rows))
            .collect();
        *self
            .info
            .inner
            .tables
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = tables;
        self.info
            .inner
            .resumed
            .store(resume.is_some(), Ordering::Relaxed);
        self.info.inner.started.store(true, Ordering::Release);
        tracing::info!(
            slot = %self.permission.slot,
            resumed = resume.is_some(),
            position = %resume
                .and_then(|t| t.position)
                .map_or_else(|| "-".to_owned(), |p| p.to_string()),
            confirmed = %start,
            tables = ?self.info.tables().iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>(),
            "source started"
        );
        Ok(start)
    }

    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        let batch = self.inner.next_batch().await?;
        self.info
            .inner
            .received
            .fetch_max(self.inner.received_lsn().0, Ordering::Relaxed);
        Ok(batch)
    }

    fn resume_token(&self, batch: &ChangeBatch) -> ResumeToken {
        self.inner.resume_token(batch)
    }

    fn confirm_handle(&self) -> ConfirmHandle {
        self.inner.confirm_handle()
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }

    async fn abandon_start(&mut self) -> Result<()> {
        self.inner.abandon_start().await
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::SourceIdentity;

    use super::*;

    fn permission(exists: bool, may_create: bool, wants_snapshot: bool) -> SlotPermission {
        SlotPermission {
            slot: "s".into(),
            exists,
            may_create,
            wants_snapshot,
            temporary: false,
        }
    }

    #[test]
    fn creating_or_replacing_a_slot_needs_permission() {
        let token = ResumeToken::new(
            SourceIdentity {
                system_identifier: "1".into(),
                timeline: 1,
                database: "d".into(),
                slot: "s".into(),
            },
            None,
        );
        let missing = permission(false, false, true).check(None);
        assert!(
            missing.is_err_and(|e| e.message().contains("--create-slot")),
            "a missing slot is not created silently"
        );
        let replace = permission(true, false, true).check(None);
        assert!(replace.is_err_and(|e| e.message().contains("--snapshot never")));
        assert!(permission(true, false, false).check(None).is_ok());
        assert!(permission(true, false, true).check(Some(&token)).is_ok());
        assert!(permission(false, true, true).check(None).is_ok());
    }
}
