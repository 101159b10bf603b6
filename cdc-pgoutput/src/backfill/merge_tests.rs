//! The merge's rules one at a time (the model of every interleaving is
//! `merge_model_tests`).

use std::sync::Arc;

use cdc_core::{
    ChangeEvent, ColumnSchema, ColumnType, EventKind, Lsn, Position, ReplicaIdentity, SchemaRef,
    TableName, TableSchema, TxBegin, TxCommit, Value,
};

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
            definition: Default::default(),
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
        lsn: cdc_core::Lsn::ZERO,
        position: Position::new(Lsn(200), 0),
        kind: EventKind::Begin(TxBegin {
            final_lsn: Lsn(200),
            commit_time_micros: 0,
            xid: 9,
        }),
    };
    backfill.on_event(begin).expect("begin");
    let truncate = ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
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
            lsn: cdc_core::Lsn::ZERO,
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
        lsn: cdc_core::Lsn::ZERO,
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
        lsn: cdc_core::Lsn::ZERO,
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
        lsn: cdc_core::Lsn::ZERO,
        position: Position::new(Lsn(200), 1),
        kind: EventKind::Delete {
            table: schema.clone(),
            old: None,
        },
    };
    assert!(backfill.on_event(delete).expect("delete").is_some());
    let truncate = ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
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
        backfill
            .invisible_before_anchor(0, &older, &ChunkEnd::TableEnd)
            .expect("compare"),
        vec![1050, 1070]
    );
    assert!(
        backfill
            .invisible_before_anchor(1, &older, &ChunkEnd::TableEnd)
            .expect("compare")
            .is_empty()
    );
    let newer = XidSnapshot::new(1100, 1100, Vec::new()).expect("snapshot");
    assert!(
        backfill
            .invisible_before_anchor(0, &newer, &ChunkEnd::TableEnd)
            .expect("compare")
            .is_empty()
    );
    backfill
        .deliver_chunk(1, newer.clone(), Lsn(lsn), &[], true)
        .expect("other table's chunk");
    assert_eq!(
        backfill
            .invisible_before_anchor(0, &older, &ChunkEnd::TableEnd)
            .expect("compare"),
        vec![1050, 1070]
    );
    backfill
        .deliver_chunk(0, newer, Lsn(lsn), &[row(1)], false)
        .expect("chunk");
    assert!(
        backfill
            .invisible_before_anchor(0, &older, &ChunkEnd::TableEnd)
            .expect("compare")
            .is_empty()
    );
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
    assert_eq!(
        restarted
            .invisible_before_anchor(0, &observed, &ChunkEnd::TableEnd)
            .expect("compare"),
        vec![1001]
    );
    let later = XidSnapshot::new(1003, 1003, Vec::new()).expect("snapshot");
    assert!(
        restarted
            .invisible_before_anchor(0, &later, &ChunkEnd::TableEnd)
            .expect("compare")
            .is_empty()
    );
}

/// A chunk waits only for the passed transactions whose dropped changes reach into its
/// range (issue 44, case 4): a commit beyond the chunk's end, made while it was read,
/// leaves it sound; one inside its range, or a TRUNCATE, holds it back.
#[test]
fn a_chunk_waits_only_for_transactions_reaching_its_range() {
    let schema = schema();
    let mut backfill = Backfill::new(vec![state()], Lsn(100));
    pass_inserts_beyond_the_frontier(&mut backfill, &schema, 200, 1000, &[50, 90]);
    pass_inserts_beyond_the_frontier(&mut backfill, &schema, 210, 1001, &[70, 20]);
    // Read before either committed.
    let before = XidSnapshot::new(1000, 1002, vec![1000, 1001]).expect("snapshot");
    let upto = |k: i64| ChunkEnd::Key(vec![Value::Int8(k)]);
    let invisible = |backfill: &Backfill, end: &ChunkEnd| {
        backfill
            .invisible_before_anchor(0, &before, end)
            .expect("compare")
    };
    assert!(invisible(&backfill, &upto(19)).is_empty());
    assert_eq!(invisible(&backfill, &upto(20)), vec![1001]);
    assert_eq!(invisible(&backfill, &upto(50)), vec![1000, 1001]);
    assert_eq!(invisible(&backfill, &ChunkEnd::TableEnd), vec![1000, 1001]);
    // A chunk up to 19 is placed; the transactions it does not show stay recorded.
    backfill
        .deliver_range(0, before.clone(), Lsn(300), 0, upto(19))
        .expect("chunk");
    assert_eq!(backfill.unshown(), vec![1000, 1001]);
    assert_eq!(invisible(&backfill, &upto(30)), vec![1001]);
    // A TRUNCATE reaches every key of the new copy.
    backfill.on_event(begin(400, 1002)).expect("begin");
    let truncate = ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: Position::new(Lsn(400), 1),
        kind: EventKind::Truncate {
            tables: vec![schema],
            cascade: false,
            restart_identity: false,
        },
    };
    assert!(backfill.on_event(truncate).expect("truncate").is_some());
    let shows_the_inserts = XidSnapshot::new(1002, 1003, vec![1002]).expect("snapshot");
    assert_eq!(
        backfill
            .invisible_before_anchor(0, &shows_the_inserts, &upto(1))
            .expect("compare"),
        vec![1002]
    );
}
