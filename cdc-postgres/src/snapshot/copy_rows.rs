//! Rows of a binary COPY: decoding them into rows of a configured table (each column by
//! its type's binary decoder, or from its output function's text where it has none; see
//! `copy::columns_for_copy`), and the messages the consistent snapshot's copy workers
//! hand them on in.

use std::cell::RefCell;

use cdc_core::{Error, Row, Value};
use cdc_pgoutput::protocol::{ByteBlocks, BytesView};
use cdc_pgoutput::types::{self, TypeInfo};

use super::copy_binary::{CopyBinaryDecoder, FieldSpan, field};
use crate::catalog::{CatalogTable, decodes_from_binary};

/// Rows sent to the consumer per message.
pub(super) const ROWS_PER_MESSAGE: usize = 512;

/// What the copy workers report.
#[derive(Debug)]
pub enum CopyMessage {
    /// Rows of configured table `table`.
    Rows {
        /// Index of the configured table.
        table: usize,
        /// The rows, in the table's column order.
        rows: Vec<Row>,
    },
    /// Rows of configured table `table` left undecoded, for a sink that takes blocks.
    Block {
        /// Index of the configured table.
        table: usize,
        /// The rows, in the table's column order.
        rows: cdc_core::RowBlock,
    },
    /// A work item is complete.
    ItemDone {
        /// Index of the configured table.
        table: usize,
        /// Rows the item copied.
        rows: u64,
    },
    /// A worker failed; the snapshot cannot complete.
    Failed(Error),
}

/// Decodes the rows `data` completes (with what `decoder` kept of earlier data) as rows
/// of `table`, handing each to `take`; errors name `context`. Rows that lie whole in
/// `data` are read in place. Values that keep bytes (text, `bytea`, JSON, …) get their
/// copies from `blocks`.
pub(super) fn decode_rows(
    decoder: &mut CopyBinaryDecoder,
    table: &CatalogTable,
    context: &str,
    blocks: &mut ByteBlocks,
    data: &[u8],
    mut take: impl FnMut(Row),
) -> Result<(), Error> {
    decoder.decode(
        data,
        |bytes, spans| {
            take(decode_fields(
                table,
                &table.column_types,
                bytes,
                spans,
                blocks,
            )?);
            Ok(())
        },
        |e| Error::protocol(format!("{context}: {e}")),
    )
}

/// The next complete row of `decoder` decoded as a row of `table` (`Ok(None)`: more bytes
/// are needed, or the data ended); errors name `context`. Values that keep bytes (text,
/// `bytea`, JSON, …) get their copies from `blocks`.
pub(super) fn next_decoded_row(
    decoder: &mut CopyBinaryDecoder,
    table: &CatalogTable,
    context: &str,
    blocks: &mut ByteBlocks,
) -> Result<Option<Row>, Error> {
    decoder
        .next_row_with(|bytes, spans| {
            decode_fields(table, &table.column_types, bytes, spans, blocks)
        })
        .map_err(|e| Error::protocol(format!("{context}: {e}")))?
        .transpose()
}

/// Fails unless `decoder` saw the COPY data's trailer and nothing after it (data cut
/// short, or garbage behind it); errors name `context`.
pub(super) fn check_ended(decoder: &CopyBinaryDecoder, context: &str) -> Result<(), Error> {
    if !decoder.is_done() || decoder.has_pending_bytes() {
        return Err(Error::protocol(format!(
            "{context}: the COPY data ended without its trailer"
        )));
    }
    Ok(())
}

/// One COPY row (as [`columns_for_copy`] selected it; its bytes and field spans, see
/// [`CopyBinaryDecoder::next_row_with`]) as a row of `table`.
fn decode_fields(
    table: &CatalogTable,
    types: &[TypeInfo],
    row_bytes: &[u8],
    spans: &[Option<FieldSpan>],
    blocks: &mut ByteBlocks,
) -> Result<Row, Error> {
    // Lent to the views for this row only: a `RefCell` kept in a reader (the whole-table
    // read lives in the source) would make the source not `Sync`. Moving the blocks in
    // and out costs nothing.
    let cell = RefCell::new(std::mem::take(blocks));
    let row = decode_fields_into(table, types, row_bytes, spans, &cell);
    *blocks = cell.into_inner();
    row
}

fn decode_fields_into(
    table: &CatalogTable,
    types: &[TypeInfo],
    row_bytes: &[u8],
    spans: &[Option<FieldSpan>],
    blocks: &RefCell<ByteBlocks>,
) -> Result<Row, Error> {
    // Not shared with the receive buffer (see `BytesView::copied`); kept bytes are copied
    // into shared blocks (see `ByteBlocks`).
    decode_fields_with(table, types, spans, |span| {
        Some(BytesView::copied_into(field(row_bytes, span), blocks))
    })
}

/// One COPY row as a row of `table`, each field's bytes as `view` gives them (`None`: the
/// span lies outside the bytes, a defect of the caller, reported as an error).
#[inline(always)]
pub(super) fn decode_fields_with<'a>(
    table: &CatalogTable,
    types: &[TypeInfo],
    spans: &[Option<FieldSpan>],
    view: impl Fn(FieldSpan) -> Option<BytesView<'a>>,
) -> Result<Row, Error> {
    let mut row = Vec::with_capacity(spans.len());
    for (index, (span, ty)) in spans.iter().zip(types).enumerate() {
        row.push(match span {
            None => Value::Null,
            Some(span) => {
                let Some(data) = view(*span) else {
                    return Err(Error::protocol(format!(
                        "internal: a field of a snapshot row of {} lies outside the bytes read",
                        table.schema.name
                    )));
                };
                if decodes_from_binary(ty) {
                    types::decode_binary_view(ty, data)
                } else {
                    types::decode_text_view(ty, data)
                }
                .map_err(|e| {
                    let column = table
                        .schema
                        .columns
                        .get(index)
                        .map_or("?", |c| c.name.as_str());
                    Error::protocol(format!(
                        "cannot decode column {column:?} of table {} in the snapshot: {e}",
                        table.schema.name
                    ))
                    .with_source(e)
                })?
            }
        });
    }
    Ok(row)
}
