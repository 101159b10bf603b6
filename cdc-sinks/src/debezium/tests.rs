//! The online snapshot's labels: chunks end their batches, so a held row is written at a
//! batch's end unless its table's copy completed (then what follows decides). Debezium
//! itself is the oracle for the consistent snapshot (`cdc-examples` `debezium_equality`);
//! it has no online snapshot to compare with, so these cases pin the same rules.

use cdc_core::{ChangeEvent, EventKind, ReplicaIdentity, SnapshotMarker, TableName, Value};

use super::*;
use crate::testing::{self, insert, pos};

fn marker(lsn: u64, ordinal: u64, marker: SnapshotMarker) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position: pos(lsn, ordinal),
        kind: EventKind::Snapshot(marker),
    }
}

/// The `source.snapshot` label of every record in `out`, in order.
fn labels(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["value"]["source"]["snapshot"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

#[test]
fn online_chunks_label_the_table_s_first_and_last_rows_across_batches() {
    let a = testing::table("a", &[("id", 23)], &["id"], ReplicaIdentity::Default);
    let b = testing::table("b", &[("id", 23)], &["id"], ReplicaIdentity::Default);
    let name = |t: &str| TableName::new("public", t);
    let mut encoder = DebeziumEncoder::new(DebeziumOptions::new("p", "db"));
    let mut out = Vec::new();
    let row = |table: &cdc_core::SchemaRef, o: u64, id: i32| {
        insert(pos(100, o), table, vec![Value::Int4(id)])
    };
    let chunk = |table: &str, n: u64| SnapshotMarker::ChunkStarted {
        table: name(table),
        chunk: n,
    };
    let done = |table: &str, n: u64, rows: u64| SnapshotMarker::ChunkCompleted {
        table: name(table),
        chunk: n,
        rows,
    };
    // Batch 1: the first chunk of `a` (two rows); the chunk ends the batch.
    for event in [
        marker(100, 1, SnapshotMarker::Started),
        marker(100, 2, SnapshotMarker::TableStarted(name("a"))),
        marker(100, 3, chunk("a", 0)),
        row(&a, 4, 1),
        row(&a, 5, 2),
        marker(100, 6, done("a", 0, 2)),
    ] {
        encoder.encode(&event, &mut out).unwrap();
    }
    encoder.end_of_batch(&mut out);
    assert_eq!(
        labels(&out),
        ["first", "true"],
        "the chunk's last row is not the table's"
    );
    // Batch 2: `a`'s last chunk and the table's completion; its last row waits.
    out.clear();
    for event in [
        marker(100, 7, chunk("a", 1)),
        row(&a, 8, 3),
        marker(100, 9, done("a", 1, 1)),
        marker(
            100,
            10,
            SnapshotMarker::TableCompleted {
                table: name("a"),
                rows: 3,
            },
        ),
    ] {
        encoder.encode(&event, &mut out).unwrap();
    }
    encoder.end_of_batch(&mut out);
    assert!(
        labels(&out).is_empty(),
        "held until the next table or the end"
    );
    // Batch 3: table `b` (one row), then the snapshot's completion.
    for event in [
        marker(100, 11, SnapshotMarker::TableStarted(name("b"))),
        marker(100, 12, chunk("b", 0)),
        row(&b, 13, 1),
        marker(100, 14, done("b", 0, 1)),
        marker(
            100,
            15,
            SnapshotMarker::TableCompleted {
                table: name("b"),
                rows: 1,
            },
        ),
        marker(
            100,
            16,
            SnapshotMarker::Completed {
                consistent_point: cdc_core::Lsn(100),
            },
        ),
    ] {
        encoder.encode(&event, &mut out).unwrap();
    }
    assert_eq!(labels(&out), ["last_in_data_collection", "last"]);
}

#[test]
fn a_streamed_change_between_chunks_writes_the_held_row_first() {
    let a = testing::table("a", &[("id", 23)], &["id"], ReplicaIdentity::Default);
    let name = TableName::new("public", "a");
    let mut encoder = DebeziumEncoder::new(DebeziumOptions::new("p", "db"));
    let mut out = Vec::new();
    for event in [
        marker(100, 1, SnapshotMarker::Started),
        marker(100, 2, SnapshotMarker::TableStarted(name.clone())),
        marker(
            100,
            3,
            SnapshotMarker::ChunkStarted {
                table: name.clone(),
                chunk: 0,
            },
        ),
        insert(pos(100, 4), &a, vec![Value::Int4(1)]),
        marker(
            100,
            5,
            SnapshotMarker::ChunkCompleted {
                table: name.clone(),
                chunk: 0,
                rows: 1,
            },
        ),
        testing::begin(200),
        insert(pos(200, 2), &a, vec![Value::Int4(9)]),
    ] {
        encoder.encode(&event, &mut out).unwrap();
    }
    let ops: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["value"]["op"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert_eq!(
        ops,
        ["r", "c"],
        "the snapshot row before the streamed insert"
    );
    assert_eq!(labels(&out), ["first", "false"]);
}
