//! pgoutput tuple data → a row of `Value`s, using the relation's column types.

use cdc_core::{Error, Position, Row, SchemaRef, Value};

use super::CachedRelation;
use crate::protocol::pgoutput::{ColumnValue, TupleData};
use crate::types;

/// Decodes every column of `tuple`. A column count that differs from the relation's, or a
/// value its type cannot decode, is a `Protocol` error naming table, column and position.
pub(crate) fn decode_row(
    schema: &SchemaRef,
    rel: &CachedRelation,
    tuple: &TupleData,
    position: Position,
) -> Result<Row, Error> {
    if tuple.columns.len() != rel.column_types.len() {
        return Err(Error::protocol(format!(
            "a row of table {} at {position} has {} columns, but its Relation message declared {}",
            schema.name,
            tuple.columns.len(),
            rel.column_types.len()
        )));
    }
    let mut row = Vec::with_capacity(tuple.columns.len());
    for (index, (column, ty)) in tuple
        .columns
        .iter()
        .zip(rel.column_types.iter())
        .enumerate()
    {
        let value = match column {
            ColumnValue::Null => Ok(Value::Null),
            ColumnValue::UnchangedToast => Ok(Value::Unchanged),
            ColumnValue::Text(data) => types::decode_text(ty, data),
            ColumnValue::Binary(data) => types::decode_binary(ty, data),
        };
        let value = match value {
            Ok(v) => v,
            Err(e) => {
                let column_name = schema.columns.get(index).map_or("?", |c| c.name.as_str());
                return Err(Error::protocol(format!(
                    "cannot decode column {column_name:?} of table {} at {position}: {e}",
                    schema.name
                )));
            }
        };
        row.push(value);
    }
    Ok(row)
}
