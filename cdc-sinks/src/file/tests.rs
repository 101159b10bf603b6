//! Crash tests of the file sink: whatever point a writer dies at, the files and the token
//! agree, and replaying after the token yields the files of an uninterrupted run.

use std::collections::BTreeMap;
use std::path::Path;

use cdc_core::{
    ChangeEvent, ErrorKind, EventKind, ReplicaIdentity, SchemaRef, SinkBatch, SnapshotMarker, Value,
};

use super::*;
use crate::feldera::{EncoderOptions, Framing, Policies, TruncatePolicy};
use crate::testing::{self, batch, delete, insert, old_full, old_key, pos, text, update};

fn keyed() -> SchemaRef {
    testing::table(
        "orders",
        &[("id", 23), ("note", 25)],
        &["id"],
        ReplicaIdentity::Default,
    )
}

fn bag() -> SchemaRef {
    testing::table("log", &[("a", 23), ("msg", 25)], &[], ReplicaIdentity::Full)
}

/// Twelve transactions over two tables, one batch each.
pub(super) fn workload() -> Vec<SinkBatch> {
    let (k, f) = (keyed(), bag());
    (0..12u64)
        .map(|i| {
            let lsn = 1000 + i * 100;
            let id = Value::Int4((i % 4) as i32);
            let row_event = |o| match i % 3 {
                0 => insert(
                    pos(lsn, o),
                    &k,
                    vec![Value::Int4(i as i32), text(&format!("n{i}"))],
                ),
                1 => update(pos(lsn, o), &k, None, vec![id.clone(), text("u\n\"x\"")]),
                _ => delete(pos(lsn, o), &k, old_key(vec![id.clone(), Value::Null])),
            };
            let events = vec![
                testing::begin(lsn),
                row_event(1),
                insert(pos(lsn, 2), &f, vec![Value::Int4(i as i32), text("m")]),
                update(
                    pos(lsn, 3),
                    &f,
                    old_full(vec![Value::Int4(i as i32), text("m")]),
                    vec![Value::Int4(-1), Value::Unchanged],
                ),
                testing::commit(lsn, 4),
            ];
            batch(i, events)
        })
        .collect()
}

pub(super) fn options(dir: &Path) -> FileSinkOptions {
    FileSinkOptions::new(dir)
}

/// The data files of `dir` (checkpoint and lock files excluded).
pub(super) fn contents(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.starts_with("pgcdc-checkpoint") || name == LOCK_FILE {
            continue;
        }
        out.insert(name, std::fs::read_to_string(entry.path()).unwrap());
    }
    out
}

pub(super) async fn open(options: FileSinkOptions) -> (FelderaFileSink, Option<ResumeToken>) {
    let mut sink = FelderaFileSink::new(options).unwrap();
    let token = sink.open(Acknowledger::channel().0).await.unwrap();
    (sink, token)
}

/// Writes the batches the token does not cover, checkpointing after each.
pub(super) async fn feed(
    sink: &mut FelderaFileSink,
    token: Option<&ResumeToken>,
    batches: &[SinkBatch],
) -> Result<()> {
    for b in batches {
        if token.is_some_and(|t| b.batch.last_position().is_some_and(|p| t.covers(p))) {
            continue;
        }
        sink.write(b.clone()).await?;
        sink.checkpoint(&b.resume_token).await?;
    }
    Ok(())
}

/// Files of an uninterrupted run over `batches`.
pub(super) async fn reference(batches: &[SinkBatch]) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    feed(&mut sink, None, batches).await.unwrap();
    contents(dir.path())
}

/// Number of batches a token covers.
fn covered(batches: &[SinkBatch], token: Option<&ResumeToken>) -> usize {
    batches
        .iter()
        .take_while(|b| token.is_some_and(|t| b.batch.last_position().is_some_and(|p| t.covers(p))))
        .count()
}

#[tokio::test]
async fn writes_one_feldera_file_per_table() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, token) = open(options(dir.path())).await;
    assert_eq!(token, None);
    feed(&mut sink, None, &workload()[..3]).await.unwrap();
    let files = contents(dir.path());
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        vec!["public.log.json", "public.orders.json"]
    );
    assert_eq!(
        files["public.orders.json"],
        "{\"insert\":{\"id\":0,\"note\":\"n0\"}}\n{\"update\":{\"id\":1,\"note\":\"u\\n\\\"x\\\"\"}}\n{\"delete\":{\"id\":2}}\n"
    );
    assert!(files["public.log.json"].starts_with(
        "{\"insert\":{\"a\":0,\"msg\":\"m\"}}\n{\"delete\":{\"a\":0,\"msg\":\"m\"}}\n{\"insert\":{\"a\":-1,\"msg\":\"m\"}}\n"
    ));
    // One sink per directory: the first must close before the directory is reopened.
    drop(sink);
    let (_again, token) = open(options(dir.path())).await;
    assert_eq!(token, Some(workload()[2].resume_token.clone()));
}

#[tokio::test]
async fn data_written_after_the_last_checkpoint_is_dropped_at_open() {
    let batches = workload();
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    feed(&mut sink, None, &batches[..4]).await.unwrap();
    // Written but never checkpointed, then the process "dies".
    sink.write(batches[4].clone()).await.unwrap();
    sink.write(batches[5].clone()).await.unwrap();
    drop(sink);
    let (mut sink, token) = open(options(dir.path())).await;
    assert_eq!(token.as_ref(), Some(&batches[3].resume_token));
    assert_eq!(contents(dir.path()), reference(&batches[..4]).await);
    feed(&mut sink, token.as_ref(), &batches).await.unwrap();
    assert_eq!(contents(dir.path()), reference(&batches).await);
}

#[tokio::test]
async fn a_crash_at_any_checkpoint_step_leaves_files_and_token_in_agreement() {
    let batches = workload();
    let full = reference(&batches).await;
    for point in [
        CrashPoint::AfterDataSync,
        CrashPoint::AfterTempWrite,
        CrashPoint::AfterRename,
    ] {
        for crash_batch in [0usize, 5, 11] {
            let dir = tempfile::tempdir().unwrap();
            let (mut sink, _) = open(options(dir.path())).await;
            feed(&mut sink, None, &batches[..crash_batch])
                .await
                .unwrap();
            drop(sink);
            let crashing = FileSinkOptions {
                crash: Some(CrashInjection {
                    point,
                    abort_process: false,
                }),
                ..options(dir.path())
            };
            let (mut sink, token) = open(crashing).await;
            let err = feed(&mut sink, token.as_ref(), &batches).await.unwrap_err();
            assert!(err.to_string().contains("injected crash"), "{err}");
            assert!(
                sink.write(batches[0].clone()).await.is_err(),
                "a crashed sink refuses work"
            );
            drop(sink);

            let (mut sink, token) = open(options(dir.path())).await;
            let n = covered(&batches, token.as_ref());
            let expected_n = if point == CrashPoint::AfterRename {
                crash_batch + 1
            } else {
                crash_batch
            };
            assert_eq!(n, expected_n, "{point:?} at batch {crash_batch}");
            assert_eq!(
                contents(dir.path()),
                reference(&batches[..n]).await,
                "{point:?} at batch {crash_batch}"
            );
            feed(&mut sink, token.as_ref(), &batches).await.unwrap();
            assert_eq!(
                contents(dir.path()),
                full,
                "{point:?} at batch {crash_batch}"
            );
        }
    }
}

const CHILD_DIR: &str = "CDC_SINKS_CRASH_CHILD_DIR";

/// Runs only as the child of `a_killed_writer_process_recovers_exactly_once`: writes
/// half the workload, then aborts the process inside the next checkpoint.
#[tokio::test]
async fn child_writer_aborts_inside_a_checkpoint() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let batches = workload();
    let (mut sink, _) = open(options(Path::new(&dir))).await;
    feed(&mut sink, None, &batches[..6]).await.unwrap();
    drop(sink);
    let crashing = FileSinkOptions {
        crash: Some(CrashInjection {
            point: CrashPoint::AfterTempWrite,
            abort_process: true,
        }),
        ..options(Path::new(&dir))
    };
    let (mut sink, token) = open(crashing).await;
    let _ = feed(&mut sink, token.as_ref(), &batches).await;
    unreachable!("the checkpoint aborts the process");
}

#[tokio::test]
async fn a_killed_writer_process_recovers_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "file::tests::child_writer_aborts_inside_a_checkpoint",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must die in the checkpoint");
    assert!(
        dir.path().join(state::CHECKPOINT_TMP).exists(),
        "it died after writing the temp checkpoint"
    );
    let batches = workload();
    let (mut sink, token) = open(options(dir.path())).await;
    assert_eq!(token.as_ref(), Some(&batches[5].resume_token));
    assert_eq!(contents(dir.path()), reference(&batches[..6]).await);
    feed(&mut sink, token.as_ref(), &batches).await.unwrap();
    assert_eq!(contents(dir.path()), reference(&batches).await);
}

#[tokio::test]
async fn events_at_or_before_the_token_are_skipped() {
    let batches = workload();
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    feed(&mut sink, None, &batches[..3]).await.unwrap();
    drop(sink);
    let (mut sink, _) = open(options(dir.path())).await;
    // A source that replays from too early: the sink skips what it already holds.
    for b in &batches {
        sink.write(b.clone()).await.unwrap();
    }
    sink.checkpoint(&batches[11].resume_token).await.unwrap();
    assert_eq!(sink.skipped_replays(), 3 * 5);
    assert_eq!(contents(dir.path()), reference(&batches).await);
}

#[tokio::test]
async fn multiplexed_arrays_with_table_key() {
    let dir = tempfile::tempdir().unwrap();
    let opts = FileSinkOptions {
        layout: FileLayout::Multiplexed,
        framing: Framing::ArrayPerTransaction,
        encoder: EncoderOptions {
            table_key: true,
            ..EncoderOptions::default()
        },
        ..options(dir.path())
    };
    let (mut sink, _) = open(opts).await;
    feed(&mut sink, None, &workload()[..1]).await.unwrap();
    let files = contents(dir.path());
    assert_eq!(
        files[MULTIPLEXED_FILE],
        "[{\"table\":\"public.orders\",\"insert\":{\"id\":0,\"note\":\"n0\"}},\
         {\"table\":\"public.log\",\"insert\":{\"a\":0,\"msg\":\"m\"}},\
         {\"table\":\"public.log\",\"delete\":{\"a\":0,\"msg\":\"m\"}},\
         {\"table\":\"public.log\",\"insert\":{\"a\":-1,\"msg\":\"m\"}}]\n"
    );
    let mismatch = FelderaFileSink::new(options(dir.path()))
        .unwrap()
        .open(Acknowledger::channel().0)
        .await
        .unwrap_err();
    assert_eq!(mismatch.kind(), ErrorKind::Config);
}

#[tokio::test]
async fn refuses_directories_and_options_it_cannot_honour() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("public.orders.json"), "not ours").unwrap();
    let err = FelderaFileSink::new(options(dir.path()))
        .unwrap()
        .open(Acknowledger::channel().0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("public.orders.json")).unwrap(),
        "not ours"
    );
    let marker = FileSinkOptions {
        encoder: EncoderOptions {
            policies: Policies {
                truncate: TruncatePolicy::Marker,
                ..Policies::default()
            },
            table_key: false,
        },
        ..options(dir.path())
    };
    assert_eq!(
        FelderaFileSink::new(marker).unwrap_err().kind(),
        ErrorKind::Config
    );
}

#[tokio::test]
async fn a_rejected_batch_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    let k = keyed();
    let bad = batch(
        0,
        vec![
            insert(pos(10, 1), &k, vec![Value::Int4(1), text("ok")]),
            delete(pos(10, 2), &k, None),
        ],
    );
    let err = sink.write(bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected);
    sink.checkpoint(&testing::token(None)).await.unwrap();
    assert!(contents(dir.path()).values().all(String::is_empty));
}

/// A snapshot marker at `position`.
fn marker(position: cdc_core::Position, marker: SnapshotMarker) -> ChangeEvent {
    ChangeEvent {
        lsn: cdc_core::Lsn::ZERO,
        position,
        kind: EventKind::Snapshot(marker),
    }
}

#[tokio::test]
async fn a_restarted_snapshot_discards_its_rows_durably() {
    let k = keyed();
    let row = |p, id| insert(p, &k, vec![Value::Int4(id), text("s")]);
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    let first = batch(
        0,
        vec![
            marker(pos(1, 0), SnapshotMarker::Started),
            row(pos(1, 1), 1),
            row(pos(1, 2), 2),
        ],
    );
    feed(&mut sink, None, std::slice::from_ref(&first))
        .await
        .unwrap();
    drop(sink);
    let (mut sink, token) = open(options(dir.path())).await;
    assert_eq!(token.as_ref(), Some(&first.resume_token));
    // The source abandons the snapshot and starts again.
    sink.write(batch(
        1,
        vec![
            marker(pos(2, 0), SnapshotMarker::Restarted),
            marker(pos(2, 1), SnapshotMarker::Started),
        ],
    ))
    .await
    .unwrap();
    assert_eq!(contents(dir.path())["public.orders.json"], "");
    drop(sink);
    // Even without a checkpoint, the discarded rows stay discarded.
    let (mut sink, _) = open(options(dir.path())).await;
    assert_eq!(contents(dir.path())["public.orders.json"], "");
    sink.write(batch(2, vec![row(pos(3, 1), 3)])).await.unwrap();
    sink.checkpoint(&testing::token(Some(pos(3, 1))))
        .await
        .unwrap();
    assert_eq!(
        contents(dir.path())["public.orders.json"],
        "{\"insert\":{\"id\":3,\"note\":\"s\"}}\n"
    );
}

/// Batches past the size at which write-back starts early (1 MiB), then a restarted
/// snapshot that truncates below where write-back started: the files hold exactly what a
/// run without either would, after a reopen too.
#[tokio::test]
async fn bytes_past_the_early_write_back_survive_truncation_and_reopen() {
    let k = keyed();
    let note = "x".repeat(4096);
    let rows = |lsn: u64, from: i32| -> Vec<ChangeEvent> {
        (0..200)
            .map(|i| {
                insert(
                    pos(lsn, i + 1),
                    &k,
                    vec![Value::Int4(from + i as i32), text(&note)],
                )
            })
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut sink, _) = open(options(dir.path())).await;
    let mut first = vec![marker(pos(1, 0), SnapshotMarker::Started)];
    first.extend(rows(1, 0));
    sink.write(batch(0, first)).await.unwrap();
    sink.checkpoint(&testing::token(Some(pos(1, 200))))
        .await
        .unwrap();
    // 2 × 200 rows of ~4 KiB: write-back starts during these, past the checkpoint.
    sink.write(batch(1, rows(2, 1000))).await.unwrap();
    sink.write(batch(2, rows(3, 2000))).await.unwrap();
    let written = contents(dir.path())["public.orders.json"].len();
    assert!(written > 2 << 20, "{written} bytes");
    // The snapshot starts over: everything since its start goes, below the write-back.
    let mut again = vec![
        marker(pos(4, 0), SnapshotMarker::Restarted),
        marker(pos(4, 1), SnapshotMarker::Started),
    ];
    again.extend(rows(4, 3000).into_iter().take(3).map(|mut e| {
        e.position = pos(4, e.position.ordinal + 1);
        e
    }));
    sink.write(batch(3, again)).await.unwrap();
    sink.write(batch(4, rows(5, 4000))).await.unwrap();
    sink.checkpoint(&testing::token(Some(pos(5, 200))))
        .await
        .unwrap();
    drop(sink);
    let (_sink, token) = open(options(dir.path())).await;
    assert_eq!(token, Some(testing::token(Some(pos(5, 200)))));
    let line = |id: i32| format!("{{\"insert\":{{\"id\":{id},\"note\":\"{note}\"}}}}\n");
    let expected: String = (3000..3003).chain(4000..4200).map(line).collect();
    assert_eq!(contents(dir.path())["public.orders.json"], expected);
}
