//! [`ObservedSource`]: a [`PgSource`] that shares what it learns at start (the tables'
//! estimated sizes, the received WAL position) with the progress display. Whether it may
//! create or replace a slot is the library's `SlotPolicy`, which the CLI sets from
//! `--create-slot`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use cdc_core::{ChangeBatch, ConfirmHandle, Lsn, Result, ResumeToken, Source, TableName};
use cdc_postgres::source::PgSource;

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

/// A [`PgSource`] with shared [`SourceInfo`].
#[derive(Debug)]
pub struct ObservedSource {
    inner: PgSource,
    /// The slot's name, for the log.
    slot: String,
    info: SourceInfo,
}

impl ObservedSource {
    /// Wraps `inner`, which reads from the slot named `slot`.
    pub fn new(inner: PgSource, slot: String) -> Self {
        let info = SourceInfo {
            inner: Arc::new(InfoInner {
                source: inner.stats(),
                ..InfoInner::default()
            }),
        };
        ObservedSource { inner, slot, info }
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
impl Source for ObservedSource {
    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
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
            slot = %self.slot,
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

    fn offer_row_blocks(&mut self, sink_takes_them: bool) {
        self.inner.offer_row_blocks(sink_takes_them);
    }

    fn confirm_handle(&self) -> ConfirmHandle {
        self.inner.confirm_handle()
    }

    fn commit_mode(&self) -> cdc_core::CommitMode {
        self.inner.commit_mode()
    }

    async fn check(&mut self) -> Result<()> {
        self.inner.check().await
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }

    async fn abandon_start(&mut self) -> Result<()> {
        self.inner.abandon_start().await
    }
}
