//! The simulated sink: applies every batch to a strict multiset model of each table,
//! commits with its resume token when it chooses, and loses everything uncommitted when it
//! crashes.
//!
//! Strict: an insert of a key the table holds, an update or delete of a row it lacks, or a
//! change to a table it does not know is a failure at once — a duplicated or lost change
//! shows where it happens, not only in the final contents.

use std::collections::BTreeMap;

use cdc_core::{BackfillProgress, ChangeBatch, EventKind, Lsn, OldRow, Position, Value};

use super::database::{TABLES, TableDef, Values};

/// Per table: each row's identity, its values, and how many rows share them (only a
/// table without a key can hold the same row twice).
pub(super) type Contents = Vec<BTreeMap<Values, (Values, usize)>>;

/// What a sink's commit records with its data: how far the stream is covered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Token {
    pub position: Option<Position>,
    pub commit_end: Option<Lsn>,
    /// As `ResumeToken::complete_end`.
    pub complete_end: Option<Lsn>,
    /// The online snapshot's progress, as `PgSource` writes it into its tokens.
    pub backfill: Option<BackfillProgress>,
}

/// The sink.
#[derive(Debug)]
pub(super) struct Sink {
    pub durable: Contents,
    pub durable_token: Token,
    working: Contents,
    working_token: Token,
}

impl Sink {
    /// An empty sink.
    pub(super) fn new() -> Self {
        let empty: Contents = vec![BTreeMap::new(); TABLES.len()];
        Sink {
            durable: empty.clone(),
            durable_token: Token::default(),
            working: empty,
            working_token: Token::default(),
        }
    }

    /// Whether everything applied is committed.
    pub(super) fn committed(&self) -> bool {
        self.working_token == self.durable_token && self.working == self.durable
    }

    /// Commits what was applied: `Some` with the position the pipeline confirms.
    pub(super) fn commit(&mut self) -> Option<Lsn> {
        self.durable.clone_from(&self.working);
        self.durable_token.clone_from(&self.working_token);
        self.durable_token.commit_end
    }

    /// Crashes: everything not committed is gone.
    pub(super) fn crash(&mut self) {
        self.working.clone_from(&self.durable);
        self.working_token.clone_from(&self.durable_token);
    }

    /// Applies `batch`, which the source's token after it covers as `token`.
    pub(super) fn apply(&mut self, batch: &ChangeBatch, token: Token) -> Result<(), String> {
        for event in &batch.events {
            let at = event.position;
            match &event.kind {
                EventKind::Begin(_) | EventKind::Commit(_) => {}
                EventKind::Insert { table, new } => {
                    let (index, def) = table_of(&table.name.name)?;
                    self.insert(index, &def, values(new)?, at)?;
                }
                EventKind::Update { table, old, new } => {
                    let (index, def) = table_of(&table.name.name)?;
                    let new = values(new)?;
                    let old_identity = match old {
                        Some(old) => old_identity(&def, old)?,
                        None if def.key.is_empty() => {
                            return Err(format!(
                                "update of {} at {at:?} without its old row",
                                def.name
                            ));
                        }
                        None => def.identity(&new),
                    };
                    self.remove(index, &def, &old_identity, at)?;
                    self.insert(index, &def, new, at)?;
                }
                EventKind::Delete { table, old } => {
                    let (index, def) = table_of(&table.name.name)?;
                    let Some(old) = old else {
                        return Err(format!(
                            "delete from {} at {at:?} without its old row",
                            def.name
                        ));
                    };
                    let identity = old_identity(&def, old)?;
                    self.remove(index, &def, &identity, at)?;
                }
                EventKind::Truncate { tables, .. } => {
                    for table in tables {
                        let (index, _) = table_of(&table.name.name)?;
                        if let Some(rows) = self.working.get_mut(index) {
                            rows.clear();
                        }
                    }
                }
                // The online snapshot's progress markers.
                EventKind::Snapshot(_) => {}
                other => return Err(format!("unexpected event at {at:?}: {other:?}")),
            }
        }
        self.working_token = token;
        Ok(())
    }

    fn insert(
        &mut self,
        index: usize,
        def: &TableDef,
        row: Values,
        at: Position,
    ) -> Result<(), String> {
        let Some(rows) = self.working.get_mut(index) else {
            return Err(format!("no table {index}"));
        };
        let entry = rows
            .entry(def.identity(&row))
            .or_insert_with(|| (row.clone(), 0));
        if !def.key.is_empty() && entry.1 > 0 {
            return Err(format!(
                "second insert of {:?} into {} at {at:?} (the sink holds {:?})",
                def.identity(&row),
                def.name,
                entry.0
            ));
        }
        entry.0 = row;
        entry.1 += 1;
        Ok(())
    }

    fn remove(
        &mut self,
        index: usize,
        def: &TableDef,
        identity: &Values,
        at: Position,
    ) -> Result<(), String> {
        let Some(rows) = self.working.get_mut(index) else {
            return Err(format!("no table {index}"));
        };
        match rows.get_mut(identity) {
            Some(entry) if entry.1 > 1 => entry.1 -= 1,
            Some(_) => {
                rows.remove(identity);
            }
            None => {
                return Err(format!(
                    "change of {identity:?} in {} at {at:?}, which the sink does not hold",
                    def.name
                ));
            }
        }
        Ok(())
    }
}

fn table_of(name: &str) -> Result<(usize, TableDef), String> {
    TABLES
        .iter()
        .enumerate()
        .find(|(_, t)| t.name == name)
        .map(|(i, t)| (i, *t))
        .ok_or_else(|| format!("an event of unknown table {name}"))
}

/// A decoded row in the model's text form, as PostgreSQL's output functions write it.
fn values(row: &[Value]) -> Result<Values, String> {
    row.iter()
        .map(|v| match v {
            Value::Null => Ok(None),
            Value::Int4(i) => Ok(Some(i.to_string())),
            Value::Int8(i) => Ok(Some(i.to_string())),
            Value::Text(t) => Ok(Some(t.as_str().to_owned())),
            other => Err(format!("unexpected value {other:?}")),
        })
        .collect()
}

/// The identity an old row names: its key columns, or the whole row without a key.
fn old_identity(def: &TableDef, old: &OldRow) -> Result<Values, String> {
    Ok(def.identity(&values(&old.values)?))
}
