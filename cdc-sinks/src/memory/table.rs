//! One materialized table: rows keyed by the table's key, or a multiset of whole rows for
//! a keyless table; applying inserts, updates (merging unchanged TOAST values), deletes
//! and truncates.

use std::collections::HashMap;

use cdc_core::{OldRow, OldRowKind, Row, SchemaRef, Value};

/// How rows are stored.
#[derive(Clone, Debug)]
enum Rows {
    /// Key values (in key order) → row.
    Keyed(HashMap<Vec<Value>, Row>),
    /// Whole row → multiplicity.
    Bag(HashMap<Row, usize>),
}

/// A table's current rows.
#[derive(Clone, Debug)]
pub(crate) struct MaterializedTable {
    schema: SchemaRef,
    key: Vec<usize>,
    rows: Rows,
}

/// Something that did not fit the table's state (update or delete of a missing row,
/// insert of an existing key, an unmergeable unchanged value), described for tests.
pub(crate) type Anomaly = String;

impl MaterializedTable {
    pub(crate) fn new(schema: SchemaRef) -> Self {
        let key = schema.key_indexes();
        let rows = if key.is_empty() {
            Rows::Bag(HashMap::new())
        } else {
            Rows::Keyed(HashMap::new())
        };
        MaterializedTable { schema, key, rows }
    }

    /// Adopts a new schema, re-keying the rows if the key columns changed.
    pub(crate) fn set_schema(&mut self, schema: SchemaRef) {
        let key = schema.key_indexes();
        let rekey = key != self.key;
        self.schema = schema;
        if rekey {
            let rows = self.all_rows();
            self.key = key;
            self.rows = if self.key.is_empty() {
                Rows::Bag(HashMap::new())
            } else {
                Rows::Keyed(HashMap::new())
            };
            for row in rows {
                let _ = self.insert(row);
            }
        }
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn project(&self, values: &[Value]) -> Vec<Value> {
        self.key
            .iter()
            .map(|&k| values.get(k).cloned().unwrap_or(Value::Null))
            .collect()
    }

    pub(crate) fn insert(&mut self, new: Row) -> Result<(), Anomaly> {
        let mut anomaly = None;
        if new.iter().any(Value::is_unchanged) {
            anomaly = Some(format!(
                "insert into {} carries an unchanged TOAST value",
                self.schema.name
            ));
        }
        match &mut self.rows {
            Rows::Keyed(map) => {
                let key = self
                    .key
                    .iter()
                    .map(|&k| new.get(k).cloned().unwrap_or(Value::Null))
                    .collect();
                if map.insert(key, new).is_some() && anomaly.is_none() {
                    anomaly = Some(format!(
                        "insert into {} of a key that already exists",
                        self.schema.name
                    ));
                }
            }
            Rows::Bag(bag) => *bag.entry(new).or_insert(0) += 1,
        }
        anomaly.map_or(Ok(()), Err)
    }

    /// Applies an update; the new row's unchanged TOAST values are taken from the stored
    /// row (or, failing that, from a full old row).
    pub(crate) fn update(&mut self, old: Option<&OldRow>, new: &Row) -> Result<(), Anomaly> {
        let name = self.schema.name.clone();
        let full_old = old.filter(|o| o.kind == OldRowKind::Full);
        let stored = match &mut self.rows {
            Rows::Keyed(_) => {
                // The row to replace: found by the old key when one was sent, else by the
                // new row's key (which then did not change).
                let lookup = match old {
                    Some(o) => self.project(&o.values),
                    None => self.project(new),
                };
                let lookup = fill_key(lookup, &self.key, new);
                match &mut self.rows {
                    Rows::Keyed(map) => map.remove(&lookup),
                    Rows::Bag(_) => None,
                }
            }
            Rows::Bag(bag) => match full_old {
                Some(o) => take_matching(bag, &o.values),
                None => {
                    return Err(format!(
                        "update of keyless table {name} without a full old row cannot be applied"
                    ));
                }
            },
        };
        let mut anomaly = None;
        if stored.is_none() {
            anomaly = Some(format!("update of a row missing from {name}"));
        }
        let merged: Row = new
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Unchanged => stored
                    .as_ref()
                    .and_then(|s| s.get(i))
                    .or_else(|| full_old.and_then(|o| o.values.get(i)))
                    .cloned()
                    .unwrap_or(Value::Unchanged),
                v => v.clone(),
            })
            .collect();
        if let Err(a) = self.insert(merged) {
            anomaly.get_or_insert(a);
        }
        anomaly.map_or(Ok(()), Err)
    }

    pub(crate) fn delete(&mut self, old: Option<&OldRow>) -> Result<(), Anomaly> {
        let name = self.schema.name.clone();
        let Some(old) = old else {
            return Err(format!(
                "delete from {name} without an old row cannot be applied"
            ));
        };
        let removed = match &mut self.rows {
            Rows::Keyed(_) => {
                let key = self.project(&old.values);
                match &mut self.rows {
                    Rows::Keyed(map) => map.remove(&key).is_some(),
                    Rows::Bag(_) => false,
                }
            }
            Rows::Bag(bag) => {
                if old.kind != OldRowKind::Full {
                    return Err(format!(
                        "delete from keyless table {name} without a full old row cannot be applied"
                    ));
                }
                take_matching(bag, &old.values).is_some()
            }
        };
        if removed {
            Ok(())
        } else {
            Err(format!("delete of a row missing from {name}"))
        }
    }

    pub(crate) fn truncate(&mut self) {
        match &mut self.rows {
            Rows::Keyed(map) => map.clear(),
            Rows::Bag(bag) => bag.clear(),
        }
    }

    /// Every row (a keyless table's rows repeated by multiplicity), unordered.
    pub(crate) fn all_rows(&self) -> Vec<Row> {
        match &self.rows {
            Rows::Keyed(map) => map.values().cloned().collect(),
            Rows::Bag(bag) => bag
                .iter()
                .flat_map(|(row, &n)| std::iter::repeat_n(row.clone(), n))
                .collect(),
        }
    }

    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        match &self.rows {
            Rows::Keyed(map) => map.len(),
            Rows::Bag(bag) => bag.values().sum(),
        }
    }
}

/// Replaces unchanged key values of a lookup key with the new row's values.
fn fill_key(mut key: Vec<Value>, key_idx: &[usize], new: &Row) -> Vec<Value> {
    for (slot, &k) in key.iter_mut().zip(key_idx) {
        if slot.is_unchanged()
            && let Some(v) = new.get(k)
        {
            *slot = v.clone();
        }
    }
    key
}

/// Removes one row equal to `old` (unchanged TOAST values in `old` match anything).
fn take_matching(bag: &mut HashMap<Row, usize>, old: &[Value]) -> Option<Row> {
    let found = if old.iter().any(Value::is_unchanged) {
        bag.keys()
            .find(|row| {
                row.len() == old.len()
                    && row.iter().zip(old).all(|(r, o)| o.is_unchanged() || r == o)
            })
            .cloned()
    } else {
        bag.contains_key(old).then(|| old.to_vec())
    }?;
    if let Some(n) = bag.get_mut(&found) {
        *n -= 1;
        if *n == 0 {
            bag.remove(&found);
        }
    }
    Some(found)
}
