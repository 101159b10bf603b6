//! Snapshot rows in blocks (see [`cdc_core::RowBlock`]): a COPY segment's bytes and field
//! spans, handed on undecoded to a sink that takes blocks, with the decoder that reads
//! them exactly as the row-by-row path does (`copy_rows::decode_fields_with`).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use cdc_core::{Error, FieldDecoder, FieldLayout, FieldSpan, RowBlock, TableName, Value};
use cdc_pgoutput::protocol::BytesView;
use cdc_pgoutput::types::{self, ScalarKind, TypeInfo, TypeKind};

use super::parallel_decode::Segment;
use crate::catalog::{CatalogTable, decodes_from_binary};

/// Reads the COPY fields of one table's rows: each column by its type's binary decoder,
/// or from its output function's text where it has none (as `copy::columns_for_copy`
/// selected them).
pub(crate) struct CopyFieldDecoder {
    table: TableName,
    columns: Vec<Column>,
}

struct Column {
    name: String,
    ty: TypeInfo,
    binary: bool,
    layout: FieldLayout,
}

impl CopyFieldDecoder {
    /// The decoder of `table`'s COPY rows.
    pub(crate) fn for_table(table: &CatalogTable) -> Arc<Self> {
        let columns = table
            .column_types
            .iter()
            .enumerate()
            .map(|(index, ty)| {
                let binary = decodes_from_binary(ty);
                Column {
                    name: table
                        .schema
                        .columns
                        .get(index)
                        .map_or_else(|| "?".to_owned(), |c| c.name.clone()),
                    ty: ty.clone(),
                    binary,
                    layout: layout(ty, binary),
                }
            })
            .collect();
        Arc::new(CopyFieldDecoder {
            table: table.schema.name.clone(),
            columns,
        })
    }
}

/// The layouts `types::decode_binary_view` and `decode_text_view` read exactly so: the
/// integers' send functions (binary only; in text they are digits), and the text types,
/// whose send function and output function both give the text itself.
fn layout(ty: &TypeInfo, binary: bool) -> FieldLayout {
    match (&ty.kind, binary) {
        (TypeKind::Scalar(ScalarKind::Int2), true) => FieldLayout::Int2,
        (TypeKind::Scalar(ScalarKind::Int4), true) => FieldLayout::Int4,
        (TypeKind::Scalar(ScalarKind::Int8), true) => FieldLayout::Int8,
        (TypeKind::Scalar(ScalarKind::Text), _) => FieldLayout::Text,
        _ => FieldLayout::Other,
    }
}

impl FieldDecoder for CopyFieldDecoder {
    fn layout(&self, column: usize) -> FieldLayout {
        self.columns
            .get(column)
            .map_or(FieldLayout::Other, |c| c.layout)
    }

    fn decode(&self, column: usize, data: &Bytes, range: Range<usize>) -> Result<Value, Error> {
        let Some(c) = self.columns.get(column) else {
            return Err(Error::protocol(format!(
                "internal: no column {column} in the snapshot rows of {}",
                self.table
            )));
        };
        let Some(view) = BytesView::new(data, range) else {
            return Err(Error::protocol(format!(
                "internal: a field of a snapshot row of {} lies outside the bytes read",
                self.table
            )));
        };
        if c.binary {
            types::decode_binary_view(&c.ty, view)
        } else {
            types::decode_text_view(&c.ty, view)
        }
        .map_err(|e| {
            Error::protocol(format!(
                "cannot decode column {:?} of table {} in the snapshot: {e}",
                c.name, self.table
            ))
            .with_source(e)
        })
    }
}

impl Segment {
    /// The segment's rows as a block read by `decoder`.
    pub(super) fn into_block(self, decoder: Arc<CopyFieldDecoder>) -> Result<RowBlock, Error> {
        let width = decoder.columns.len();
        let (bytes, starts, fields) = self.into_parts();
        let mut spans = Vec::with_capacity(fields.len());
        for (index, &start) in starts.iter().enumerate() {
            let Some(row) = fields.get(index * width..(index + 1) * width) else {
                return Err(Error::protocol(format!(
                    "internal: a segment of {} lacks the fields of its row {index}",
                    decoder.table
                )));
            };
            for field in row {
                spans.push(match field {
                    None => FieldSpan::NULL,
                    Some(span) => {
                        let range = span.at(start);
                        FieldSpan::new(range.start, range.len()).ok_or_else(|| {
                            Error::protocol(format!(
                                "internal: a segment of {} passed 4 GiB",
                                decoder.table
                            ))
                        })?
                    }
                });
            }
        }
        RowBlock::new(Bytes::from(bytes), spans, width, decoder)
    }
}
