//! Parallel COPY of the configured tables under the slot's exported snapshot.
//!
//! Each worker opens its own connection, starts a `REPEATABLE READ` transaction and
//! imports the exported snapshot (`SET TRANSACTION SNAPSHOT`), so every worker sees the
//! database exactly as of the slot's consistent point. Work items are whole tables, leaf
//! partitions of a partitioned table, or ctid ranges of a large table (PostgreSQL 14+ scans
//! those efficiently). Rows go to the consumer through a bounded channel, so a slow sink
//! holds the copy back instead of memory growing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use cdc_core::{Error, TableName, quote_identifier};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::copy_binary::CopyBinaryDecoder;
pub use super::copy_rows::CopyMessage;
use super::copy_rows::{ROWS_PER_MESSAGE, check_ended, decode_rows};
use super::parallel_decode::{DecoderPool, Segment};
use super::row_blocks::{BlockBuilder, CopyFieldDecoder};
use super::row_group::GroupedCopy;
use crate::catalog::{CatalogTable, decodes_from_binary};
use crate::conn::ConnectionConfig;
use crate::conn::sql_session::{CopyOut, SqlSession};
use cdc_pgoutput::protocol::ByteBlocks;

/// One unit of copying work.
#[derive(Clone, Debug)]
pub struct WorkItem {
    /// Index of the configured table the rows belong to.
    pub table: usize,
    /// The relation actually read (the table, or one of its leaf partitions).
    pub relation: TableName,
    /// Optional ctid page range `[start, end)`.
    pub pages: Option<(i64, i64)>,
    /// Tasks decoding the item's rows: 1, the reader decodes them itself; more, the reader
    /// only cuts the data into segments of whole rows for that many decoder tasks.
    pub decoders: usize,
}

/// How [`plan`] divides the copy.
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions {
    /// Connections copying in parallel.
    pub workers: usize,
    /// The size, in pages, of a table above which it is worth reading in parts (in
    /// `ctid` ranges of this many pages, or decoded on several tasks).
    pub chunk_pages: i64,
    /// Whether the server scans `ctid` ranges efficiently (PostgreSQL 14+).
    pub ctid_ranges: bool,
    /// The server's `shared_buffers`, in pages (0 when unknown).
    pub shared_buffer_pages: i64,
}

/// Splits the tables into work items: leaf partitions for partitioned tables, and with
/// several workers, for a table larger than `chunk_pages`:
/// - `ctid` ranges of about `chunk_pages` pages, read by several workers at once, when the
///   table is at most a quarter of `shared_buffers` (and the server is 14 or later);
/// - otherwise one COPY whose rows several tasks decode (the workers' number, shared
///   among such tables).
///
/// Sizes are the statistics' (`relpages`), as of the last VACUUM or ANALYZE.
///
/// A quarter of `shared_buffers` is where PostgreSQL's own sequential scans switch to a
/// small ring of buffers of their own (`initscan` in heapam.c). A `ctid` range scan never
/// does, so reading a larger table in ranges would cycle all of it through the shared
/// pool: it costs the server more (measured 1.30× one COPY's CPU for pgbench scale 20 at
/// 256MB, benches/README.md) and evicts the pages the server's own queries need.
pub fn plan(tables: &[CatalogTable], options: PlanOptions) -> Vec<WorkItem> {
    let mut items = Vec::new();
    let parallel = options.workers > 1 && options.chunk_pages > 0;
    for (index, table) in tables.iter().enumerate() {
        let whole = |decoders| WorkItem {
            table: index,
            relation: table.schema.name.clone(),
            pages: None,
            decoders,
        };
        if !table.partitions.is_empty() {
            items.extend(table.partitions.iter().map(|p| WorkItem {
                table: index,
                relation: p.clone(),
                pages: None,
                decoders: 1,
            }));
        } else if !parallel || table.pages <= options.chunk_pages {
            items.push(whole(1));
        } else if options.ctid_ranges && table.pages <= options.shared_buffer_pages / 4 {
            let mut start = 0;
            while start < table.pages {
                let end = start + options.chunk_pages;
                // The last range is open-ended: pages added since the statistics were taken
                // are still copied.
                let range_end = if end >= table.pages { i64::MAX } else { end };
                items.push(WorkItem {
                    table: index,
                    relation: table.schema.name.clone(),
                    pages: Some((start, range_end)),
                    decoders: 1,
                });
                start = end;
            }
        } else {
            items.push(whole(options.workers));
        }
    }
    // The workers' decoding share, split among the tables read in one COPY, so that
    // decoding tasks (and the segments queued for them) stay bounded by the workers
    // whatever the number of large tables.
    let single_copies = items.iter().filter(|i| i.decoders > 1).count();
    if single_copies > 1 {
        let share = (options.workers / single_copies).max(1);
        for item in items.iter_mut().filter(|i| i.decoders > 1) {
            item.decoders = share;
        }
    }
    // Largest first so workers finish together.
    items.sort_by_key(|i| std::cmp::Reverse(tables.get(i.table).map_or(0, |t| t.pages)));
    items
}

/// Items per table, to know when a table is complete.
pub fn items_per_table(items: &[WorkItem], tables: usize) -> Vec<usize> {
    let mut counts = vec![0; tables];
    for item in items {
        if let Some(c) = counts.get_mut(item.table) {
            *c += 1;
        }
    }
    counts
}

/// A column of a type without a binary decoder, as its type's output function prints it
/// (the binary form of `text` is its UTF-8 bytes), so the snapshot carries exactly the
/// text the walsender sends for it. Not `column::text`: a cast to text is a function of
/// its own for some types (`inet` adds the netmask, `xml` keeps its declaration), while
/// `format('%s', …)` calls the output function. `num_nulls` keeps NULL apart from a
/// composite whose fields are all NULL (for which `IS NULL` is true).
fn output_function_text(column: &str) -> String {
    format!("CASE WHEN num_nulls({column}) = 0 THEN format('%s', {column}) END")
}

/// The select list that reads every column of `table` in a form the snapshot's row
/// decoding (`copy_rows`) decodes: the column itself where it decodes from binary, its output function's text
/// otherwise.
pub(super) fn columns_for_copy(table: &CatalogTable) -> Vec<String> {
    table
        .schema
        .columns
        .iter()
        .zip(&table.column_types)
        .map(|(c, ty)| {
            let column = quote_identifier(&c.name);
            if decodes_from_binary(ty) {
                column
            } else {
                output_function_text(&column)
            }
        })
        .collect()
}

/// The COPY statement for one item.
pub fn copy_statement(table: &CatalogTable, item: &WorkItem) -> String {
    let columns = columns_for_copy(table);
    let mut select = format!(
        "SELECT {} FROM ONLY {}",
        if columns.is_empty() {
            String::new()
        } else {
            columns.join(", ")
        },
        item.relation
    );
    if let Some((start, end)) = item.pages {
        select.push_str(&format!(" WHERE ctid >= '({start},0)'::tid"));
        if end != i64::MAX {
            select.push_str(&format!(" AND ctid < '({end},0)'::tid"));
        }
    }
    format!("COPY ({select}) TO STDOUT (FORMAT binary)")
}

/// Starts `workers` copy workers over `items`; they report through the returned channel
/// and stop at the first failure or when the receiver is dropped. With `blocks`, rows go
/// out undecoded as [`CopyMessage::Block`]s (for a sink that takes row blocks), else
/// decoded as [`CopyMessage::Rows`].
pub fn spawn_workers(
    connection: ConnectionConfig,
    snapshot_name: String,
    tables: Arc<Vec<CatalogTable>>,
    items: Vec<WorkItem>,
    workers: usize,
    channel_capacity: usize,
    blocks: bool,
) -> (mpsc::Receiver<CopyMessage>, JoinSet<()>) {
    let (tx, rx) = mpsc::channel(channel_capacity.max(1));
    let queue = Arc::new(Mutex::new(VecDeque::from(items)));
    let mut set = JoinSet::new();
    for _ in 0..workers.max(1) {
        let tx = tx.clone();
        let queue = queue.clone();
        let tables = tables.clone();
        let connection = connection.clone();
        let snapshot_name = snapshot_name.clone();
        set.spawn(async move {
            if let Err(e) = worker(&connection, &snapshot_name, &tables, &queue, &tx, blocks).await
            {
                let _ = tx.send(CopyMessage::Failed(e)).await;
            }
        });
    }
    (rx, set)
}

async fn worker(
    connection: &ConnectionConfig,
    snapshot_name: &str,
    tables: &Arc<Vec<CatalogTable>>,
    queue: &Mutex<VecDeque<WorkItem>>,
    tx: &mpsc::Sender<CopyMessage>,
    blocks: bool,
) -> Result<(), Error> {
    let mut session = SqlSession::connect(connection).await?;
    session
        .simple_query_in(
            &format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '{}'",
                snapshot_name.replace('\'', "''")
            ),
            "cannot import the slot's exported snapshot",
        )
        .await
        .map_err(|error| {
            if error.server_error().is_some_and(|s| s.code == "22023") {
                // The exporting session ended before this worker imported its snapshot
                // ("invalid snapshot identifier", invalid_parameter_value): the snapshot
                // is taken again.
                Error::transient(
                    "the session that exported the snapshot ended before every copy worker imported it",
                )
                .with_source(error)
            } else {
                error
            }
        })?;
    loop {
        let item = match queue.lock() {
            Ok(mut q) => q.pop_front(),
            Err(_) => None,
        };
        let Some(item) = item else {
            break;
        };
        let Some(table) = tables.get(item.table) else {
            continue;
        };
        let rows = if blocks {
            copy_item_in_blocks(&mut session, table, &item, tx).await?
        } else if item.decoders > 1 {
            copy_item_in_segments(&mut session, tables, table, &item, tx).await?
        } else {
            copy_item(&mut session, table, &item, tx).await?
        };
        if tx
            .send(CopyMessage::ItemDone {
                table: item.table,
                rows,
            })
            .await
            .is_err()
        {
            return Ok(());
        }
    }
    session
        .simple_query_in("COMMIT", "cannot end the snapshot transaction")
        .await?;
    Ok(())
}

/// Starts the COPY of one work item on `session`; returns it and the context its errors
/// name.
async fn begin_item_copy(
    session: &mut SqlSession,
    table: &CatalogTable,
    item: &WorkItem,
) -> Result<(CopyOut, String), Error> {
    let context = format!("COPY of {} failed", item.relation);
    let copy = session
        .begin_copy_out(None, &copy_statement(table, item), None, &context)
        .await?;
    Ok((copy, context))
}

/// Copies one work item on `session`, sending its rows on `tx` in messages of
/// [`ROWS_PER_MESSAGE`] (a full channel holds the read back). Returns the rows copied
/// (fewer when the receiver is gone).
async fn copy_item(
    session: &mut SqlSession,
    table: &CatalogTable,
    item: &WorkItem,
    tx: &mpsc::Sender<CopyMessage>,
) -> Result<u64, Error> {
    let (mut copy, context) = begin_item_copy(session, table, item).await?;
    let mut decoder = CopyBinaryDecoder::new(Some(table.column_types.len()));
    let mut blocks = ByteBlocks::new();
    let mut rows = Vec::with_capacity(ROWS_PER_MESSAGE);
    let mut full = Vec::new();
    let mut count = 0u64;
    loop {
        let more = session
            .copy_data(&mut copy, |data| {
                decode_rows(&mut decoder, table, &context, &mut blocks, data, |row| {
                    rows.push(row);
                    count += 1;
                    if rows.len() >= ROWS_PER_MESSAGE {
                        full.push(std::mem::replace(
                            &mut rows,
                            Vec::with_capacity(ROWS_PER_MESSAGE),
                        ));
                    }
                })
            })
            .await?;
        // What one read brought goes on before the next read: a full channel holds the
        // COPY back (the server waits on its socket), so memory stays bounded.
        for batch in full.drain(..) {
            let sent = tx
                .send(CopyMessage::Rows {
                    table: item.table,
                    rows: batch,
                })
                .await;
            if sent.is_err() {
                // Nobody takes the rows any more: the session is dropped mid-COPY.
                return Ok(count);
            }
        }
        if !more {
            break;
        }
    }
    check_ended(&decoder, &context)?;
    if !rows.is_empty() {
        let _ = tx
            .send(CopyMessage::Rows {
                table: item.table,
                rows,
            })
            .await;
    }
    Ok(count)
}

/// Copies one work item on `session` as [`copy_item`] does, but only cuts the data into
/// segments of whole rows here, for `item.decoders` decoder tasks (see [`DecoderPool`]);
/// each segment is one message of rows. Returns the rows copied.
async fn copy_item_in_segments(
    session: &mut SqlSession,
    tables: &Arc<Vec<CatalogTable>>,
    table: &CatalogTable,
    item: &WorkItem,
    tx: &mpsc::Sender<CopyMessage>,
) -> Result<u64, Error> {
    let (mut copy, context) = begin_item_copy(session, table, item).await?;
    let mut pool = DecoderPool::start(item.decoders, tables, item.table, &context, tx);
    let mut reader = GroupedCopy::new(table.column_types.len(), Segment::default());
    while let Some(segments) = reader.next(session, &mut copy, &context).await? {
        for segment in segments {
            if !pool.send(segment).await {
                // The decoders stopped: their error, or nobody takes the rows any more
                // (the session is dropped mid-COPY); `finish` says which.
                return pool.finish().await;
            }
        }
    }
    pool.finish().await
}

/// Copies one work item on `session` as [`copy_item`] does, but leaves the rows
/// undecoded: they go out in blocks of whole rows with the table's decoder, for a sink
/// that takes row blocks and reads most fields straight from their bytes. Returns the
/// rows copied (fewer when the receiver is gone).
async fn copy_item_in_blocks(
    session: &mut SqlSession,
    table: &CatalogTable,
    item: &WorkItem,
    tx: &mpsc::Sender<CopyMessage>,
) -> Result<u64, Error> {
    let (mut copy, context) = begin_item_copy(session, table, item).await?;
    let blocks = BlockBuilder::new(CopyFieldDecoder::for_table(table), ROWS_PER_MESSAGE);
    let mut reader = GroupedCopy::new(table.column_types.len(), blocks);
    let mut count = 0u64;
    while let Some(blocks) = reader.next(session, &mut copy, &context).await? {
        for rows in blocks {
            count += rows.len() as u64;
            let message = CopyMessage::Block {
                table: item.table,
                rows,
            };
            if tx.send(message).await.is_err() {
                // Nobody takes the rows any more: the session is dropped mid-COPY.
                return Ok(count);
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cdc_core::{ReplicaIdentity, TableSchema};

    fn table(name: &str, pages: i64, partitions: &[&str]) -> CatalogTable {
        CatalogTable {
            schema: Arc::new(TableSchema {
                name: TableName::new("public", name),
                relation_id: 1,
                columns: Vec::new(),
                replica_identity: ReplicaIdentity::Default,
                primary_key: Vec::new(),
            }),
            column_types: Vec::new(),
            estimated_rows: 0,
            pages,
            partitions: partitions
                .iter()
                .map(|p| TableName::new("public", *p))
                .collect(),
            key_collations: Vec::new(),
            key_collation_names: Vec::new(),
        }
    }

    /// An item as (table, relation, pages, decoders).
    type Planned = (usize, String, Option<(i64, i64)>, usize);

    fn plan_of(tables: &[CatalogTable], options: PlanOptions) -> Vec<Planned> {
        plan(tables, options)
            .into_iter()
            .map(|i| (i.table, i.relation.name.clone(), i.pages, i.decoders))
            .collect()
    }

    const TWO_WORKERS: PlanOptions = PlanOptions {
        workers: 2,
        chunk_pages: 100,
        ctid_ranges: true,
        // A quarter is 250 pages.
        shared_buffer_pages: 1000,
    };

    #[test]
    fn a_large_table_within_a_quarter_of_shared_buffers_is_read_in_ctid_ranges() {
        let got = plan_of(&[table("t", 250, &[])], TWO_WORKERS);
        assert_eq!(
            got,
            vec![
                (0, "t".into(), Some((0, 100)), 1),
                (0, "t".into(), Some((100, 200)), 1),
                (0, "t".into(), Some((200, i64::MAX)), 1),
            ]
        );
    }

    #[test]
    fn a_table_over_a_quarter_of_shared_buffers_is_one_copy_decoded_by_every_worker() {
        let got = plan_of(&[table("t", 251, &[])], TWO_WORKERS);
        assert_eq!(got, vec![(0, "t".into(), None, 2)]);
        // Also where shared_buffers is unknown, or ranges are not scanned efficiently.
        for options in [
            PlanOptions {
                shared_buffer_pages: 0,
                ..TWO_WORKERS
            },
            PlanOptions {
                ctid_ranges: false,
                ..TWO_WORKERS
            },
        ] {
            assert_eq!(
                plan_of(&[table("t", 120, &[])], options),
                vec![(0, "t".into(), None, 2)]
            );
        }
    }

    #[test]
    fn tables_read_in_one_copy_share_the_workers_decoding() {
        let four = PlanOptions {
            workers: 4,
            ..TWO_WORKERS
        };
        let got = plan_of(&[table("a", 300, &[]), table("b", 400, &[])], four);
        assert_eq!(
            got,
            vec![(1, "b".into(), None, 2), (0, "a".into(), None, 2)]
        );
        let three = [
            table("a", 300, &[]),
            table("b", 400, &[]),
            table("c", 500, &[]),
        ];
        assert!(plan_of(&three, TWO_WORKERS).iter().all(|i| i.3 == 1));
    }

    #[test]
    fn small_tables_one_worker_and_partitions_are_whole_items_decoded_by_their_reader() {
        let tables = [
            table("small", 100, &[]),
            table("parted", 5000, &["p1", "p2"]),
        ];
        let got = plan_of(&tables, TWO_WORKERS);
        assert_eq!(
            got,
            vec![
                (1, "p1".into(), None, 1),
                (1, "p2".into(), None, 1),
                (0, "small".into(), None, 1),
            ]
        );
        let one = PlanOptions {
            workers: 1,
            ..TWO_WORKERS
        };
        assert_eq!(
            plan_of(&[table("big", 5000, &[])], one),
            vec![(0, "big".into(), None, 1)]
        );
    }
}
