//! The primary keys of backfilled tables: where they sit in a row, how they compare (as
//! the server's btree orders them), and their text form in queries and tokens.

use cdc_core::{Error, Result};
use cdc_pgoutput::backfill::key_order::{KeyColumnOrder, KeyOrder};

use crate::catalog::{CatalogTable, KeyCollationInfo};

/// Positions of `table`'s primary key columns in its rows; none for a table without a
/// primary key (read whole under one snapshot: `crate::snapshot::whole_table`).
pub(super) fn key_columns(table: &CatalogTable) -> Result<Vec<usize>> {
    table
        .schema
        .primary_key
        .iter()
        .map(|name| {
            table.schema.column_index(name).ok_or_else(|| {
                Error::protocol(format!(
                    "primary key column {name:?} of {} is not among its columns",
                    table.schema.name
                ))
            })
        })
        .collect()
}

/// How `table`'s keys compare: as Postgres's btree orders them where pgcdc reproduces
/// that order, else by the server ([`KeyOrder::by_server`]: the merge has it compare
/// streamed keys with its boundaries, in batches).
pub(super) fn key_order(table: &CatalogTable) -> Result<KeyOrder> {
    let columns = key_columns(table)?;
    let mut orders = Vec::with_capacity(columns.len());
    for (position, &index) in columns.iter().enumerate() {
        let column = table.schema.columns.get(index);
        let oid = column.map_or(0, |c| c.column_type.oid);
        let collation = table
            .key_collations
            .get(position)
            .cloned()
            .unwrap_or(KeyCollationInfo::NotCollatable);
        match KeyColumnOrder::for_column(oid, collation.as_key_collation()) {
            Ok(order) => orders.push(order),
            Err(why) => {
                tracing::info!(
                    table = %table.schema.name,
                    column = column.map_or("?", |c| c.name.as_str()),
                    reason = %why,
                    "the online snapshot has the server compare this table's keys"
                );
                return Ok(KeyOrder::by_server());
            }
        }
    }
    Ok(KeyOrder::new(orders))
}
