//! One COPY decoded on several tasks: the reader only cuts the data into segments of whole
//! rows (a walk over the field lengths and a copy), and decoder tasks turn the segments
//! into rows, whichever is free taking the next.
//!
//! For a table too large to read in `ctid` ranges without cost (see [`super::copy::plan`]):
//! one plain COPY is a sequential scan through PostgreSQL's small bulk-read ring, while
//! range scans go through the shared buffer pool and evict what it held; decoding on
//! several tasks keeps the client's parallelism without the second scan.

use std::sync::Arc;

use bytes::Bytes;
use cdc_core::{Error, Row};
use cdc_pgoutput::protocol::BytesView;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;

use super::copy_binary::CopyBinaryDecoder;
use super::copy_rows::{CopyMessage, ROWS_PER_MESSAGE, decode_fields_with};
use crate::catalog::CatalogTable;

/// Segments waiting per decoder: enough that a decoder finishing one finds the next, few
/// enough that memory stays bounded (a segment is one message's worth of rows).
const QUEUED_PER_DECODER: usize = 2;

/// Decoder tasks for the rows of one work item.
pub(super) struct DecoderPool {
    segments: Option<mpsc::Sender<Vec<u8>>>,
    decoders: JoinSet<Result<u64, Error>>,
}

impl DecoderPool {
    /// Starts `decoders` tasks decoding segments of rows of `tables[table]`, sending them
    /// on `tx` as rows of configured table `table`; errors name `context`.
    pub(super) fn start(
        decoders: usize,
        tables: &Arc<Vec<CatalogTable>>,
        table: usize,
        context: &str,
        tx: &mpsc::Sender<CopyMessage>,
    ) -> Self {
        let decoders = decoders.max(1);
        let (segments, queue) = mpsc::channel::<Vec<u8>>(decoders * QUEUED_PER_DECODER);
        let queue = Arc::new(Mutex::new(queue));
        let mut set = JoinSet::new();
        for _ in 0..decoders {
            let queue = queue.clone();
            let tables = tables.clone();
            let context = context.to_owned();
            let tx = tx.clone();
            set.spawn(async move { decode_segments(&queue, &tables, table, &context, &tx).await });
        }
        DecoderPool {
            segments: Some(segments),
            decoders: set,
        }
    }

    /// Queues a segment of whole rows (waits while the decoders are behind). `false`: the
    /// decoders stopped (an error, or nobody takes their rows any more); [`Self::finish`]
    /// says which.
    pub(super) async fn send(&mut self, segment: Vec<u8>) -> bool {
        match &self.segments {
            Some(segments) => segments.send(segment).await.is_ok(),
            None => false,
        }
    }

    /// Waits until every queued segment is decoded and its rows sent on; returns the rows
    /// decoded, or the first decoder's error.
    pub(super) async fn finish(mut self) -> Result<u64, Error> {
        // The decoders end once the queue is empty and closed.
        self.segments = None;
        let mut rows = 0;
        while let Some(joined) = self.decoders.join_next().await {
            let decoded = joined
                .map_err(|e| {
                    Error::protocol(format!("a snapshot decoder task ended abnormally: {e}"))
                })
                .and_then(|decoded| decoded);
            match decoded {
                Ok(decoded) => rows += decoded,
                Err(e) => {
                    // No rows of the item go on once its failure is reported: the other
                    // decoders are stopped and waited for first.
                    self.decoders.abort_all();
                    while self.decoders.join_next().await.is_some() {}
                    return Err(e);
                }
            }
        }
        Ok(rows)
    }
}

/// Decodes segments from `queue` until it closes; returns the rows decoded (so far, when
/// the receiver of `tx` is gone).
async fn decode_segments(
    queue: &Mutex<mpsc::Receiver<Vec<u8>>>,
    tables: &[CatalogTable],
    table: usize,
    context: &str,
    tx: &mpsc::Sender<CopyMessage>,
) -> Result<u64, Error> {
    let Some(catalog) = tables.get(table) else {
        return Err(Error::protocol(format!(
            "internal: no configured table {table} to decode rows of"
        )));
    };
    let mut count = 0u64;
    loop {
        // The lock is held only while waiting for the next segment, not while decoding.
        let segment = queue.lock().await.recv().await;
        let Some(segment) = segment else {
            return Ok(count);
        };
        let rows = match decode_segment(catalog, context, segment) {
            Ok(rows) => rows,
            Err(e) => {
                // The reader learns at its next segment that the copy is over.
                queue.lock().await.close();
                return Err(e);
            }
        };
        count += rows.len() as u64;
        if tx.send(CopyMessage::Rows { table, rows }).await.is_err() {
            queue.lock().await.close();
            return Ok(count);
        }
    }
}

/// The rows of a segment of whole rows (see [`CopyBinaryDecoder::segment_rows`]). Values
/// that keep bytes share the segment's storage: the segment is one allocation made for
/// these rows, so no copy is needed, and its reference count is counted up here and
/// down wherever the rows are dropped — by then this task has moved on to another
/// segment, so the two do not contend for one count. A value kept after its row is
/// dropped keeps the whole segment (one message's rows) alive.
fn decode_segment(
    table: &CatalogTable,
    context: &str,
    segment: Vec<u8>,
) -> Result<Vec<Row>, Error> {
    let segment = Bytes::from(segment);
    let mut decoder = CopyBinaryDecoder::rows_only(Some(table.column_types.len()));
    let mut rows = Vec::with_capacity(ROWS_PER_MESSAGE);
    decoder.segment_rows(
        &segment,
        |start, spans| {
            let row = decode_fields_with(table, &table.column_types, spans, |span| {
                BytesView::new(&segment, span.at(start))
            })?;
            rows.push(row);
            Ok(())
        },
        |e| Error::protocol(format!("{context}: {e}")),
    )?;
    Ok(rows)
}
