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
use futures::StreamExt;
use tokio_postgres::{Client, CopyOutStream};

use super::chunk::begin_with_snapshot;
use super::copy::{check_ended, columns_for_copy, next_decoded_row, sql_error};
use super::copy_binary::CopyBinaryDecoder;
use crate::catalog::CatalogTable;

/// A table being read whole under one snapshot.
pub struct WholeTableRead {
    client: Client,
    stream: std::pin::Pin<Box<CopyOutStream>>,
    decoder: CopyBinaryDecoder,
    /// Where the rows' kept bytes are copied.
    blocks: ByteBlocks,
    context: String,
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
    /// Begins reading `table` on `client` (an idle connection of its own, kept until the
    /// read ends): a `REPEATABLE READ` transaction, its snapshot and position, and the
    /// COPY of every row (through the root of a partitioned table).
    pub async fn begin(
        client: Client,
        table: &CatalogTable,
        in_recovery: bool,
    ) -> Result<(Self, WholeTableStart), Error> {
        let context = format!("reading {} (no primary key) whole", table.schema.name);
        let (snapshot, until) = begin_with_snapshot(&client, in_recovery, &context).await?;
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
        let stream = client
            .copy_out(statement.as_str())
            .await
            .map_err(sql_error(&context))?;
        Ok((
            WholeTableRead {
                client,
                stream: Box::pin(stream),
                decoder: CopyBinaryDecoder::new(Some(table.column_types.len())),
                blocks: ByteBlocks::new(),
                context,
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
            match self.stream.next().await {
                Some(chunk) => {
                    let chunk = chunk.map_err(sql_error(&self.context))?;
                    self.decoder.feed(&chunk);
                }
                None => {
                    check_ended(&self.decoder, &self.context)?;
                    self.client
                        .batch_execute("COMMIT")
                        .await
                        .map_err(sql_error(&self.context))?;
                    self.ended = true;
                }
            }
        }
    }

    /// Whether every row was handed out.
    pub fn is_done(&self) -> bool {
        self.ended
    }
}
