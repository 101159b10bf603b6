//! Batches built from pending items, with times passed in (no clock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_core::{
    ChangeEvent, EventKind, Lsn, Position, ReplicaIdentity, SnapshotMarker, TableName, TableSchema,
    TxBegin, TxCommit, Value,
};

use super::*;

const RULES: BatchRules = BatchRules {
    max_events: 3,
    max_bytes: usize::MAX,
    max_latency: Duration::from_millis(100),
};

fn table() -> Arc<TableSchema> {
    Arc::new(TableSchema {
        name: TableName::new("public", "t"),
        relation_id: 1,
        columns: Vec::new(),
        replica_identity: ReplicaIdentity::Default,
        primary_key: Vec::new(),
    })
}

fn at(lsn: u64, ordinal: u64, kind: EventKind) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: Position::new(Lsn(lsn), ordinal),
        kind,
    }
}

fn insert(lsn: u64, ordinal: u64) -> ChangeEvent {
    at(
        lsn,
        ordinal,
        EventKind::Insert {
            table: table(),
            new: vec![Value::Int4(1)],
        },
    )
}

fn transaction(batches: &mut Batches, commit: u64, rows: u64, end: u64) {
    batches.push_event(at(
        commit,
        0,
        EventKind::Begin(TxBegin {
            final_lsn: Lsn(commit),
            commit_time_micros: 0,
            xid: 7,
        }),
    ));
    for n in 1..=rows {
        batches.push_event(insert(commit, n));
    }
    batches.push_event(at(
        commit,
        rows + 1,
        EventKind::Commit(TxCommit {
            commit_lsn: Lsn(commit),
            end_lsn: Lsn(commit + 8),
            commit_time_micros: 0,
        }),
    ));
    batches.push_end(Lsn(end));
}

#[test]
fn a_batch_ends_at_its_size_and_its_latency_counts_from_its_first_event() {
    let start = Instant::now();
    let mut batches = Batches::new(RULES);
    assert!(
        !batches.latency_expired(start + Duration::from_secs(60)),
        "empty"
    );
    transaction(&mut batches, 100, 1, 108);
    let later = start + Duration::from_millis(30);
    assert!(
        batches.fill(later).full,
        "Begin, insert, Commit: three events"
    );
    assert_eq!(batches.building().commit_end, Some(Lsn(108)));
    assert!(!batches.latency_expired(later + Duration::from_millis(99)));
    assert!(batches.latency_expired(later + Duration::from_millis(100)));
    assert_eq!(
        batches.latency_left(later + Duration::from_millis(40)),
        Some(Duration::from_millis(60))
    );
    let batch = batches.take();
    assert_eq!(batch.len(), 3);
    assert_eq!(batches.covered_end(), Some(Lsn(108)));
    assert_eq!(batches.covered_position(), Some(Position::new(Lsn(100), 2)));
    assert_eq!(batches.latency_left(later), None, "nothing built");
}

#[test]
fn a_commit_confirms_as_far_as_the_stream_says_not_its_own_end() {
    let mut batches = Batches::new(BatchRules {
        max_events: 100,
        ..RULES
    });
    // The stream holds the end back (a prepared transaction waits before it).
    transaction(&mut batches, 100, 1, 50);
    assert!(!batches.fill(Instant::now()).full);
    assert_eq!(batches.building().commit_end, Some(Lsn(50)));
}

#[test]
fn a_chunk_is_never_split_and_takes_its_completions_along() {
    let mut batches = Batches::new(RULES);
    let base = 1u64 << 62;
    let t = table().name.clone();
    batches.push_event(at(99, base, EventKind::Snapshot(SnapshotMarker::Started)));
    batches.push_event(at(
        99,
        base + 1,
        EventKind::Snapshot(SnapshotMarker::ChunkStarted {
            table: t.clone(),
            chunk: 0,
        }),
    ));
    for n in 0..5 {
        batches.push_event(insert(99, base + 2 + n));
    }
    batches.push_event(at(
        99,
        base + 7,
        EventKind::Snapshot(SnapshotMarker::ChunkCompleted {
            table: t.clone(),
            chunk: 0,
            rows: 5,
        }),
    ));
    batches.push_event(at(
        99,
        base + 8,
        EventKind::Snapshot(SnapshotMarker::TableCompleted {
            table: t.clone(),
            rows: 5,
        }),
    ));
    batches.push_event(at(
        99,
        base + 9,
        EventKind::Snapshot(SnapshotMarker::Completed {
            consistent_point: Lsn(99),
        }),
    ));
    transaction(&mut batches, 100, 1, 108);
    let filled = batches.fill(Instant::now());
    assert!(filled.full && filled.snapshot_started);
    let batch = batches.take();
    assert_eq!(batch.len(), 10, "the whole chunk and both completions");
    assert!(matches!(
        batch.events.last().map(|e| &e.kind),
        Some(EventKind::Snapshot(SnapshotMarker::Completed { .. }))
    ));
    assert_eq!(
        batches.pending_len(),
        4,
        "the transaction waits for the next batch"
    );
}

#[test]
fn events_already_handed_out_are_not_queued_again_after_a_reconnect() {
    let mut batches = Batches::new(BatchRules {
        max_events: 100,
        ..RULES
    });
    batches.resume_after(Some(Position::new(Lsn(100), 1)), Some(Lsn(90)));
    transaction(&mut batches, 100, 2, 108);
    batches.fill(Instant::now());
    let positions: Vec<u64> = batches
        .building()
        .events
        .iter()
        .map(|e| e.position.ordinal)
        .collect();
    assert_eq!(
        positions,
        [2, 3],
        "Begin and the first insert were handed out before"
    );
    // A new session: pending items go (they are streamed again); the batch stays.
    batches.push_event(insert(200, 1));
    batches.new_session(Lsn(100));
    assert_eq!(batches.pending_len(), 0);
    assert_eq!(batches.building().len(), 2);
}

/// Found by the source simulation (seed 46725 of 100,000): a fresh start pushes the
/// slot's start as an end; a connection lost before it went into a batch must not take
/// it along, or the first token — cut inside the first transaction — would not cover
/// where the slot is, and a restart from it would be refused.
#[test]
fn a_new_session_keeps_the_ends_no_session_sends_again() {
    let mut batches = Batches::new(BatchRules {
        max_events: 1,
        max_bytes: usize::MAX,
        max_latency: Duration::from_secs(60),
    });
    batches.push_end(Lsn(50));
    batches.push_event(insert(200, 1));
    batches.push_end(Lsn(300));
    batches.new_session(Lsn(50));
    assert_eq!(
        batches.pending_len(),
        1,
        "the end at the session's start stays"
    );
}

#[test]
fn what_was_handed_out_and_the_final_batch() {
    let mut batches = Batches::new(BatchRules {
        max_events: 100,
        ..RULES
    });
    assert_eq!(batches.handed_out_upto(Lsn(50)), Lsn(50));
    assert!(!batches.has_final_batch());
    transaction(&mut batches, 100, 1, 108);
    batches.fill(Instant::now());
    assert!(batches.has_final_batch());
    assert_eq!(
        batches.handed_out_upto(Lsn(50)),
        Lsn(108),
        "the batch being built"
    );
    batches.take();
    assert!(!batches.has_final_batch());
    batches.idle_progress(Lsn(200));
    assert!(
        batches.has_final_batch(),
        "progress beyond what was handed out"
    );
    assert_eq!(batches.handed_out_upto(Lsn(50)), Lsn(200));
    assert_eq!(batches.handed_out_upto(Lsn(300)), Lsn(300));
}

/// A block of `rows` one-column rows (big-endian int4) whose last row is at `ordinal`.
fn block(lsn: u64, ordinal: u64, rows: usize) -> ChangeEvent {
    struct Int4;
    impl cdc_core::FieldDecoder for Int4 {
        fn layout(&self, _column: usize) -> cdc_core::FieldLayout {
            cdc_core::FieldLayout::Int4
        }
        fn decode(
            &self,
            _column: usize,
            data: &bytes::Bytes,
            range: std::ops::Range<usize>,
        ) -> Result<Value, cdc_core::Error> {
            let bytes: [u8; 4] = data[range]
                .try_into()
                .map_err(|_| cdc_core::Error::protocol("length"))?;
            Ok(Value::Int4(i32::from_be_bytes(bytes)))
        }
    }
    let data = bytes::Bytes::from(vec![0u8; 4 * rows]);
    let spans = (0..rows)
        .map(|r| cdc_core::FieldSpan::new(4 * r, 4).unwrap())
        .collect();
    let rows = cdc_core::RowBlock::new(data, spans, 1, Arc::new(Int4)).unwrap();
    at(
        lsn,
        ordinal,
        EventKind::InsertBlock {
            table: table(),
            rows,
        },
    )
}

#[test]
fn a_block_counts_as_its_rows_against_the_event_limit() {
    let start = Instant::now();
    let mut batches = Batches::new(RULES);
    // Blocks of two rows: two of them stand for four events, over the limit of three.
    batches.push_event(block(0x10, 1, 2));
    batches.push_event(block(0x10, 3, 2));
    batches.push_event(block(0x10, 5, 2));
    assert!(batches.fill(start).full);
    let first = batches.take();
    assert_eq!(
        first.len(),
        2,
        "two blocks of two rows reach the limit of three"
    );
    assert!(
        !batches.fill(start).full,
        "the last block alone is under it"
    );
    assert_eq!(batches.take().len(), 1);
}
