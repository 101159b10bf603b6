//! Snapshot rows in blocks (see [`cdc_core::RowBlock`]): a COPY segment's bytes and field
//! spans, handed on undecoded to a sink that takes blocks, with the decoder that reads
//! them exactly as the row-by-row path does (`copy_rows::decode_fields_with`).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use cdc_core::{Error, FieldDecoder, FieldLayout, FieldSpan, RowBlock, TableName, Value};
use cdc_pgoutput::protocol::BytesView;
use cdc_pgoutput::types::{self, ScalarKind, TypeInfo, TypeKind};

use super::copy_binary::FieldSpan as CopyFieldSpan;
use super::row_group::RowGroup;
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

/// Rows of one COPY gathered into a block: their bytes and each field's span within
/// them, made as the reader's framing finds the rows (one pass, no second walk).
pub(super) struct BlockBuilder {
    decoder: Arc<CopyFieldDecoder>,
    bytes: Vec<u8>,
    spans: Vec<FieldSpan>,
    rows: usize,
}

impl BlockBuilder {
    /// An empty builder of blocks read by `decoder`, with room for about `rows` rows.
    pub(super) fn new(decoder: Arc<CopyFieldDecoder>, rows: usize) -> Self {
        let width = decoder.columns.len();
        BlockBuilder {
            decoder,
            bytes: Vec::with_capacity(64 * 1024),
            spans: Vec::with_capacity(rows.saturating_mul(width)),
            rows: 0,
        }
    }
}

impl RowGroup for BlockBuilder {
    type Out = RowBlock;

    /// Fails when the block would pass 4 GiB (blocks are cut at a megabyte; one row
    /// cannot).
    fn push(&mut self, row: &[u8], fields: &[Option<CopyFieldSpan>]) -> Result<(), Error> {
        let base = self.bytes.len();
        let end = base
            .checked_add(row.len())
            .filter(|&end| end < u32::MAX as usize);
        let Some(_) = end else {
            return Err(Error::protocol(
                "internal: a snapshot row block would pass 4 GiB",
            ));
        };
        self.bytes.extend_from_slice(row);
        for field in fields {
            // Within the row (the framing found them there), so below `end`: the casts
            // keep every value.
            self.spans.push(match field {
                None => FieldSpan::NULL,
                Some(span) => {
                    let range = span.at(base);
                    FieldSpan::from_u32(range.start as u32, range.len() as u32).ok_or_else(
                        || Error::protocol("internal: a snapshot field's span passes 4 GiB"),
                    )?
                }
            });
        }
        self.rows += 1;
        Ok(())
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn size(&self) -> usize {
        self.bytes.len()
    }

    fn take(&mut self) -> Result<RowBlock, Error> {
        let (held, fields) = (self.bytes.len(), self.spans.len());
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(held + held / 8));
        let spans = std::mem::replace(&mut self.spans, Vec::with_capacity(fields));
        self.rows = 0;
        let width = self.decoder.columns.len();
        RowBlock::new(Bytes::from(bytes), spans, width, self.decoder.clone())
    }
}
