//! One COPY decoded on several tasks: the reader only cuts the data into segments of whole
//! rows (a walk over the field lengths, and a copy of the rows and of where their fields
//! lie), and decoder tasks turn the segments into rows, whichever is free taking the next.
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

use super::copy_binary::FieldSpan;
use super::copy_rows::{CopyMessage, ROWS_PER_MESSAGE, decode_fields_with};
use super::row_group::RowGroup;
use crate::catalog::CatalogTable;

/// Segments waiting per decoder: enough that a decoder finishing one finds the next, few
/// enough that memory stays bounded (a segment is one message's worth of rows).
const QUEUED_PER_DECODER: usize = 2;

/// Whole rows of one COPY, with where each row and each of its fields lie in them, as the
/// reader's parse found them: the decoding tasks do not parse the rows again.
#[derive(Debug, Default)]
pub(super) struct Segment {
    bytes: Vec<u8>,
    /// Where each row starts in `bytes`.
    rows: Vec<usize>,
    /// Each row's fields in turn (spans within their row; `None`: NULL).
    fields: Vec<Option<FieldSpan>>,
}

impl Segment {
    /// Empty, with room for about as much as `previous` held.
    pub(super) fn like(previous: &Segment) -> Self {
        Segment {
            // The slack stays allocated while the values live: little of it.
            bytes: Vec::with_capacity(previous.bytes.len() + previous.bytes.len() / 8),
            rows: Vec::with_capacity(previous.rows.len()),
            fields: Vec::with_capacity(previous.fields.len()),
        }
    }
}

impl RowGroup for Segment {
    type Out = Segment;

    fn push(&mut self, row: &[u8], spans: &[Option<FieldSpan>]) -> Result<(), Error> {
        self.rows.push(self.bytes.len());
        self.bytes.extend_from_slice(row);
        self.fields.extend_from_slice(spans);
        Ok(())
    }

    fn rows(&self) -> usize {
        self.rows.len()
    }

    /// Bytes held, rows and the spans of their fields.
    fn size(&self) -> usize {
        self.bytes.len() + self.fields.len() * std::mem::size_of::<Option<FieldSpan>>()
    }

    fn take(&mut self) -> Result<Segment, Error> {
        let next = Segment::like(self);
        Ok(std::mem::replace(self, next))
    }
}

/// Decoder tasks for the rows of one work item.
pub(super) struct DecoderPool {
    segments: Option<mpsc::Sender<Segment>>,
    decoders: JoinSet<Result<u64, Error>>,
}

impl DecoderPool {
    /// Starts `decoders` tasks (at most one per core: more would only take turns)
    /// decoding segments of rows of `tables[table]`, sending them on `tx` as rows of
    /// configured table `table`; errors name `context`.
    pub(super) fn start(
        decoders: usize,
        tables: &Arc<Vec<CatalogTable>>,
        table: usize,
        context: &str,
        tx: &mpsc::Sender<CopyMessage>,
    ) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let decoders = decoders.min(cores).max(1);
        let (segments, queue) = mpsc::channel::<Segment>(decoders * QUEUED_PER_DECODER);
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
    pub(super) async fn send(&mut self, segment: Segment) -> bool {
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
    queue: &Mutex<mpsc::Receiver<Segment>>,
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

/// The rows of a segment. Values that keep bytes share the segment's storage: the segment
/// is one allocation made for these rows, so no copy is needed, and its reference count is
/// counted up here and down wherever the rows are dropped — by then this task has moved on
/// to another segment, so the two do not contend for one count. A value kept after its
/// row is dropped keeps the whole segment (one message's rows) alive.
fn decode_segment(
    table: &CatalogTable,
    context: &str,
    segment: Segment,
) -> Result<Vec<Row>, Error> {
    let width = table.column_types.len();
    let Segment {
        bytes,
        rows: starts,
        fields,
    } = segment;
    let bytes = Bytes::from(bytes);
    let mut rows = Vec::with_capacity(starts.len().min(ROWS_PER_MESSAGE));
    for (index, &start) in starts.iter().enumerate() {
        let Some(spans) = fields.get(index * width..(index + 1) * width) else {
            return Err(Error::protocol(format!(
                "internal: {context}: a segment lacks the fields of its row {index}"
            )));
        };
        rows.push(decode_fields_with(
            table,
            &table.column_types,
            spans,
            |span| BytesView::new(&bytes, span.at(start)),
        )?);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::copy_binary::CopyBinaryDecoder;
    use cdc_core::{ColumnSchema, ColumnType, ReplicaIdentity, TableName, TableSchema, Value};
    use cdc_pgoutput::types::TypeInfo;
    use proptest::prelude::*;

    /// `public.t (a bytea, b bytea, c bytea)`.
    fn table() -> CatalogTable {
        let column = |name: &str| ColumnSchema {
            name: name.into(),
            column_type: ColumnType {
                oid: 17,
                modifier: -1,
                name: Some("pg_catalog.bytea".into()),
                definition: Default::default(),
            },
            nullable: true,
            part_of_key: false,
            generated: false,
        };
        CatalogTable {
            schema: Arc::new(TableSchema {
                name: TableName::new("public", "t"),
                relation_id: 1,
                columns: vec![column("a"), column("b"), column("c")],
                replica_identity: ReplicaIdentity::Default,
                primary_key: Vec::new(),
            }),
            column_types: vec![TypeInfo::builtin(17); 3],
            estimated_rows: 0,
            pages: 0,
            partitions: Vec::new(),
            key_collations: Vec::new(),
            key_collation_names: Vec::new(),
        }
    }

    type Fields = Vec<Option<Vec<u8>>>;

    /// Binary COPY data of `rows`, header and trailer included.
    fn copy_data(rows: &[Fields]) -> Vec<u8> {
        let mut out = b"PGCOPY\n\xff\r\n\0".to_vec();
        out.extend_from_slice(&[0; 8]);
        for row in rows {
            out.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for field in row {
                match field {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(f) => {
                        out.extend_from_slice(&(f.len() as i32).to_be_bytes());
                        out.extend_from_slice(f);
                    }
                }
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    proptest! {
        #[test]
        fn segments_cut_by_the_reader_decode_to_the_rows(
            rows in prop::collection::vec(prop::collection::vec(prop::option::of(prop::collection::vec(any::<u8>(), 0..20)), 3), 0..30),
            rows_per_segment in 1usize..6,
            chunk in 1usize..40,
        ) {
            // The reader's parse, fed in arbitrary chunks (rows split across them go
            // through its buffer), cuts the segments.
            let data = copy_data(&rows);
            let mut framer = CopyBinaryDecoder::new(Some(3));
            let mut segments = vec![Segment::default()];
            for piece in data.chunks(chunk) {
                framer
                    .decode(
                        piece,
                        |row, spans| {
                            if segments.last().is_some_and(|s| s.rows() == rows_per_segment) {
                                segments.push(Segment::default());
                            }
                            if let Some(last) = segments.last_mut() {
                                last.push(row, spans)?;
                            }
                            Ok::<(), Error>(())
                        },
                        |e| Error::protocol(e.to_string()),
                    )
                    .unwrap();
            }
            prop_assert!(framer.is_done());
            let table = table();
            let mut got: Vec<Fields> = Vec::new();
            for segment in segments {
                for row in decode_segment(&table, "test", segment).unwrap() {
                    got.push(
                        row.into_iter()
                            .map(|v| match v {
                                Value::Null => None,
                                Value::Bytea(b) => Some(b.to_vec()),
                                other => panic!("not bytea: {other:?}"),
                            })
                            .collect(),
                    );
                }
            }
            prop_assert_eq!(got, rows);
        }
    }

    #[test]
    fn a_segment_without_the_fields_of_a_row_is_an_error_not_a_short_row() {
        let mut segment = Segment::default();
        segment.push(b"\0\0", &[]).unwrap();
        let error = decode_segment(&table(), "COPY of public.t failed", segment).unwrap_err();
        assert!(error.to_string().contains("lacks the fields"), "{error}");
    }
}
