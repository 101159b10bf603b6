//! The merge against a model: a key/value table changed by transactions that commit in
//! an order unrelated to their transaction ids, a stream that lags behind the commits, and
//! chunks read at random moments. Whatever the interleaving, a sink that applies the
//! delivered events as a strict multiset (no second insert of a key it holds, no update
//! or delete of a key it lacks) ends with exactly the table.

use std::collections::BTreeMap;
use std::sync::Arc;

use cdc_core::{
    ChangeEvent, ColumnSchema, ColumnType, EventKind, Lsn, OldRow, OldRowKind, Position,
    ReplicaIdentity, SchemaRef, TableName, TableSchema, TxBegin, TxCommit, Value,
};
use proptest::prelude::*;

use super::*;
use crate::backfill::key_order::{KeyCollation, KeyColumnOrder, KeyOrder};
use crate::types::oids;

fn schema() -> SchemaRef {
    let column = |name: &str, key: bool| ColumnSchema {
        name: name.into(),
        column_type: ColumnType {
            oid: oids::INT8,
            modifier: -1,
            name: Some("bigint".into()),
        },
        nullable: !key,
        part_of_key: key,
        generated: false,
    };
    Arc::new(TableSchema {
        name: TableName::new("public", "t"),
        relation_id: 1,
        columns: vec![column("k", true), column("v", false)],
        replica_identity: ReplicaIdentity::Default,
        primary_key: vec!["k".into()],
    })
}

fn state() -> TableState {
    TableState {
        table: TableName::new("public", "t"),
        key_columns: vec![0],
        order: KeyOrder::new(vec![
            KeyColumnOrder::for_column(oids::INT8, KeyCollation::NotCollatable)
                .expect("int8 is orderable"),
        ]),
        frontier: Frontier::NotStarted,
        windows: Vec::new(),
        chunks: 0,
        rows: 0,
    }
}

#[derive(Clone, Debug)]
enum Op {
    Upsert { key: i64, value: i64 },
    Delete { key: i64 },
    Move { from: i64, to: i64 },
}

/// A transaction: its id and its operations.
#[derive(Clone, Debug)]
struct Tx {
    xid: u32,
    ops: Vec<Op>,
}

/// Applies `ops` to `table`, returning the row events they produce (as Postgres would log
/// them: an update of an existing key, an insert of a new one, a delete when present).
fn apply(table: &mut BTreeMap<i64, i64>, ops: &[Op], schema: &SchemaRef) -> Vec<EventKind> {
    let row = |k: i64, v: i64| vec![Value::Int8(k), Value::Int8(v)];
    let key_only = |k: i64| OldRow {
        kind: OldRowKind::Key,
        values: vec![Value::Int8(k), Value::Null],
    };
    let mut events = Vec::new();
    for op in ops {
        match *op {
            Op::Upsert { key, value } => {
                let existed = table.insert(key, value).is_some();
                events.push(if existed {
                    EventKind::Update {
                        table: schema.clone(),
                        old: None,
                        new: row(key, value),
                    }
                } else {
                    EventKind::Insert {
                        table: schema.clone(),
                        new: row(key, value),
                    }
                });
            }
            Op::Delete { key } => {
                if table.remove(&key).is_some() {
                    events.push(EventKind::Delete {
                        table: schema.clone(),
                        old: Some(key_only(key)),
                    });
                }
            }
            Op::Move { from, to } => {
                if from != to
                    && !table.contains_key(&to)
                    && let Some(value) = table.remove(&from)
                {
                    table.insert(to, value);
                    events.push(EventKind::Update {
                        table: schema.clone(),
                        old: Some(key_only(from)),
                        new: row(to, value),
                    });
                }
            }
        }
    }
    events
}

/// A sink that refuses anything a multiset sink could not apply exactly.
#[derive(Default)]
struct StrictSink {
    rows: BTreeMap<i64, i64>,
}

impl StrictSink {
    fn apply(&mut self, event: &ChangeEvent) -> Result<(), String> {
        let key = |row: &[Value]| match row.first() {
            Some(Value::Int8(k)) => *k,
            other => panic!("no key in {other:?}"),
        };
        let value = |row: &[Value]| match row.get(1) {
            Some(Value::Int8(v)) => *v,
            other => panic!("no value in {other:?}"),
        };
        match &event.kind {
            EventKind::Insert { new, .. } if self.rows.insert(key(new), value(new)).is_some() => {
                return Err(format!("second insert of key {}", key(new)));
            }
            EventKind::Delete { old, .. } => {
                let k = key(&old.as_ref().expect("old key").values);
                if self.rows.remove(&k).is_none() {
                    return Err(format!("delete of missing key {k}"));
                }
            }
            EventKind::Update { old, new, .. } => {
                let old_key = old.as_ref().map_or(key(new), |o| key(&o.values));
                if self.rows.remove(&old_key).is_none() {
                    return Err(format!("update of missing key {old_key}"));
                }
                if self.rows.insert(key(new), value(new)).is_some() {
                    return Err(format!("update onto existing key {}", key(new)));
                }
            }
            EventKind::Truncate { .. } => self.rows.clear(),
            _ => {}
        }
        Ok(())
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..40i64, any::<i64>()).prop_map(|(key, value)| Op::Upsert { key, value }),
        1 => (0..40i64).prop_map(|key| Op::Delete { key }),
        1 => (0..40i64, 0..40i64).prop_map(|(from, to)| Op::Move { from, to }),
    ]
}

/// What happens next in the simulation.
#[derive(Clone, Debug)]
enum Step {
    /// The database commits the next transaction.
    Commit,
    /// The stream processes the next committed transaction.
    Stream,
    /// A chunk of this many rows is read now.
    Chunk(usize),
    /// Commits from now on wait (for a synchronous standby that does not answer): their
    /// commit records are in WAL, so the stream can pass them, but no snapshot shows
    /// them until [`Step::Release`].
    Hold,
    /// The waiting commits end: snapshots show every committed transaction again.
    Release,
    /// The source restarts: a new merge from what a resume token carries (the tables'
    /// states and the transactions no snapshot has shown yet), the stream where it was.
    Restart,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Commit),
        3 => Just(Step::Stream),
        1 => (1..8usize).prop_map(Step::Chunk),
        1 => Just(Step::Hold),
        1 => Just(Step::Release),
        1 => Just(Step::Restart),
    ]
}

/// Runs the model: initial rows, transactions (in commit order, with shuffled ids), and
/// steps. Returns the final table and the sink.
fn run(initial: Vec<(i64, i64)>, txs: Vec<Tx>, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let schema = schema();
    let mut table: BTreeMap<i64, i64> = initial.into_iter().collect();
    // The table after each number of commits (`states[n]`: after the first n), and how
    // many commits snapshots show (all but those made while held).
    let mut states = vec![table.clone()];
    let mut visible_commits = 0usize;
    let mut held = false;
    let mut backfill = Backfill::new(vec![state()], Lsn(100));
    let mut sink = StrictSink::default();
    // The events of each committed transaction, and where its commit record ends.
    let mut committed: Vec<(u32, Vec<EventKind>, Lsn)> = Vec::new();
    let mut streamed = 0;
    let mut next_tx = txs.into_iter();
    let mut lsn = 100u64;
    let mut ordinal_lsn = 0;
    let deliver = |backfill: &mut Backfill,
                   sink: &mut StrictSink,
                   event: ChangeEvent|
     -> Result<(), TestCaseError> {
        if let Some(event) = backfill
            .on_event(event)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
        {
            sink.apply(&event).map_err(TestCaseError::fail)?;
        }
        Ok(())
    };
    let stream_one = |backfill: &mut Backfill,
                      sink: &mut StrictSink,
                      (xid, events, end): &(u32, Vec<EventKind>, Lsn)|
     -> Result<(), TestCaseError> {
        let commit_lsn = Lsn(end.0 - 10);
        let begin = ChangeEvent {
            position: Position::new(commit_lsn, 0),
            kind: EventKind::Begin(TxBegin {
                final_lsn: commit_lsn,
                commit_time_micros: 0,
                xid: *xid,
            }),
        };
        deliver(backfill, sink, begin)?;
        for (i, kind) in events.iter().enumerate() {
            let event = ChangeEvent {
                position: Position::new(commit_lsn, i as u64 + 1),
                kind: kind.clone(),
            };
            deliver(backfill, sink, event)?;
        }
        let commit = ChangeEvent {
            position: Position::new(commit_lsn, events.len() as u64 + 1),
            kind: EventKind::Commit(TxCommit {
                commit_lsn,
                end_lsn: *end,
                commit_time_micros: 0,
            }),
        };
        deliver(backfill, sink, commit)
    };
    let all_steps = steps
        .into_iter()
        .chain(std::iter::once(Step::Release))
        .chain(std::iter::repeat_n(Step::Commit, 64))
        .chain(std::iter::repeat_n(Step::Chunk(7), 64))
        .chain(std::iter::repeat_n(Step::Stream, 64))
        .chain(std::iter::repeat_n(Step::Chunk(7), 64));
    for step in all_steps {
        match step {
            Step::Commit => {
                if let Some(tx) = next_tx.next() {
                    let events = apply(&mut table, &tx.ops, &schema);
                    lsn += 100;
                    committed.push((tx.xid, events, Lsn(lsn)));
                    states.push(table.clone());
                    if !held {
                        visible_commits = committed.len();
                    }
                }
            }
            Step::Hold => held = true,
            Step::Release => {
                held = false;
                visible_commits = committed.len();
            }
            Step::Restart => {
                let tables = backfill.tables().to_vec();
                let unshown = backfill.unshown();
                backfill = Backfill::new(tables, backfill.processed()).with_unshown(&unshown);
            }
            Step::Stream => {
                if let Some(tx) = committed.get(streamed) {
                    stream_one(&mut backfill, &mut sink, tx)?;
                    streamed += 1;
                }
            }
            Step::Chunk(size) => {
                let Some((index, state)) = backfill.pending_tables().next() else {
                    continue;
                };
                let after = match &state.frontier {
                    Frontier::UpTo(key) => match key.first() {
                        Some(Value::Int8(k)) => Some(*k),
                        _ => None,
                    },
                    _ => None,
                };
                // The snapshot sees the committed transactions but those still waiting.
                let committed_xids: Vec<u64> = committed
                    .iter()
                    .take(visible_commits)
                    .map(|(x, _, _)| u64::from(*x))
                    .collect();
                let max_xid = 1000u64;
                let in_progress: Vec<u64> = (1..max_xid)
                    .filter(|x| !committed_xids.contains(x))
                    .collect();
                let xmin = in_progress.first().copied().unwrap_or(max_xid);
                let snapshot = XidSnapshot::new(xmin, max_xid, in_progress)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                // As the source: a chunk whose snapshot misses a transaction the stream
                // passed is read again later; the round's snapshot is observed after.
                let shows_the_past = backfill
                    .invisible_before_anchor(index, &snapshot)
                    .is_empty();
                backfill.observe(&snapshot);
                if !shows_the_past {
                    prop_assert!(
                        visible_commits < committed.len(),
                        "a chunk refused with nothing waiting"
                    );
                    continue;
                }
                let seen = states
                    .get(visible_commits)
                    .ok_or_else(|| TestCaseError::fail("no state"))?;
                let rows: Vec<Row> = seen
                    .range(after.map_or(i64::MIN, |a| a + 1)..)
                    .take(size)
                    .map(|(k, v)| vec![Value::Int8(*k), Value::Int8(*v)])
                    .collect();
                let complete = rows.len() < size;
                // Rows go in at the anchor (the stream's position), as inserts.
                if ordinal_lsn == 0 {
                    ordinal_lsn = 1;
                }
                for row in &rows {
                    let event = ChangeEvent {
                        position: Position::new(backfill.processed(), 1 << 62),
                        kind: EventKind::Insert {
                            table: schema.clone(),
                            new: row.clone(),
                        },
                    };
                    sink.apply(&event).map_err(TestCaseError::fail)?;
                }
                backfill
                    .deliver_chunk(index, snapshot, Lsn(lsn + 1), &rows, complete)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
    }
    prop_assert!(
        backfill.pending_tables().next().is_none(),
        "backfill not done"
    );
    prop_assert_eq!(streamed, committed.len());
    prop_assert_eq!(&sink.rows, &table);
    // The idle stream's keepalive reports the WAL end: every window closes.
    backfill.progress(Lsn(lsn + 1000));
    prop_assert!(
        backfill.is_finished(),
        "windows still open after the stream passed them"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_strict_multiset_sink_ends_with_the_table(
        initial in proptest::collection::btree_map(0..40i64, any::<i64>(), 0..30),
        txs in proptest::collection::vec(proptest::collection::vec(op(), 1..4), 0..30),
        order in Just(()).prop_perturb(|_, mut rng| {
            let mut ids: Vec<u32> = (1..200).collect();
            for i in (1..ids.len()).rev() {
                let j = (rng.next_u32() as usize) % (i + 1);
                ids.swap(i, j);
            }
            ids
        }),
        steps in proptest::collection::vec(step(), 0..80),
    ) {
        let txs = txs
            .into_iter()
            .zip(order)
            .map(|(ops, xid)| Tx { xid, ops })
            .collect();
        run(initial.into_iter().collect(), txs, steps)?;
    }
}

#[test]
fn a_truncate_restarts_the_backfill() {
    let schema = schema();
    let mut backfill = Backfill::new(vec![state()], Lsn(100));
    let snapshot = XidSnapshot::new(5, 5, Vec::new()).expect("snapshot");
    let rows = vec![vec![Value::Int8(1), Value::Int8(1)]];
    backfill
        .deliver_chunk(0, snapshot, Lsn(150), &rows, false)
        .expect("chunk");
    let begin = ChangeEvent {
        position: Position::new(Lsn(200), 0),
        kind: EventKind::Begin(TxBegin {
            final_lsn: Lsn(200),
            commit_time_micros: 0,
            xid: 9,
        }),
    };
    backfill.on_event(begin).expect("begin");
    let truncate = ChangeEvent {
        position: Position::new(Lsn(200), 1),
        kind: EventKind::Truncate {
            tables: vec![schema],
            cascade: false,
            restart_identity: false,
        },
    };
    assert!(backfill.on_event(truncate).expect("truncate").is_some());
    assert_eq!(backfill.tables()[0].frontier, Frontier::NotStarted);
    assert!(backfill.tables()[0].windows.is_empty());
}

/// Streams transaction `xid`, committed at `lsn`, inserting rows with `keys` beyond the
/// frontier of table 0: the merge drops them and records the transaction.
fn pass_inserts_beyond_the_frontier(
    backfill: &mut Backfill,
    schema: &SchemaRef,
    lsn: u64,
    xid: u32,
    keys: &[i64],
) {
    backfill.on_event(begin(lsn, xid)).expect("begin");
    for (ordinal, &key) in (1u64..).zip(keys) {
        let insert = ChangeEvent {
            position: Position::new(Lsn(lsn), ordinal),
            kind: EventKind::Insert {
                table: schema.clone(),
                new: vec![Value::Int8(key), Value::Int8(0)],
            },
        };
        assert!(
            backfill.on_event(insert).expect("insert").is_none(),
            "beyond the frontier"
        );
    }
    let commit = ChangeEvent {
        position: Position::new(Lsn(lsn), keys.len() as u64 + 1),
        kind: EventKind::Commit(TxCommit {
            commit_lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
            commit_time_micros: 0,
        }),
    };
    backfill.on_event(commit).expect("commit");
}

fn begin(lsn: u64, xid: u32) -> ChangeEvent {
    ChangeEvent {
        position: Position::new(Lsn(lsn), 0),
        kind: EventKind::Begin(TxBegin {
            final_lsn: Lsn(lsn),
            commit_time_micros: 0,
            xid,
        }),
    }
}

/// A copied table (done, no window open) is the merge's no longer: its TRUNCATE is an
/// ordinary change that starts nothing over (the token must not say it is undone), and a
/// change without an old key (REPLICA IDENTITY NOTHING) passes through for the sink to
/// judge, as with no backfill at all.
#[test]
fn a_done_table_passes_through_untouched() {
    let schema = schema();
    let mut done = state();
    done.frontier = Frontier::Done;
    done.chunks = 3;
    done.rows = 30;
    let mut backfill = Backfill::new(vec![done], Lsn(100));
    assert_eq!(backfill.merging_index(&schema.name), None);
    backfill.on_event(begin(200, 9)).expect("begin");
    let delete = ChangeEvent {
        position: Position::new(Lsn(200), 1),
        kind: EventKind::Delete {
            table: schema.clone(),
            old: None,
        },
    };
    assert!(backfill.on_event(delete).expect("delete").is_some());
    let truncate = ChangeEvent {
        position: Position::new(Lsn(200), 2),
        kind: EventKind::Truncate {
            tables: vec![schema],
            cascade: false,
            restart_identity: false,
        },
    };
    assert!(backfill.on_event(truncate).expect("truncate").is_some());
    assert_eq!(backfill.tables()[0].frontier, Frontier::Done);
    assert_eq!(backfill.tables()[0].chunks, 3);
}

/// A copy started over at an anchor counts its chunks and rows anew (issue 44, case 7).
#[test]
fn a_restart_at_the_anchor_counts_the_new_copy_from_zero() {
    let mut backfill = Backfill::new(vec![state()], Lsn(100));
    let snapshot = XidSnapshot::new(5, 5, Vec::new()).expect("snapshot");
    let rows = vec![vec![Value::Int8(1), Value::Int8(1)]];
    backfill
        .deliver_chunk(0, snapshot, Lsn(150), &rows, true)
        .expect("chunk");
    assert_eq!(
        (backfill.tables()[0].chunks, backfill.tables()[0].rows),
        (1, 1)
    );
    backfill.restart_table_at_anchor(0);
    let state = &backfill.tables()[0];
    assert_eq!((state.chunks, state.rows), (0, 0));
    assert_eq!(state.frontier, Frontier::NotStarted);
}

/// Every transaction that touched a table since its last chunk is checked against the
/// next chunk's snapshot, however many there are and whatever their order; a chunk of
/// the table clears them, and another table's chunk does not.
#[test]
fn transactions_passed_before_the_anchor_are_kept_per_table_until_its_chunk() {
    let schema = schema();
    let mut other = state();
    other.table = TableName::new("public", "other");
    let mut backfill = Backfill::new(vec![state(), other], Lsn(100));
    let row = |key: i64| vec![Value::Int8(key), Value::Int8(0)];
    let mut lsn = 200;
    for xid in (1000..1100u32).rev() {
        pass_inserts_beyond_the_frontier(&mut backfill, &schema, lsn, xid, &[1, 2]);
        lsn += 10;
    }
    // A snapshot taken while 1050 and 1070 still ran sees neither.
    let older = XidSnapshot::new(1050, 1100, vec![1050, 1070]).expect("snapshot");
    assert_eq!(
        backfill.invisible_before_anchor(0, &older),
        vec![1050, 1070]
    );
    assert!(backfill.invisible_before_anchor(1, &older).is_empty());
    let newer = XidSnapshot::new(1100, 1100, Vec::new()).expect("snapshot");
    assert!(backfill.invisible_before_anchor(0, &newer).is_empty());
    backfill
        .deliver_chunk(1, newer.clone(), Lsn(lsn), &[], true)
        .expect("other table's chunk");
    assert_eq!(
        backfill.invisible_before_anchor(0, &older),
        vec![1050, 1070]
    );
    backfill
        .deliver_chunk(0, newer, Lsn(lsn), &[row(1)], false)
        .expect("chunk");
    assert!(backfill.invisible_before_anchor(0, &older).is_empty());
}

/// A snapshot observed after the checks shows some passed transactions: no later chunk
/// waits for those. The rest is what a resume token carries, and a restarted merge's
/// chunks wait for them (issue 44, case 6).
#[test]
fn observed_snapshots_excuse_what_they_show_and_a_restart_keeps_the_rest() {
    let schema = schema();
    let mut backfill = Backfill::new(vec![state()], Lsn(100));
    for (i, xid) in [1000u32, 1001, 1002].into_iter().enumerate() {
        pass_inserts_beyond_the_frontier(&mut backfill, &schema, 200 + 10 * i as u64, xid, &[5]);
    }
    assert_eq!(backfill.unshown(), vec![1000, 1001, 1002]);
    // 1001 still waits (for a synchronous standby, say).
    let observed = XidSnapshot::new(1001, 1003, vec![1001]).expect("snapshot");
    backfill.observe(&observed);
    assert_eq!(backfill.unshown(), vec![1001]);

    let restarted =
        Backfill::new(backfill.tables().to_vec(), backfill.processed()).with_unshown(&[1001]);
    assert_eq!(restarted.invisible_before_anchor(0, &observed), vec![1001]);
    let later = XidSnapshot::new(1003, 1003, Vec::new()).expect("snapshot");
    assert!(restarted.invisible_before_anchor(0, &later).is_empty());
}
