//! pgoutput tuple data → a row of `Value`s, using the relation's column types.

use cdc_core::{Error, Position, Row, SchemaRef, Value};

use super::relations::CachedRelation;
use crate::protocol::pgoutput::{ColumnRef, TupleRef};
use crate::types;

/// Decodes every column of `tuple`. A column count that differs from the relation's, or a
/// value its type cannot decode, is a `Protocol` error naming table, column and position.
pub(crate) fn decode_row(
    schema: &SchemaRef,
    rel: &CachedRelation,
    tuple: &TupleRef<'_>,
    position: Position,
) -> Result<Row, Error> {
    if tuple.len() != rel.column_types.len() {
        return Err(Error::protocol(format!(
            "a row of table {} at {position} has {} columns, but its Relation message declared {}",
            schema.name,
            tuple.len(),
            rel.column_types.len()
        )));
    }
    let mut row = Vec::with_capacity(tuple.len());
    for (index, (column, ty)) in tuple.columns().zip(rel.column_types.iter()).enumerate() {
        let value = match column {
            ColumnRef::Null => Ok(Value::Null),
            ColumnRef::UnchangedToast => Ok(Value::Unchanged),
            ColumnRef::Text(data) => types::decode_text_view(ty, data),
            ColumnRef::Binary(data) => types::decode_binary_view(ty, data),
        };
        let value = match value {
            Ok(v) => v,
            Err(e) => {
                let column_name = schema.columns.get(index).map_or("?", |c| c.name.as_str());
                // The typed error stays reachable (`source()`, downcast to
                // `TypeDecodeError`) for an engine that matches on it.
                return Err(Error::protocol(format!(
                    "cannot decode column {column_name:?} of table {} at {position}: {e}",
                    schema.name
                ))
                .with_source(e));
            }
        };
        row.push(value);
    }
    Ok(row)
}
