//! Debezium records in the file sink: one line each in the multiplexed file, and after a
//! crash at any batch the files hold what an uninterrupted run writes — also when the
//! crash falls inside a transaction (its `transaction` blocks and END record go on) or
//! inside a snapshot (its rows stay `op: "r"`, labelled as before).

use std::path::Path;

use cdc_core::{
    ChangeEvent, ErrorKind, EventKind, Lsn, SinkBatch, SnapshotMarker, TableName, Value,
};

use super::tests::{contents, workload};
use super::*;
use crate::debezium::DebeziumOptions;
use crate::testing::{self, batch, pos, text};

fn debezium_options(dir: &Path) -> FileSinkOptions {
    let mut debezium = DebeziumOptions::new("srv", "shop");
    debezium.transaction_metadata = true;
    FileSinkOptions {
        layout: FileLayout::Multiplexed,
        debezium: Some(debezium),
        ..FileSinkOptions::new(dir)
    }
}

fn marker(position: cdc_core::Position, marker: SnapshotMarker) -> ChangeEvent {
    ChangeEvent {
        lsn: Lsn::ZERO,
        position,
        kind: EventKind::Snapshot(marker),
    }
}

/// A snapshot of five rows, then the twelve transactions of the Feldera tests, cut into
/// batches of two events (three with a completion marker): batches end inside the
/// snapshot and inside transactions.
fn events_in_small_batches() -> Vec<SinkBatch> {
    let orders = TableName::new("public", "orders");
    let schema = workload()[0]
        .batch
        .events
        .iter()
        .find_map(|e| e.table().cloned())
        .unwrap();
    let mut events = vec![
        marker(pos(900, 0), SnapshotMarker::Started),
        marker(pos(900, 1), SnapshotMarker::TableStarted(orders.clone())),
    ];
    for i in 0..5u64 {
        events.push(testing::insert(
            pos(900, 2 + i),
            &schema,
            vec![Value::Int4(100 + i as i32), text("snap")],
        ));
    }
    events.push(marker(
        pos(900, 7),
        SnapshotMarker::TableCompleted {
            table: orders,
            rows: 5,
        },
    ));
    events.push(marker(
        pos(900, 8),
        SnapshotMarker::Completed {
            consistent_point: Lsn(950),
        },
    ));
    events.extend(workload().into_iter().flat_map(|b| b.batch.events));
    // As the source's batches: a table's and the snapshot's completion go with the
    // batch before them.
    let completion = |e: &ChangeEvent| {
        matches!(
            e.kind,
            EventKind::Snapshot(
                SnapshotMarker::TableCompleted { .. } | SnapshotMarker::Completed { .. }
            )
        )
    };
    let mut batches: Vec<Vec<ChangeEvent>> = Vec::new();
    for event in events {
        match batches.last_mut() {
            Some(last) if last.len() < 2 || completion(&event) => last.push(event),
            _ => batches.push(vec![event]),
        }
    }
    batches
        .into_iter()
        .enumerate()
        .map(|(i, events)| batch(i as u64, events))
        .collect()
}

/// The file's lines with the processing times (`ts_ms`, `ts_us`, `ts_ns` of the envelope
/// and of a snapshot's rows) set aside: they are the wall clock's.
fn normalized(dir: &Path) -> Vec<String> {
    let files = contents(dir);
    assert_eq!(files.keys().collect::<Vec<_>>(), [MULTIPLEXED_FILE]);
    let time = regex_lite_times();
    files[MULTIPLEXED_FILE].lines().map(time).collect()
}

/// Replaces every `"ts_ms":<n>`, `"ts_us":<n>`, `"ts_ns":<n>` by the name alone.
fn regex_lite_times() -> impl Fn(&str) -> String {
    |line: &str| {
        let mut out = String::with_capacity(line.len());
        let mut rest = line;
        while let Some(at) = ["\"ts_ms\":", "\"ts_us\":", "\"ts_ns\":"]
            .iter()
            .filter_map(|k| rest.find(k).map(|i| (i, k.len())))
            .min()
        {
            let (i, len) = at;
            out.push_str(&rest[..i + len]);
            rest = rest[i + len..].trim_start_matches(|c: char| c.is_ascii_digit());
            out.push('_');
        }
        out.push_str(rest);
        out
    }
}

async fn open(options: FileSinkOptions) -> (FelderaFileSink, Option<ResumeToken>) {
    let mut sink = FelderaFileSink::new(options).unwrap();
    let token = sink.open(Acknowledger::channel().0).await.unwrap();
    (sink, token)
}

async fn feed(sink: &mut FelderaFileSink, token: Option<&ResumeToken>, batches: &[SinkBatch]) {
    for b in batches {
        if token.is_some_and(|t| b.batch.last_position().is_some_and(|p| t.covers(p))) {
            continue;
        }
        sink.write(b.clone()).await.unwrap();
        sink.checkpoint(&b.resume_token).await.unwrap();
    }
}

#[tokio::test]
async fn debezium_records_after_a_crash_are_those_of_an_uninterrupted_run() {
    let batches = events_in_small_batches();
    let reference_dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(debezium_options(reference_dir.path())).await;
    feed(&mut sink, None, &batches).await;
    drop(sink);
    let expected = normalized(reference_dir.path());
    // Five snapshot rows (the last one labelled), then the transactions' records with
    // their BEGIN and END records.
    let snapshot: Vec<&String> = expected
        .iter()
        .filter(|l| l.contains("\"op\":\"r\""))
        .collect();
    assert_eq!(snapshot.len(), 5);
    assert!(
        snapshot[0].contains("\"snapshot\":\"first\""),
        "{}",
        snapshot[0]
    );
    assert!(
        snapshot[4].contains("\"snapshot\":\"last\""),
        "{}",
        snapshot[4]
    );
    assert_eq!(
        expected
            .iter()
            .filter(|l| l.contains("\"status\":\"END\""))
            .count(),
        12
    );

    for cut in 0..batches.len() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, _) = open(debezium_options(dir.path())).await;
        feed(&mut sink, None, &batches[..cut]).await;
        // One more batch written, never checkpointed: withdrawn at reopen.
        sink.write(batches[cut].clone()).await.unwrap();
        drop(sink);
        let (mut sink, token) = open(debezium_options(dir.path())).await;
        feed(&mut sink, token.as_ref(), &batches).await;
        drop(sink);
        assert_eq!(normalized(dir.path()), expected, "crash after batch {cut}");
    }
}

#[tokio::test]
async fn a_directory_keeps_the_format_it_was_written_in() {
    let dir = tempfile::tempdir().unwrap();
    let (sink, _) = open(debezium_options(dir.path())).await;
    drop(sink);
    let feldera = FileSinkOptions {
        layout: FileLayout::Multiplexed,
        ..FileSinkOptions::new(dir.path())
    };
    let err = FelderaFileSink::new(feldera)
        .unwrap()
        .open(Acknowledger::channel().0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("Debezium"), "{err}");
    // Debezium records go to the multiplexed file only.
    let per_table = FileSinkOptions {
        layout: FileLayout::PerTable,
        ..debezium_options(dir.path())
    };
    assert_eq!(
        FelderaFileSink::new(per_table).unwrap_err().kind(),
        ErrorKind::Config
    );
}
