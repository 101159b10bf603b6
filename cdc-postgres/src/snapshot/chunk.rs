//! One chunk of an online snapshot: the next rows of a table in primary-key order, read in
//! a short transaction of its own, with the transaction's snapshot and the WAL position
//! just after it (what the merge needs to place the chunk in the stream).

use cdc_core::{Error, Lsn, Row, quote_identifier};
use futures::StreamExt;
use tokio_postgres::Client;

use super::copy::{columns_for_copy, decode_fields, sql_error};
use super::copy_binary::CopyBinaryDecoder;
use crate::catalog::CatalogTable;

/// What one chunk read returned.
#[derive(Debug)]
pub struct ChunkRead {
    /// `pg_current_snapshot()` of the read's transaction, as text.
    pub snapshot: String,
    /// The WAL insert position read right after the snapshot was taken (on a standby: the
    /// replay position). Every transaction the snapshot sees committed before it.
    pub until: Lsn,
    /// The rows after the start key, in key order, at most `limit`.
    pub rows: Vec<Row>,
    /// The read reached the end of the table (fewer rows than the limit).
    pub complete: bool,
}

/// A SQL string literal holding `text`, correct whatever `standard_conforming_strings` is.
fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The `SELECT` of one chunk: the rows of `table` whose primary key is after `after` (each
/// key column's Postgres text form), in key order, at most `limit`.
pub fn chunk_query(
    table: &CatalogTable,
    after: Option<&[String]>,
    limit: usize,
) -> Result<String, Error> {
    let key = &table.schema.primary_key;
    if key.is_empty() {
        return Err(Error::config(format!(
            "table {} has no primary key; the online snapshot reads tables in key order (use the consistent snapshot mode for it)",
            table.schema.name
        )));
    }
    let key_columns: Vec<String> = key.iter().map(|c| quote_identifier(c)).collect();
    // A partitioned table is read through its root (a merge of the partitions' key
    // indexes); a plain table without its inheritance children, as pgoutput publishes it.
    let only = if table.partitions.is_empty() {
        "ONLY "
    } else {
        ""
    };
    let mut select = format!(
        "SELECT {} FROM {only}{}",
        columns_for_copy(table).join(", "),
        table.schema.name
    );
    if let Some(after) = after {
        if after.len() != key.len() {
            return Err(Error::protocol(format!(
                "a backfill position of {} has {} key values, the primary key has {} columns",
                table.schema.name,
                after.len(),
                key.len()
            )));
        }
        let mut values = Vec::with_capacity(key.len());
        for (index, text) in after.iter().enumerate() {
            let Some(column) = table
                .schema
                .columns
                .iter()
                .find(|c| Some(&c.name) == key.get(index))
            else {
                return Err(Error::protocol(
                    "internal: primary key column not in the table",
                ));
            };
            let type_name = column.column_type.name.as_deref().unwrap_or("text");
            values.push(format!("{}::{type_name}", literal(text)));
        }
        // Row comparison follows the primary key index's order, so the scan uses it.
        select.push_str(&format!(
            " WHERE ({}) > ({})",
            key_columns.join(", "),
            values.join(", ")
        ));
    }
    select.push_str(&format!(
        " ORDER BY {} LIMIT {limit}",
        key_columns.join(", ")
    ));
    Ok(select)
}

/// Reads one chunk of `table` on `client` (an idle connection; the read is one short
/// `REPEATABLE READ` transaction). `in_recovery`: the server is a standby.
pub async fn read_chunk(
    client: &Client,
    table: &CatalogTable,
    after: Option<&[String]>,
    limit: usize,
    in_recovery: bool,
) -> Result<ChunkRead, Error> {
    let select = chunk_query(table, after, limit)?;
    let context = format!("reading a chunk of {}", table.schema.name);
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
        .map_err(sql_error(&context))?;
    let result = read_in_transaction(client, table, &select, limit, in_recovery, &context).await;
    // Ends the transaction whatever happened; a failed COMMIT after a successful read
    // changes nothing (the transaction only read).
    let ended = client.batch_execute("COMMIT").await;
    let read = result?;
    ended.map_err(sql_error(&context))?;
    Ok(read)
}

async fn read_in_transaction(
    client: &Client,
    table: &CatalogTable,
    select: &str,
    limit: usize,
    in_recovery: bool,
    context: &str,
) -> Result<ChunkRead, Error> {
    // The first statement of the transaction takes its snapshot; the WAL position is
    // read in the same statement, after it.
    let position = if in_recovery {
        "pg_last_wal_replay_lsn()"
    } else {
        "pg_current_wal_insert_lsn()"
    };
    let row = client
        .query_one(
            &format!("SELECT pg_current_snapshot()::text, {position}::text"),
            &[],
        )
        .await
        .map_err(sql_error(context))?;
    let snapshot: String = row.try_get(0).map_err(sql_error(context))?;
    let until_text: String = row.try_get(1).map_err(sql_error(context))?;
    let until: Lsn = until_text.parse().map_err(|_| {
        Error::protocol(format!(
            "{context}: the server reported WAL position {until_text:?}"
        ))
    })?;
    let statement = format!("COPY ({select}) TO STDOUT (FORMAT binary)");
    let stream = client
        .copy_out(statement.as_str())
        .await
        .map_err(sql_error(context))?;
    futures::pin_mut!(stream);
    let mut decoder = CopyBinaryDecoder::new(Some(table.column_types.len()));
    let mut rows = Vec::with_capacity(limit.min(4096));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(sql_error(context))?;
        decoder.feed(&chunk);
        while let Some(row) = decoder
            .next_row_with(|bytes, spans| decode_fields(table, &table.column_types, bytes, spans))
            .map_err(|e| Error::protocol(format!("{context}: {e}")))?
        {
            rows.push(row?);
        }
    }
    if !decoder.is_done() || decoder.has_pending_bytes() {
        return Err(Error::protocol(format!(
            "{context}: the COPY data ended without its trailer"
        )));
    }
    let complete = rows.len() < limit;
    Ok(ChunkRead {
        snapshot,
        until,
        rows,
        complete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_survive_quotes_and_backslashes() {
        assert_eq!(literal(r"it's a \ test"), r"E'it''s a \\ test'");
    }
}
