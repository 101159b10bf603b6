//! The histories the kit streams: two tables `(id int8 key, seq int8, note text)` under
//! `REPLICA IDENTITY FULL`, an optional consistent snapshot of their first rows, then
//! transactions of inserts, updates, deletes, TRUNCATEs, schema changes (a column
//! added), logical messages, some large; and the model of what a sink must end with.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::{
    ChangeEvent, ColumnSchema, ColumnType, EventKind, Lsn, OldRow, OldRowKind, Position,
    ReplicaIdentity, SchemaRef, TableName, TableSchema, TxBegin, TxCommit, Value,
};

/// One row a sink holds durably, as its harness reads it back: the kit's tables carry an
/// `id` (the key) and a `seq` (unique to each version of a row: every insert and update
/// writes a new one).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DurableRow {
    /// The table.
    pub table: TableName,
    /// Column `id`.
    pub id: i64,
    /// Column `seq`.
    pub seq: i64,
}

/// For harnesses whose output is a log of changes (files of insert and delete records):
/// applies them in order as a multiset, refusing what exactly-once output never holds — a
/// second insert of a row held, a delete of a row not held — and yields the rows left.
#[derive(Clone, Debug, Default)]
pub struct DurableLog {
    rows: BTreeMap<TableName, BTreeMap<i64, i64>>,
}

impl DurableLog {
    /// An insert of `(id, seq)`; an error when `id` is held already.
    pub fn insert(&mut self, table: &TableName, id: i64, seq: i64) -> Result<(), String> {
        let rows = self.rows.entry(table.clone()).or_default();
        match rows.insert(id, seq) {
            None => Ok(()),
            Some(held) => Err(format!(
                "{table}: row {id} (seq {seq}) inserted while the output holds it (seq {held})"
            )),
        }
    }

    /// A delete of `(id, seq)`; an error when that version is not held.
    pub fn delete(&mut self, table: &TableName, id: i64, seq: i64) -> Result<(), String> {
        let rows = self.rows.entry(table.clone()).or_default();
        match rows.get(&id) {
            Some(&held) if held == seq => {
                rows.remove(&id);
                Ok(())
            }
            Some(held) => Err(format!(
                "{table}: delete of row {id} seq {seq}, but the output holds seq {held}"
            )),
            None => Err(format!(
                "{table}: delete of row {id} (seq {seq}), which the output does not hold"
            )),
        }
    }

    /// A delete by key alone (a record that carries only the key, as Feldera's for a
    /// table with one); an error when `id` is not held.
    pub fn delete_key(&mut self, table: &TableName, id: i64) -> Result<(), String> {
        let rows = self.rows.entry(table.clone()).or_default();
        match rows.remove(&id) {
            Some(_) => Ok(()),
            None => Err(format!(
                "{table}: delete of row {id}, which the output does not hold"
            )),
        }
    }

    /// An update of the row with key `id` to version `seq` (a record that carries the key
    /// and the changed columns, as Feldera's `update`); an error when `id` is not held,
    /// or already at `seq` (the update applied twice).
    pub fn update(&mut self, table: &TableName, id: i64, seq: i64) -> Result<(), String> {
        let rows = self.rows.entry(table.clone()).or_default();
        match rows.get_mut(&id) {
            Some(held) if *held == seq => Err(format!(
                "{table}: update of row {id} to seq {seq} applied twice"
            )),
            Some(held) => {
                *held = seq;
                Ok(())
            }
            None => Err(format!(
                "{table}: update of row {id} (to seq {seq}), which the output does not hold"
            )),
        }
    }

    /// A TRUNCATE of `table`.
    pub fn truncate(&mut self, table: &TableName) {
        self.rows.remove(table);
    }

    /// The rows held.
    pub fn into_rows(self) -> Vec<DurableRow> {
        self.rows
            .into_iter()
            .flat_map(|(table, rows)| {
                rows.into_iter().map(move |(id, seq)| DurableRow {
                    table: table.clone(),
                    id,
                    seq,
                })
            })
            .collect()
    }
}

/// A small deterministic generator (splitmix64): histories and schedules from a seed.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a history may hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) snapshot: bool,
    pub(crate) truncates: bool,
    pub(crate) schema_changes: bool,
}

/// The LSN of the consistent snapshot; transactions come after it.
pub(crate) const SNAPSHOT_LSN: Lsn = Lsn(1_000);

/// A committed transaction's events, Begin to Commit.
#[derive(Clone, Debug)]
pub(crate) struct Transaction {
    pub(crate) events: Vec<ChangeEvent>,
    pub(crate) end_lsn: Lsn,
}

/// A history and the rows a sink must end with.
#[derive(Clone, Debug)]
pub(crate) struct History {
    /// The snapshot's rows (copied under the consistent snapshot), if any.
    pub(crate) snapshot: Option<Vec<(SchemaRef, Vec<Value>)>>,
    pub(crate) transactions: Vec<Transaction>,
    expected: BTreeMap<TableName, BTreeMap<i64, i64>>,
    pub(crate) events: u64,
}

fn column(name: &str, oid: u32, key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.to_owned(),
        column_type: ColumnType {
            oid,
            modifier: -1,
            name: None,
            definition: Default::default(),
        },
        nullable: !key,
        part_of_key: true,
        generated: false,
    }
}

fn schema(name: &str, relation_id: u32, extra: bool) -> SchemaRef {
    let mut columns = vec![
        column("id", 20, true),
        column("seq", 20, false),
        column("note", 25, false),
    ];
    if extra {
        columns.push(column("extra", 23, false));
    }
    Arc::new(TableSchema {
        name: TableName::new("public", name),
        relation_id,
        columns,
        replica_identity: ReplicaIdentity::Full,
        primary_key: vec!["id".to_owned()],
    })
}

fn row(table: &SchemaRef, id: i64, seq: i64) -> Vec<Value> {
    let mut values = vec![
        Value::Int8(id),
        Value::Int8(seq),
        Value::Text(format!("row {id} version {seq}").as_str().into()),
    ];
    if table.columns.len() > 3 {
        values.push(Value::Int4((seq % 1000) as i32));
    }
    values
}

impl History {
    /// A history drawn from `rng`.
    pub(crate) fn generate(rng: &mut Rng, shape: Shape) -> History {
        let mut tables = vec![
            schema("kit_a", 90_001, false),
            schema("kit_b", 90_002, false),
        ];
        let mut model: BTreeMap<TableName, BTreeMap<i64, i64>> = BTreeMap::new();
        let (mut next_id, mut next_seq) = (1i64, 1i64);
        let mut events = 0u64;
        let snapshot = shape.snapshot.then(|| {
            let mut rows = Vec::new();
            for table in &tables {
                for _ in 0..(3 + rng.below(40)) {
                    let (id, seq) = (next_id, next_seq);
                    next_id += 1;
                    next_seq += 1;
                    model.entry(table.name.clone()).or_default().insert(id, seq);
                    rows.push((table.clone(), row(table, id, seq)));
                }
            }
            events += rows.len() as u64;
            rows
        });
        let mut transactions = Vec::new();
        let count = 20 + rng.below(40);
        for n in 0..count {
            let commit_lsn = Lsn(2_000 + 1_000 * n);
            let mut tx_events = vec![ChangeEvent {
                lsn: Lsn::ZERO,
                position: Position::new(commit_lsn, 0),
                kind: EventKind::Begin(TxBegin {
                    final_lsn: commit_lsn,
                    commit_time_micros: 0,
                    xid: 100 + n as u32,
                }),
            }];
            // Now and then a large transaction: batches end inside it.
            let changes = if rng.chance(8) {
                150 + rng.below(250)
            } else {
                1 + rng.below(8)
            };
            for _ in 0..changes {
                let ordinal = tx_events.len() as u64;
                let position = Position::new(commit_lsn, ordinal);
                let lsn = Lsn(commit_lsn.0.saturating_sub(500) + ordinal);
                let which = rng.below(2) as usize;
                let table = tables[which].clone();
                let held_count = model.get(&table.name).map_or(0, BTreeMap::len) as u64;
                let pick = rng.below(held_count.max(1)) as usize;
                let picked = model
                    .get(&table.name)
                    .and_then(|held| held.iter().nth(pick))
                    .map(|(&id, &seq)| (id, seq));
                let kind = match (rng.below(100), picked) {
                    (0..=2, _) if shape.truncates => {
                        let truncated: Vec<SchemaRef> = if rng.chance(50) {
                            vec![table.clone()]
                        } else {
                            tables.clone()
                        };
                        for t in &truncated {
                            model.remove(&t.name);
                        }
                        EventKind::Truncate {
                            tables: truncated,
                            cascade: false,
                            restart_identity: false,
                        }
                    }
                    (3..=4, _) if shape.schema_changes && table.columns.len() == 3 => {
                        let new = schema(&table.name.name, table.relation_id, true);
                        tables[which] = new.clone();
                        EventKind::SchemaChange {
                            old: Some(table.clone()),
                            new,
                        }
                    }
                    (5..=6, _) => EventKind::Message {
                        transactional: true,
                        prefix: "kit".to_owned(),
                        content: Bytes::from_static(b"hello"),
                    },
                    (7..=36, Some((id, seq))) => {
                        let new_seq = next_seq;
                        next_seq += 1;
                        model
                            .entry(table.name.clone())
                            .or_default()
                            .insert(id, new_seq);
                        EventKind::Update {
                            table: table.clone(),
                            old: Some(OldRow {
                                kind: OldRowKind::Full,
                                values: row(&table, id, seq),
                            }),
                            new: row(&table, id, new_seq),
                        }
                    }
                    (37..=51, Some((id, seq))) => {
                        model.entry(table.name.clone()).or_default().remove(&id);
                        EventKind::Delete {
                            table: table.clone(),
                            old: Some(OldRow {
                                kind: OldRowKind::Full,
                                values: row(&table, id, seq),
                            }),
                        }
                    }
                    _ => {
                        let (id, seq) = (next_id, next_seq);
                        next_id += 1;
                        next_seq += 1;
                        model.entry(table.name.clone()).or_default().insert(id, seq);
                        EventKind::Insert {
                            table: table.clone(),
                            new: row(&table, id, seq),
                        }
                    }
                };
                tx_events.push(ChangeEvent {
                    lsn,
                    position,
                    kind,
                });
            }
            let end_lsn = Lsn(commit_lsn.0 + 8);
            tx_events.push(ChangeEvent {
                lsn: commit_lsn,
                position: Position::new(commit_lsn, tx_events.len() as u64),
                kind: EventKind::Commit(TxCommit {
                    commit_lsn,
                    end_lsn,
                    commit_time_micros: 0,
                }),
            });
            events += tx_events.len() as u64;
            transactions.push(Transaction {
                events: tx_events,
                end_lsn,
            });
        }
        History {
            snapshot,
            transactions,
            expected: model,
            events,
        }
    }

    /// The rows a sink holds once it has every change exactly once.
    pub(crate) fn expected_rows(&self) -> Vec<DurableRow> {
        let mut rows: Vec<DurableRow> = self
            .expected
            .iter()
            .flat_map(|(table, rows)| {
                rows.iter().map(move |(&id, &seq)| DurableRow {
                    table: table.clone(),
                    id,
                    seq,
                })
            })
            .collect();
        rows.sort();
        rows
    }
}
