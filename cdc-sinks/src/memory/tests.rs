//! The in-memory sink against a reference model, across simulated crashes.

use std::collections::BTreeMap;

use cdc_core::{
    AckEvent, ChangeEvent, EventKind, Position, ReplicaIdentity, SchemaRef, SinkBatch,
    SnapshotMarker, Value,
};
use proptest::prelude::*;

use super::*;
use crate::testing::{self, batch, delete, insert, old_full, old_key, pos, text, update};

fn keyed() -> SchemaRef {
    testing::table(
        "k",
        &[("id", 23), ("body", 25), ("n", 23)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

/// Batch `id`: one insert into `keyed` of the row (1, 'a', 0), at position 10/1.
fn one_insert(id: u64, k: &SchemaRef) -> SinkBatch {
    batch(
        id,
        vec![insert(
            pos(10, 1),
            k,
            vec![Value::Int4(1), text("a"), Value::Int4(0)],
        )],
    )
}

fn bag() -> SchemaRef {
    testing::table("f", &[("a", 23), ("body", 25)], &[], ReplicaIdentity::Full)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// One logical operation of the generated workload.
#[derive(Clone, Debug)]
enum Op {
    Insert {
        id: i32,
        body: String,
        n: i32,
    },
    Update {
        pick: usize,
        new_id: Option<i32>,
        keep_body: bool,
        n: i32,
    },
    Delete {
        pick: usize,
    },
    BagInsert {
        a: i32,
        body: String,
    },
    BagUpdate {
        pick: usize,
        a: i32,
        keep_body: bool,
    },
    BagDelete {
        pick: usize,
    },
    Truncate,
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..20i32, "[a-z]{0,3}", any::<i32>()).prop_map(|(id, body, n)| Op::Insert { id, body, n }),
        4 => (any::<usize>(), proptest::option::of(0..20i32), any::<bool>(), any::<i32>())
            .prop_map(|(pick, new_id, keep_body, n)| Op::Update { pick, new_id, keep_body, n }),
        2 => any::<usize>().prop_map(|pick| Op::Delete { pick }),
        3 => (0..5i32, "[a-b]{0,1}").prop_map(|(a, body)| Op::BagInsert { a, body }),
        2 => (any::<usize>(), 0..5i32, any::<bool>()).prop_map(|(pick, a, keep_body)| Op::BagUpdate { pick, a, keep_body }),
        1 => any::<usize>().prop_map(|pick| Op::BagDelete { pick }),
        1 => Just(Op::Truncate),
    ]
}

/// The reference model: what `SELECT *` would return.
#[derive(Default, Clone, Debug)]
struct Model {
    keyed: BTreeMap<i32, (String, i32)>,
    bag: Vec<(i32, String)>,
}

impl Model {
    /// Applies `op` and returns the event Postgres would log for it, if any.
    fn apply(&mut self, op: &Op, position: Position) -> Option<ChangeEvent> {
        let k = keyed();
        let f = bag();
        match op.clone() {
            Op::Insert { id, body, n } => {
                if self.keyed.contains_key(&id) {
                    return None;
                }
                self.keyed.insert(id, (body.clone(), n));
                Some(insert(
                    position,
                    &k,
                    vec![Value::Int4(id), text(&body), Value::Int4(n)],
                ))
            }
            Op::Update {
                pick,
                new_id,
                keep_body,
                n,
            } => {
                let ids: Vec<i32> = self.keyed.keys().copied().collect();
                let id = *ids.get(pick % ids.len().max(1))?;
                let (body, _) = self.keyed.remove(&id)?;
                let new_id = new_id.filter(|i| !self.keyed.contains_key(i) && *i != id);
                let target = new_id.unwrap_or(id);
                self.keyed.insert(target, (body.clone(), n));
                let old =
                    new_id.and_then(|_| old_key(vec![Value::Int4(id), Value::Null, Value::Null]));
                let body_value = if keep_body && new_id.is_none() {
                    Value::Unchanged
                } else {
                    text(&body)
                };
                Some(update(
                    position,
                    &k,
                    old,
                    vec![Value::Int4(target), body_value, Value::Int4(n)],
                ))
            }
            Op::Delete { pick } => {
                let ids: Vec<i32> = self.keyed.keys().copied().collect();
                let id = *ids.get(pick % ids.len().max(1))?;
                self.keyed.remove(&id);
                Some(delete(
                    position,
                    &k,
                    old_key(vec![Value::Int4(id), Value::Null, Value::Null]),
                ))
            }
            Op::BagInsert { a, body } => {
                self.bag.push((a, body.clone()));
                Some(insert(position, &f, vec![Value::Int4(a), text(&body)]))
            }
            Op::BagUpdate { pick, a, keep_body } => {
                if self.bag.is_empty() {
                    return None;
                }
                let i = pick % self.bag.len();
                let (old_a, body) = self.bag[i].clone();
                self.bag[i] = (a, body.clone());
                let new_body = if keep_body {
                    Value::Unchanged
                } else {
                    text(&body)
                };
                Some(update(
                    position,
                    &f,
                    old_full(vec![Value::Int4(old_a), text(&body)]),
                    vec![Value::Int4(a), new_body],
                ))
            }
            Op::BagDelete { pick } => {
                if self.bag.is_empty() {
                    return None;
                }
                let (a, body) = self.bag.remove(pick % self.bag.len());
                Some(delete(
                    position,
                    &f,
                    old_full(vec![Value::Int4(a), text(&body)]),
                ))
            }
            Op::Truncate => {
                self.keyed.clear();
                self.bag.clear();
                Some(ChangeEvent {
                    lsn: cdc_core::Lsn::ZERO,
                    position,
                    kind: EventKind::Truncate {
                        tables: vec![k, f],
                        cascade: false,
                        restart_identity: false,
                    },
                })
            }
        }
    }

    fn keyed_text(&self) -> Vec<Vec<Option<String>>> {
        let mut rows: Vec<Vec<Option<String>>> = self
            .keyed
            .iter()
            .map(|(id, (body, n))| {
                vec![
                    Some(id.to_string()),
                    Some(body.clone()),
                    Some(n.to_string()),
                ]
            })
            .collect();
        rows.sort();
        rows
    }

    fn bag_text(&self) -> Vec<Vec<Option<String>>> {
        let mut rows: Vec<Vec<Option<String>>> = self
            .bag
            .iter()
            .map(|(a, body)| vec![Some(a.to_string()), Some(body.clone())])
            .collect();
        rows.sort();
        rows
    }
}

/// One transaction per operation, one batch per transaction; returns the batches and the
/// final model.
fn workload(ops: &[Op]) -> (Vec<SinkBatch>, Model) {
    let mut model = Model::default();
    let mut batches = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let lsn = 100 + i as u64 * 10;
        if let Some(event) = model.apply(op, pos(lsn, 1)) {
            let id = batches.len() as u64;
            batches.push(batch(
                id,
                vec![testing::begin(lsn), event, testing::commit(lsn, 2)],
            ));
        }
    }
    (batches, model)
}

async fn run(handle: &MemoryHandle, batches: &[SinkBatch], checkpoint_every: usize) -> MemorySink {
    let mut sink = handle.sink();
    let (acks, _rx) = Acknowledger::channel();
    let token = sink.open(acks).await.unwrap();
    for (i, b) in batches.iter().enumerate() {
        // Replay resumes after the token.
        let covered = token
            .as_ref()
            .is_some_and(|t| b.batch.last_position().is_some_and(|p| t.covers(p)));
        if covered {
            continue;
        }
        sink.write(b.clone()).await.unwrap();
        if checkpoint_every > 0 && i % checkpoint_every == 0 {
            sink.checkpoint(&b.resume_token).await.unwrap();
        }
    }
    sink
}

fn assert_matches_model(handle: &MemoryHandle, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(handle.rows_text(&keyed().name), model.keyed_text());
    prop_assert_eq!(handle.rows_text(&bag().name), model.bag_text());
    prop_assert_eq!(handle.anomalies(), Vec::<String>::new());
    prop_assert_eq!(handle.duplicate_positions(), Vec::<Position>::new());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn random_changes_end_in_the_reference_state(ops in proptest::collection::vec(arb_op(), 0..60)) {
        let (batches, model) = workload(&ops);
        let handle = MemoryHandle::default();
        rt().block_on(run(&handle, &batches, 3));
        assert_matches_model(&handle, &model)?;
        prop_assert_eq!(handle.changes().len(), batches.len() * 3);
    }

    #[test]
    fn crash_and_replay_from_the_token_ends_in_the_same_state(
        ops in proptest::collection::vec(arb_op(), 1..60),
        crash_at in any::<usize>(),
        checkpoint_every in 1usize..5,
    ) {
        let (batches, model) = workload(&ops);
        let crash_at = crash_at % (batches.len() + 1);
        let handle = MemoryHandle::default();
        rt().block_on(async {
            let _dead = run(&handle, &batches[..crash_at], checkpoint_every).await;
            handle.simulate_crash();
            run(&handle, &batches, checkpoint_every).await
        });
        assert_matches_model(&handle, &model)?;
        // The effective change log is the uninterrupted one.
        let log: Vec<Position> = handle.changes().iter().map(|e| e.position).collect();
        let expected: Vec<Position> = batches.iter().flat_map(|b| b.batch.events.iter().map(|e| e.position)).collect();
        prop_assert_eq!(log, expected);
    }
}

#[tokio::test]
async fn replayed_events_are_recorded_as_duplicates_and_not_applied() {
    let handle = MemoryHandle::default();
    let k = keyed();
    let b = one_insert(0, &k);
    let mut sink = handle.sink();
    sink.open(Acknowledger::channel().0).await.unwrap();
    sink.write(b.clone()).await.unwrap();
    sink.write(b).await.unwrap();
    assert_eq!(handle.duplicate_positions(), vec![pos(10, 1)]);
    assert_eq!(handle.row_count(&k.name), 1);
    assert!(handle.anomalies().is_empty());
}

#[tokio::test]
async fn held_writes_wait_until_released_and_a_dropped_wait_is_uncounted() {
    let handle = MemoryHandle::default();
    let k = keyed();
    let b = one_insert(0, &k);
    let mut sink = handle.sink();
    sink.open(Acknowledger::channel().0).await.unwrap();
    handle.hold_writes(true);
    // A write dropped while it waits is no longer counted.
    let dropped = tokio::time::timeout(Duration::from_millis(50), sink.write(b.clone())).await;
    assert!(dropped.is_err(), "a held write returned");
    assert_eq!(handle.writes_waiting(), 0);
    assert_eq!(handle.row_count(&k.name), 0);
    let mut write = Box::pin(sink.write(b));
    let waiting = tokio::time::timeout(Duration::from_millis(50), &mut write).await;
    assert!(waiting.is_err(), "a held write returned");
    assert_eq!(handle.writes_waiting(), 1);
    handle.hold_writes(false);
    write.await.unwrap();
    assert_eq!(handle.writes_waiting(), 0);
    assert_eq!(handle.row_count(&k.name), 1);
}

#[tokio::test]
async fn unchanged_toast_values_are_merged_from_the_stored_row() {
    let handle = MemoryHandle::default();
    let k = keyed();
    let mut sink = handle.sink();
    sink.open(Acknowledger::channel().0).await.unwrap();
    sink.write(batch(
        0,
        vec![
            insert(
                pos(10, 1),
                &k,
                vec![Value::Int4(1), text("big"), Value::Int4(0)],
            ),
            update(
                pos(10, 2),
                &k,
                None,
                vec![Value::Int4(1), Value::Unchanged, Value::Int4(5)],
            ),
            update(
                pos(10, 3),
                &k,
                old_key(vec![Value::Int4(1), Value::Null, Value::Null]),
                vec![Value::Int4(2), Value::Unchanged, Value::Int4(6)],
            ),
        ],
    ))
    .await
    .unwrap();
    assert_eq!(
        handle.rows(&k.name),
        vec![vec![Value::Int4(2), text("big"), Value::Int4(6)]]
    );
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
}

#[tokio::test]
async fn pending_checkpoints_become_durable_only_when_completed() {
    let handle = MemoryHandle::new(MemorySinkOptions {
        async_writes: true,
        async_checkpoints: true,
        keep_log: true,
    });
    let k = keyed();
    let mut sink = handle.sink();
    let (acks, mut rx) = Acknowledger::channel();
    assert_eq!(sink.open(acks).await.unwrap(), None);
    let b = one_insert(7, &k);
    assert_eq!(sink.write(b.clone()).await.unwrap(), Ack::Pending);
    assert_eq!(
        sink.checkpoint(&b.resume_token).await.unwrap(),
        Ack::Pending
    );
    assert_eq!(handle.durable_token(), None);
    assert!(handle.complete_pending_writes());
    assert_eq!(rx.recv().await, Some(AckEvent::Completed(BatchId(7))));
    assert_eq!(handle.complete_pending_checkpoints(), 1);
    assert_eq!(
        rx.recv().await,
        Some(AckEvent::Durable(b.resume_token.clone()))
    );
    assert_eq!(handle.durable_token(), Some(b.resume_token));
}

#[tokio::test]
async fn a_crash_drops_pending_checkpoints_and_kills_the_old_sink() {
    let handle = MemoryHandle::new(MemorySinkOptions {
        async_checkpoints: true,
        ..MemorySinkOptions::default()
    });
    let k = keyed();
    let mut sink = handle.sink();
    sink.open(Acknowledger::channel().0).await.unwrap();
    let b = one_insert(0, &k);
    sink.write(b.clone()).await.unwrap();
    sink.checkpoint(&b.resume_token).await.unwrap();
    handle.simulate_crash();
    assert_eq!(handle.row_count(&k.name), 0);
    assert_eq!(handle.complete_pending_checkpoints(), 0);
    assert!(sink.write(b).await.is_err());
    let mut restarted = handle.sink();
    assert_eq!(
        restarted.open(Acknowledger::channel().0).await.unwrap(),
        None
    );
    assert_eq!(handle.stats().crashes, 1);
}

#[tokio::test]
async fn snapshot_restart_discards_snapshot_rows_and_faults_can_be_injected() {
    let handle = MemoryHandle::default();
    let k = keyed();
    let mut sink = handle.sink();
    sink.open(Acknowledger::channel().0).await.unwrap();
    let marker = |p, m| ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: p,
        kind: EventKind::Snapshot(m),
    };
    sink.write(batch(
        0,
        vec![
            marker(pos(1, 0), SnapshotMarker::Started),
            insert(
                pos(1, 1),
                &k,
                vec![Value::Int4(1), text("a"), Value::Int4(0)],
            ),
            marker(pos(1, 2), SnapshotMarker::Restarted),
            insert(
                pos(1, 3),
                &k,
                vec![Value::Int4(2), text("b"), Value::Int4(0)],
            ),
        ],
    ))
    .await
    .unwrap();
    assert_eq!(
        handle.rows_text(&k.name),
        vec![vec![Some("2".into()), Some("b".into()), Some("0".into())]]
    );
    handle.fail_next_write("disk full");
    let err = sink.write(batch(1, vec![])).await.unwrap_err();
    assert!(err.to_string().contains("disk full"));
    assert!(
        handle
            .wait_until(Duration::from_millis(50), |h| h.row_count(&k.name) == 1)
            .await
    );
}
