//! One chunk of an online snapshot: the next rows of a table in primary-key order, read in
//! a short transaction of its own, with the transaction's snapshot and the WAL position
//! just after it (what the merge needs to place the chunk in the stream).

use cdc_core::{Error, Lsn, quote_identifier};
use cdc_pgoutput::protocol::ByteBlocks;

use super::copy::columns_for_copy;
use super::copy_binary::CopyBinaryDecoder;
use super::copy_rows::{check_ended, decode_rows};
use crate::catalog::CatalogTable;
use crate::conn::sql_session::SqlSession;
use crate::wal_page::WalPages;

pub use cdc_pgoutput::backfill::online::{ChunkRead, range_cap};

/// A SQL string literal holding `text`, correct whatever `standard_conforming_strings` is.
fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The parts of `table`'s key-ordered queries: quoted key columns, `ONLY ` or not, and a
/// key given in text form as a row of typed literals.
struct KeyQuery<'a> {
    table: &'a CatalogTable,
    key_columns: String,
    only: &'static str,
}

impl<'a> KeyQuery<'a> {
    fn new(table: &'a CatalogTable) -> Result<Self, Error> {
        let key = &table.schema.primary_key;
        if key.is_empty() {
            return Err(Error::config(format!(
                "internal: table {} has no primary key to read in key order (it is read whole)",
                table.schema.name
            )));
        }
        let key_columns: Vec<String> = key.iter().map(|c| quote_identifier(c)).collect();
        // A partitioned table is read through its root (a merge of the partitions' key
        // indexes); a plain table without its inheritance children, as pgoutput publishes
        // it.
        let only = if table.partitions.is_empty() {
            "ONLY "
        } else {
            ""
        };
        Ok(KeyQuery {
            table,
            key_columns: key_columns.join(", "),
            only,
        })
    }

    /// `(k1, k2) op (literal1::type1, literal2::type2)`.
    fn compare(&self, op: &str, key: &[String]) -> Result<String, Error> {
        let names = &self.table.schema.primary_key;
        if key.len() != names.len() {
            return Err(Error::protocol(format!(
                "a backfill position of {} has {} key values, the primary key has {} columns",
                self.table.schema.name,
                key.len(),
                names.len()
            )));
        }
        let values = typed_key_values(self.table, key)?;
        // Row comparison follows the primary key index's order, so the scan uses it.
        Ok(format!(
            "({}) {op} ({})",
            self.key_columns,
            values.join(", ")
        ))
    }

    /// ` WHERE …` for keys after `after` and (when given) up to `upto`.
    fn range(&self, after: Option<&[String]>, upto: Option<&[String]>) -> Result<String, Error> {
        let mut conditions = Vec::new();
        if let Some(after) = after {
            conditions.push(self.compare(">", after)?);
        }
        if let Some(upto) = upto {
            conditions.push(self.compare("<=", upto)?);
        }
        Ok(if conditions.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conditions.join(" AND "))
        })
    }
}

/// `key` (text form of each primary key column, in key order) as typed SQL literals,
/// `E'…'::type`.
pub(super) fn typed_key_values(table: &CatalogTable, key: &[String]) -> Result<Vec<String>, Error> {
    let mut values = Vec::with_capacity(key.len());
    for (name, text) in table.schema.primary_key.iter().zip(key) {
        let Some(column) = table.schema.columns.iter().find(|c| &c.name == name) else {
            return Err(Error::protocol(
                "internal: primary key column not in the table",
            ));
        };
        let type_name = column.column_type.name.as_deref().unwrap_or("text");
        values.push(format!("{}::{type_name}", literal(text)));
    }
    Ok(values)
}

/// The `SELECT` of one chunk: the rows of `table` whose primary key is after `after` (each
/// key column's Postgres text form), in key order — up to and including `upto` when given
/// (at most [`range_cap`] of them), else at most `limit`.
pub fn chunk_query(
    table: &CatalogTable,
    after: Option<&[String]>,
    upto: Option<&[String]>,
    limit: usize,
) -> Result<String, Error> {
    let query = KeyQuery::new(table)?;
    let mut select = format!(
        "SELECT {} FROM {}{}{} ORDER BY {}",
        columns_for_copy(table).join(", "),
        query.only,
        table.schema.name,
        query.range(after, upto)?,
        query.key_columns
    );
    let cap = if upto.is_some() {
        range_cap(limit)
    } else {
        limit
    };
    select.push_str(&format!(" LIMIT {cap}"));
    Ok(select)
}

/// The query for where the chunk of `limit` rows after `after` ends: the key of the
/// `limit`-th row (its key columns as text), none when fewer rows remain. An index-only
/// scan of `limit` keys (a window function numbering them cost five times as much); the
/// text form is taken outside it, of the one row found, because the rows skipped by
/// `OFFSET` are projected too (a third of the query's cost on an integer key).
pub fn boundary_query(
    table: &CatalogTable,
    after: Option<&[String]>,
    limit: usize,
) -> Result<String, Error> {
    let query = KeyQuery::new(table)?;
    let texts: Vec<String> = table
        .schema
        .primary_key
        .iter()
        .map(|c| format!("pgcdc_end.{}::text", quote_identifier(c)))
        .collect();
    Ok(format!(
        "SELECT {} FROM (SELECT {} FROM {}{}{} ORDER BY {} OFFSET {} LIMIT 1) AS pgcdc_end",
        texts.join(", "),
        query.key_columns,
        query.only,
        table.schema.name,
        query.range(after, None)?,
        query.key_columns,
        limit.saturating_sub(1),
    ))
}

/// Where the next `count` chunks of `limit` rows after `after` end (text form of each
/// end's key), on `session` (autocommit: the ends only split the work; each chunk's read
/// takes its own snapshot). Fewer ends near the table's end.
pub(crate) async fn chunk_boundaries(
    session: &mut SqlSession,
    table: &CatalogTable,
    after: Option<&[String]>,
    limit: usize,
    count: usize,
) -> Result<Vec<Vec<String>>, Error> {
    let context = format!("finding chunk boundaries of {}", table.schema.name);
    let width = table.schema.primary_key.len();
    let mut ends: Vec<Vec<String>> = Vec::with_capacity(count);
    for _ in 0..count {
        let from = ends.last().map(Vec::as_slice).or(after);
        let query = boundary_query(table, from, limit)?;
        let results = session.simple_query_in(&query, &context).await?;
        let Some(row) = results
            .into_iter()
            .next()
            .and_then(|r| r.rows.into_iter().next())
        else {
            break;
        };
        if row.len() != width {
            return Err(Error::protocol(format!(
                "{context}: the server returned {} key values, the primary key has {width} columns",
                row.len()
            )));
        }
        let mut key = Vec::with_capacity(width);
        for text in row {
            let Some(text) = text else {
                return Err(Error::protocol(format!(
                    "{context}: the server returned a NULL primary key value"
                )));
            };
            key.push(text);
        }
        ends.push(key);
    }
    Ok(ends)
}

/// Reads one chunk of `table` on `session` (an idle connection; the read is one short
/// `REPEATABLE READ` transaction): the rows after `after`, up to `upto` when given (then
/// `complete` is false, and at most [`range_cap`] rows are read), else at most `limit`.
/// `in_recovery`: the server is a standby; `wal`: its WAL page sizes.
pub(crate) async fn read_chunk(
    session: &mut SqlSession,
    table: &CatalogTable,
    after: Option<&[String]>,
    upto: Option<&[String]>,
    limit: usize,
    in_recovery: bool,
    wal: WalPages,
) -> Result<ChunkRead, Error> {
    let select = chunk_query(table, after, upto, limit)?;
    let context = format!("reading a chunk of {}", table.schema.name);
    // One round trip a chunk: the transaction's start with its snapshot, the COPY and the
    // COMMIT go in one write (the COPY runs in the transaction the first query began, so
    // under its snapshot). Each wait for the server is a wake-up of this task and of the
    // backend, which on a busy machine costs more than the query. The COMMIT ends the
    // transaction whatever happened (after an error it rolls back).
    let statement = format!("COPY ({select}) TO STDOUT (FORMAT binary)");
    let mut decoder = CopyBinaryDecoder::new(Some(table.column_types.len()));
    let mut blocks = ByteBlocks::new();
    // Sized for the whole chunk up front: growing a vector of rows copies it each time.
    let mut rows = Vec::with_capacity(limit.min(1 << 16));
    let begun = session
        .copy_out(
            Some(&snapshot_query(in_recovery)),
            &statement,
            Some("COMMIT"),
            &context,
            |data| {
                decode_rows(&mut decoder, table, &context, &mut blocks, data, |row| {
                    rows.push(row);
                })
            },
        )
        .await?;
    let (snapshot, until) = parse_snapshot(begun.first().map(Vec::as_slice), wal, &context)?;
    check_ended(&decoder, &context)?;
    let complete = upto.is_none() && rows.len() < limit;
    let cut_short = upto.is_some() && rows.len() >= range_cap(limit);
    Ok(ChunkRead {
        snapshot,
        until,
        rows,
        complete,
        cut_short,
    })
}

/// The statement that begins a `REPEATABLE READ READ ONLY` transaction and returns its
/// snapshot (`pg_current_snapshot()` as text) and the WAL position read right after the
/// snapshot was taken — the insert position, or on a standby (`in_recovery`) the received
/// position (past the record being replayed): every transaction the snapshot sees
/// committed before it. See [`parse_snapshot`].
pub(super) fn snapshot_query(in_recovery: bool) -> String {
    // The first statement of the transaction takes its snapshot; the WAL position is
    // read in the same statement, after it.
    // On a standby a commit becomes visible when its record is redone, and the replay
    // position moves past the record only after that (`ApplyWalRecord`: `rm_redo`, then
    // `lastReplayedEndRecPtr`): a snapshot can see a transaction whose commit ends after
    // the replay position read next, and the chunk's window would close before that
    // commit and apply it a second time (seen once in `standby` under kills: an update
    // applied twice). The received and flushed position is past every record being
    // redone; the replay position stands in where nothing streams (NULL receive position).
    let position = if in_recovery {
        "greatest(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())"
    } else {
        "pg_current_wal_insert_lsn()"
    };
    format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
         SELECT pg_current_snapshot()::text, {position}::text"
    )
}

/// The snapshot and WAL position in the row [`snapshot_query`] returned.
///
/// An insert position just past a WAL page header (the last record ended at the page's
/// start) is taken back to the page's start with the server's page sizes `wal` (see
/// `wal_page`): otherwise, on an idle server, the stream would never pass the position,
/// and the chunk's merge window, and so the backfill, would stay open until other WAL
/// came.
pub(super) fn parse_snapshot(
    row: Option<&[Option<String>]>,
    wal: WalPages,
    context: &str,
) -> Result<(String, Lsn), Error> {
    let value = |i: usize| row.and_then(|r| r.get(i)).and_then(|v| v.as_deref());
    let (Some(snapshot), Some(until_text)) = (value(0), value(1)) else {
        return Err(Error::protocol(format!(
            "{context}: the server returned no snapshot or WAL position (a standby that has replayed nothing yet?)"
        )));
    };
    let until: Lsn = until_text.parse().map_err(|_| {
        Error::protocol(format!(
            "{context}: the server reported WAL position {until_text:?}"
        ))
    })?;
    Ok((snapshot.to_owned(), wal.record_end(until)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_survive_quotes_and_backslashes() {
        assert_eq!(literal(r"it's a \ test"), r"E'it''s a \\ test'");
    }
}
