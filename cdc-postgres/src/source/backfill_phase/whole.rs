//! Tables without a primary key in the online snapshot, as the driver reads them: the
//! whole table under one snapshot, in pieces of `chunk_rows`, while the stream waits
//! (`cdc_pgoutput::backfill::online`'s `whole` says why and decides the rest).

use std::sync::Arc;
use std::time::Instant;

use cdc_core::{Error, Result};

use super::BackfillPhase;
use crate::conn::sql_session::SqlSession;
use crate::snapshot::WholeTableRead;
use crate::source::pending::EventQueue;

impl BackfillPhase {
    /// Starts reading the next table without a primary key (the caller is between two
    /// transactions and holds the stream from now until the copy ends), and places its
    /// first piece. A snapshot that misses a transaction the stream already passed, or a
    /// transient failure, is retried later.
    pub(crate) async fn start_whole(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let Some(catalog_index) = self.state.next_whole() else {
            return Ok(());
        };
        let tables = Arc::clone(&self.tables);
        let Some(table) = tables.get(catalog_index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let begun = match SqlSession::connect(&self.options.connection).await {
            Ok(session) => {
                WholeTableRead::begin(session, table, self.options.in_recovery, self.options.wal)
                    .await
            }
            Err(e) => Err(e),
        };
        let (read, start) = match begun {
            Ok(begun) => begun,
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, table = %table.schema.name, "cannot start reading a table without a primary key; retrying");
                self.state.whole_not_begun(Instant::now());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        // A read whose snapshot is refused is dropped: that ends its connection and so
        // its transaction.
        if self
            .state
            .whole_begun(start.snapshot, start.until, Instant::now(), out)?
        {
            self.whole_read = Some(read);
            self.next_whole_piece(out).await?;
        }
        Ok(())
    }

    /// Places the next piece of the running whole-table copy (and, after its last rows,
    /// the table's completion, which ends the copy).
    pub(crate) async fn next_whole_piece(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let tables = Arc::clone(&self.tables);
        let limit = self.options.chunk_rows.max(1);
        let (Some(catalog_index), Some(read)) =
            (self.state.whole_table(), self.whole_read.as_mut())
        else {
            return Ok(());
        };
        let Some(table) = tables.get(catalog_index) else {
            return Err(Error::protocol(
                "internal: a backfilled table without a catalog entry",
            ));
        };
        let rows = match read.next_rows(table, limit).await {
            Ok(rows) => rows,
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, table = %table.schema.name, "reading a table without a primary key failed; copying it again");
                self.whole_read = None;
                self.state.whole_failed(Instant::now());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let done = read.is_done();
        if done {
            self.whole_read = None;
        }
        self.state.whole_piece(rows, done, out)
    }
}
