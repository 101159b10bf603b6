//! The engine's tables: key (the primary key's values as text) → row (column → text).

use std::collections::BTreeMap;

use cdc_core::{EventKind, Row, SnapshotMarker, TableSchema, Value};
use serde::{Deserialize, Serialize};

/// Table name (`schema.table`) → key → column → value (`None` for NULL).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables(pub BTreeMap<String, BTreeMap<String, BTreeMap<String, Option<String>>>>);

fn key(table: &TableSchema, row: &Row) -> String {
    table
        .key_indexes()
        .into_iter()
        .map(|i| row.get(i).and_then(Value::to_pg_text).unwrap_or_default())
        .collect::<Vec<_>>()
        .join(",")
}

impl Tables {
    /// Applies one change. An event kind this engine does not know is an error: it may
    /// carry rows, and skipping it would lose them.
    pub fn apply(&mut self, kind: &EventKind) -> Result<(), String> {
        match kind {
            EventKind::Insert { table, new } | EventKind::Update { table, new, .. } => {
                let rows = self.0.entry(table.name.to_string()).or_default();
                if let EventKind::Update { old: Some(old), .. } = kind {
                    rows.remove(&key(table, &old.values));
                }
                let row = rows.entry(key(table, new)).or_default();
                for (column, value) in table.columns.iter().zip(new) {
                    if !value.is_unchanged() {
                        row.insert(column.name.clone(), value.to_pg_text());
                    }
                }
            }
            EventKind::Delete { table, old } => {
                let old = old.as_ref().ok_or("a delete without its old row")?;
                if let Some(rows) = self.0.get_mut(&table.name.to_string()) {
                    rows.remove(&key(table, &old.values));
                }
            }
            EventKind::Truncate { tables, .. } => {
                for table in tables {
                    self.0.remove(&table.name.to_string());
                }
            }
            // Taken again before streaming began: what is held came from the abandoned copy.
            EventKind::Snapshot(SnapshotMarker::Restarted) => self.0.clear(),
            EventKind::Begin(_)
            | EventKind::Commit(_)
            | EventKind::SchemaChange { .. }
            | EventKind::Message { .. }
            | EventKind::Snapshot(_) => {}
            _ => return Err(format!("an event kind this engine does not know: {kind:?}")),
        }
        Ok(())
    }
}
