//! The online snapshot of a table without a primary key: the whole table under one
//! snapshot, read as one COPY on a connection of its own and handed out in pieces of a
//! bounded number of rows, so memory stays bounded whatever the table's size.
//!
//! Without a key, a streamed change cannot be placed relative to a chunk's key range, so
//! the merge treats the whole table as one range: the source holds the stream (between
//! two transactions) from the moment the snapshot is taken until the last piece is
//! placed, and the table's rows go in as one chunk from the merge's point of view (see
//! `cdc_pgoutput::backfill::merge`). The price: no chunk-by-chunk resume (an interrupted
//! copy starts the table over, after a TRUNCATE of it) and a transaction open for the
//! table's copy (not idle: it is reading).

use cdc_core::{Error, Lsn, Row};
use cdc_pgoutput::protocol::ByteBlocks;

use super::chunk::{parse_snapshot, snapshot_query};
use super::copy::columns_for_copy;
use super::copy_binary::CopyBinaryDecoder;
use super::copy_rows::{check_ended, next_decoded_row};
use crate::catalog::CatalogTable;
use crate::conn::sql_session::{CopyOut, SqlSession};
use crate::wal_page::WalPages;

/// A table being read whole under one snapshot.
pub struct WholeTableRead {
    session: SqlSession,
    copy: CopyOut,
    decoder: CopyBinaryDecoder,
    /// Where the rows' kept bytes are copied.
    blocks: ByteBlocks,
    context: String,
    /// The COPY and its transaction ended (its last rows may still wait in the decoder).
    received_all: bool,
    /// Every row was handed out.
    ended: bool,
}

impl std::fmt::Debug for WholeTableRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WholeTableRead")
            .field("context", &self.context)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// A whole-table read just begun: its snapshot and WAL position (as for a chunk).
#[derive(Debug)]
pub struct WholeTableStart {
    /// `pg_current_snapshot()` of the read's transaction, as text.
    pub snapshot: String,
    /// The WAL position read right after the snapshot was taken.
    pub until: Lsn,
}

impl WholeTableRead {
    /// Begins reading `table` on `session` (an idle connection of its own, kept until
    /// the read ends): a `REPEATABLE READ` transaction, its snapshot and position, and the
    /// COPY of every row (through the root of a partitioned table), with the `COMMIT`
    /// sent behind it. `in_recovery` and `wal`: as for [`super::chunk::read_chunk`].
    pub(crate) async fn begin(
        mut session: SqlSession,
        table: &CatalogTable,
        in_recovery: bool,
        wal: WalPages,
    ) -> Result<(Self, WholeTableStart), Error> {
        let context = format!("reading {} (no primary key) whole", table.schema.name);
        let only = if table.partitions.is_empty() {
            "ONLY "
        } else {
            ""
        };
        let columns = columns_for_copy(table);
        let select = format!(
            "SELECT {} FROM {only}{}",
            columns.join(", "),
            table.schema.name
        );
        let statement = format!("COPY ({select}) TO STDOUT (FORMAT binary)");
        // The transaction with its snapshot query, the COPY and the COMMIT in one write,
        // as for a chunk: one round trip per table, not two.
        let mut copy = session
            .begin_copy_out(
                Some(&snapshot_query(in_recovery)),
                &statement,
                Some("COMMIT"),
                &context,
            )
            .await?;
        // Read until the snapshot query's row is in; COPY data that came with it waits in
        // the decoder for the first `next_rows`.
        let mut decoder = CopyBinaryDecoder::new(Some(table.column_types.len()));
        let mut snapshot_rows = Vec::new();
        let mut received_all = false;
        while snapshot_rows.is_empty() && !received_all {
            received_all = !session
                .copy_data(&mut copy, |data| {
                    decoder.feed(data);
                    Ok(())
                })
                .await?;
            snapshot_rows = copy.take_rows();
        }
        let (snapshot, until) =
            parse_snapshot(snapshot_rows.first().map(Vec::as_slice), wal, &context)?;
        Ok((
            WholeTableRead {
                session,
                copy,
                decoder,
                blocks: ByteBlocks::new(),
                context,
                received_all,
                ended: false,
            },
            WholeTableStart { snapshot, until },
        ))
    }

    /// The next rows, at most `limit`; fewer only at the end of the table (then
    /// [`Self::is_done`] is true and the transaction has ended).
    pub async fn next_rows(
        &mut self,
        table: &CatalogTable,
        limit: usize,
    ) -> Result<Vec<Row>, Error> {
        let limit = limit.max(1);
        let mut rows = Vec::with_capacity(limit.min(1 << 16));
        loop {
            while rows.len() < limit {
                match next_decoded_row(&mut self.decoder, table, &self.context, &mut self.blocks)? {
                    Some(row) => rows.push(row),
                    None => break,
                }
            }
            if rows.len() >= limit || self.ended {
                return Ok(rows);
            }
            if self.received_all {
                // Every row the COPY sent is decoded.
                check_ended(&self.decoder, &self.context)?;
                self.ended = true;
                return Ok(rows);
            }
            // One read's worth of COPY data at a time: the decoder holds at most that
            // beyond the rows asked for.
            let decoder = &mut self.decoder;
            let more = self
                .session
                .copy_data(&mut self.copy, |data| {
                    decoder.feed(data);
                    Ok(())
                })
                .await?;
            self.received_all = !more;
        }
    }

    /// Whether every row was handed out.
    pub fn is_done(&self) -> bool {
        self.ended
    }
}
