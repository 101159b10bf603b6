//! The online snapshot's driver: it reads for the decisions of
//! `cdc_pgoutput::backfill::online::OnlineSnapshot` — chunks on ordinary connections (in a
//! background task while the stream goes on, or with it paused), tables without a key
//! whole under one snapshot, key comparisons only the server can make — and hands the
//! results back. Which chunks to read, whether and where a read is placed, what the
//! stream may drop and what a token says are all decided there.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use cdc_core::{BackfillProgress, ChangeEvent, Lsn, Position, Result};
use cdc_pgoutput::backfill::online::{
    ChunkRead, OnlineRules, OnlineSnapshot, OnlineTable, Request, Splits,
};
use cdc_pgoutput::machine::schedule::BackfillFacts;
use cdc_pgoutput::machine::source::StreamMerge;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::backfill_keys::{key_columns, key_order};
use super::stats::{SourceStats, TableReadWhole};
use crate::catalog::CatalogTable;
use crate::conn::ConnectionConfig;
use crate::conn::sql_session::SqlSession;
use crate::snapshot::WholeTableRead;
use crate::wal_page::WalPages;

mod rounds;
mod server_order;
mod whole;

/// What a background read round hands back: its connections, each request's result (a
/// table's chunks together and in key order), and the splits found for the next round.
#[derive(Debug)]
struct RoundResult {
    readers: Vec<SqlSession>,
    planner: Option<SqlSession>,
    results: Vec<(Request, Result<ChunkRead>)>,
    next_splits: Vec<Splits>,
}

/// Options of the online snapshot.
#[derive(Clone, Debug)]
pub(crate) struct BackfillOptions {
    pub connection: ConnectionConfig,
    pub chunk_rows: usize,
    pub readers: usize,
    pub in_recovery: bool,
    /// The server's WAL page sizes (see `wal_page`).
    pub wal: WalPages,
    /// Where chunk rereads and tables read whole are counted.
    pub stats: SourceStats,
}

/// The running online snapshot: its decisions, and the connections and reads in flight.
#[derive(Debug)]
pub(crate) struct BackfillPhase {
    state: OnlineSnapshot,
    tables: Arc<Vec<CatalogTable>>,
    options: BackfillOptions,
    readers: Vec<SqlSession>,
    /// The connection that finds the ends of the next round's chunks while a round reads.
    planner: Option<SqlSession>,
    /// The ends it found, for the next round.
    next_splits: Vec<Splits>,
    /// A read round running in the background: the readers come back with the results.
    in_flight: Option<JoinHandle<RoundResult>>,
    /// Signalled when a background round finishes.
    round_done: Arc<Notify>,
    /// Set by the background round just before it signals (its handle may not report
    /// finished for a moment longer).
    round_ready: Arc<AtomicBool>,
    /// The read of a table without a primary key being copied whole.
    whole_read: Option<WholeTableRead>,
    /// The connection the server compares keys on.
    comparer: Option<SqlSession>,
}

/// The online snapshot's view of the catalog's tables (same order).
fn online_tables(tables: &[CatalogTable]) -> Result<Vec<OnlineTable>> {
    tables
        .iter()
        .map(|table| {
            Ok(OnlineTable {
                schema: table.schema.clone(),
                key_columns: key_columns(table)?,
                order: key_order(table)?,
                column_types: table.column_types.clone(),
            })
        })
        .collect()
}

impl BackfillPhase {
    /// A backfill of `tables` (catalog indexes into `catalog_tables`), starting where
    /// `progress` says (a fresh start: every table not started), with the stream at
    /// `processed` (where it starts) and the last handed-out position `after`.
    pub(crate) fn new(
        catalog_tables: Arc<Vec<CatalogTable>>,
        progress: BackfillProgress,
        processed: Lsn,
        after: Option<Position>,
        options: BackfillOptions,
    ) -> Result<Self> {
        let online = Arc::new(online_tables(&catalog_tables)?);
        let state = OnlineSnapshot::new(online, progress, processed, after, rules(&options))?;
        Ok(Self::around(state, catalog_tables, options))
    }

    fn around(
        state: OnlineSnapshot,
        tables: Arc<Vec<CatalogTable>>,
        options: BackfillOptions,
    ) -> Self {
        options.stats.read_whole(
            state
                .keyless_pending()
                .into_iter()
                .map(|table| TableReadWhole {
                    table: table.to_string(),
                    reason: "no primary key".to_owned(),
                })
                .collect(),
        );
        BackfillPhase {
            state,
            tables,
            options,
            readers: Vec::new(),
            planner: None,
            next_splits: Vec::new(),
            in_flight: None,
            round_done: Arc::new(Notify::new()),
            round_ready: Arc::new(AtomicBool::new(false)),
            whole_read: None,
            comparer: None,
        }
    }

    /// The same backfill for a new replication session starting at `start`, from the
    /// progress the handed-out batches cover (`covered`; chunk rows still queued when the
    /// connection was lost are gone with the queue, so they are read again), with new
    /// positions after `after`.
    pub(crate) fn for_new_session(
        &self,
        covered: Option<BackfillProgress>,
        start: Lsn,
        after: Option<Position>,
    ) -> Result<Self> {
        let state = self.state.for_new_session(
            covered,
            Self::fresh_progress(&self.tables),
            start,
            after,
        )?;
        Ok(Self::around(
            state,
            self.tables.clone(),
            self.options.clone(),
        ))
    }

    /// The progress of a fresh backfill of every table in `tables`.
    pub(crate) fn fresh_progress(tables: &[CatalogTable]) -> BackfillProgress {
        Self::progress_of(tables, false)
    }

    /// The progress of a stream with nothing to copy of `tables`: its sink holds them in
    /// full (a consistent snapshot), or the snapshot mode is `never`. Written into tokens
    /// so that a later run knows the stream's table set.
    pub(crate) fn all_done(tables: &[CatalogTable]) -> BackfillProgress {
        Self::progress_of(tables, true)
    }

    fn progress_of(tables: &[CatalogTable], done: bool) -> BackfillProgress {
        BackfillProgress {
            tables: tables
                .iter()
                .map(|t| cdc_pgoutput::machine::table_set::new_entry(&t.schema.name, done))
                .collect(),
            unshown_xids: Vec::new(),
        }
    }

    /// See [`OnlineSnapshot::restart`].
    pub(crate) fn restart(&mut self, table: &cdc_core::TableName) -> Result<()> {
        self.state.restart(table)
    }

    /// See [`OnlineSnapshot::tables_to_truncate`].
    pub(crate) fn tables_to_truncate(&self) -> Vec<cdc_core::TableName> {
        self.state.tables_to_truncate()
    }

    /// See [`OnlineSnapshot::copies`].
    pub(crate) fn copies(&self) -> bool {
        self.state.copies()
    }

    /// See [`OnlineSnapshot::is_finished`].
    pub(crate) fn is_finished(&self) -> bool {
        self.state.is_finished()
    }

    /// See [`OnlineSnapshot::progress_for`].
    pub(crate) fn progress_for(
        &mut self,
        last: Option<Position>,
        commit_end: Option<Lsn>,
        last_event: Option<&ChangeEvent>,
    ) -> Option<BackfillProgress> {
        self.state.progress_for(last, commit_end, last_event)
    }
}

fn rules(options: &BackfillOptions) -> OnlineRules {
    OnlineRules {
        chunk_rows: options.chunk_rows,
        readers: options.readers,
    }
}

/// The stream's side of the online snapshot, as the source machine drives it.
impl StreamMerge for BackfillPhase {
    fn on_event(&mut self, event: ChangeEvent) -> Result<Option<ChangeEvent>> {
        self.state.on_event(event)
    }

    fn hold_end(&mut self, end: Lsn) -> bool {
        self.state.hold_end(end)
    }

    fn idle(&mut self, lsn: Lsn) {
        self.state.progress(lsn);
    }

    fn facts(&self, now: Instant) -> BackfillFacts {
        let ready =
            self.in_flight.is_some() && self.round_ready.load(std::sync::atomic::Ordering::Acquire);
        self.state.facts(now, ready)
    }
}
