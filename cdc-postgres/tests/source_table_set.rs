//! A stream's table set changing between runs, against a real cluster: a table removed and
//! added back, a table added to a stream that began with the consistent snapshot or with
//! none. Every run ends with the in-memory sink (a strict multiset: a second insert of a
//! row, a delete or update of a row it lacks are anomalies) equal to `SELECT *` where the
//! stream promises it, and with no position applied twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{ChangeEvent, EventKind, SnapshotMarker, TableName};
use cdc_postgres::conn::SnapshotMode;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::online::*;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(90);

fn name(table: &str) -> TableName {
    TableName::parse(table).unwrap()
}

/// Chunks of `table` placed in `events`.
fn chunks_of(events: &[ChangeEvent], table: &str) -> usize {
    let table = name(table);
    events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Snapshot(SnapshotMarker::ChunkStarted { table: t, .. }) if *t == table))
        .count()
}

fn truncated(events: &[ChangeEvent], table: &str) -> bool {
    let table = name(table);
    events.iter().any(
        |e| matches!(&e.kind, EventKind::Truncate { tables, .. } if tables.iter().any(|t| t.name == table)),
    )
}

/// The `TableStarted` and `TableCompleted` row counts of `table` in `events`.
fn table_markers(events: &[ChangeEvent], table: &str) -> (usize, Vec<u64>) {
    let table = name(table);
    let started = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Snapshot(SnapshotMarker::TableStarted(t)) if *t == table))
        .count();
    let completed = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Snapshot(SnapshotMarker::TableCompleted { table: t, rows })
                if *t == table =>
            {
                Some(*rows)
            }
            _ => None,
        })
        .collect();
    (started, completed)
}

async fn write(cluster: &Cluster, round: u32) {
    let client = cluster.connect("postgres").await.unwrap();
    client
        .batch_execute(&format!(
            "UPDATE public.a SET v = v || '!' WHERE id % 10 = {r};
             UPDATE public.b SET v = v || '?' WHERE id % 10 = {r};
             DELETE FROM public.b WHERE id % 13 = {r};
             INSERT INTO public.b SELECT g, 'new' FROM generate_series({lo}, {hi}) g;
             UPDATE public.k SET v = v || '#' WHERE n % 10 = {r};
             INSERT INTO public.k SELECT g % 7, 'dup' FROM generate_series(1, 20) g;",
            r = round % 10,
            lo = 10_000 + round * 100,
            hi = 10_000 + round * 100 + 49,
        ))
        .await
        .unwrap();
}

const SCHEMA: &str = "
    CREATE TABLE public.a (id int PRIMARY KEY, v text);
    CREATE TABLE public.b (id int PRIMARY KEY, v text);
    CREATE TABLE public.k (n int, v text);
    ALTER TABLE public.k REPLICA IDENTITY FULL;
    INSERT INTO public.a SELECT g, 'a' || g FROM generate_series(1, 1500) g;
    INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 1000) g;
    INSERT INTO public.k SELECT g % 50, 'k' || (g % 50) FROM generate_series(1, 600) g;
    CREATE PUBLICATION pub FOR TABLE public.a, public.b, public.k;";

/// Runs `options` while round `round` of writes goes on, until the sink equals `tables`
/// (and, when `copies`, the backfill said it completed); returns the run's events, after
/// checking that no position came twice and the multiset sink saw no anomaly.
async fn run_until_equal(
    cluster: &Cluster,
    handle: &MemoryHandle,
    options: cdc_postgres::source::PgSourceOptions,
    tables: &[&str],
    round: u32,
    copies: bool,
) -> Vec<ChangeEvent> {
    let from = handle.changes().len();
    let mut running = spawn(options, handle);
    write(cluster, round).await;
    running
        .wait_for_equal(cluster, handle, tables, TIMEOUT)
        .await;
    if copies {
        wait_for_snapshot_completed(handle, from).await;
    }
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(handle);
    handle.changes()[from..].to_vec()
}

/// Issue 44, case 1: `--table a --table b`, then `--table a`, then both again. The sink's
/// copy of a table that left the stream misses its changes since: when it comes back it
/// is truncated and copied anew (a keyless table too), never inserted a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_removed_and_added_back_is_copied_anew_not_twice() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let all = ["public.a", "public.b", "public.k"];
    let handle = MemoryHandle::default();
    let online_all = || online(&cluster, &all, 300);
    run_until_equal(&cluster, &handle, online_all(), &all, 1, true).await;
    // Without b and k: their changes are not delivered.
    let only_a = online(&cluster, &["public.a"], 300);
    run_until_equal(&cluster, &handle, only_a, &["public.a"], 2, false).await;
    write(&cluster, 3).await;
    assert_ne!(
        select_text(&cluster, "public.b").await,
        sink_text(&handle, "public.b"),
        "the test needs b's copy to be stale"
    );

    // Back: copied anew while writes go on.
    let later = run_until_equal(&cluster, &handle, online_all(), &all, 4, true).await;
    assert_eq!(chunks_of(&later, "public.a"), 0, "a was copied again");
    for table in ["public.b", "public.k"] {
        assert!(truncated(&later, table), "{table} was not reset");
        let (started, completed) = table_markers(&later, table);
        assert_eq!(started, 1, "{table}: TableStarted of the new copy");
        assert_eq!(completed.len(), 1, "{table}: one TableCompleted");
    }
    assert_backfill_announced_once(&later);

    // A fourth run copies nothing.
    let later = run_until_equal(&cluster, &handle, online_all(), &all, 5, false).await;
    for table in all {
        assert_eq!(chunks_of(&later, table), 0, "{table} copied again");
        assert!(!truncated(&later, table), "{table} truncated again");
    }
}

/// Issue 44, case 2: a stream that began with the consistent snapshot, rerun with a table
/// added: the new table is copied online (it was never copied at all before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_to_a_consistent_stream_is_copied_online() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let first = options(&cluster, &["public.a"]);
    run_until_equal(&cluster, &handle, first, &["public.a"], 1, true).await;
    write(&cluster, 2).await;
    let all = ["public.a", "public.b", "public.k"];
    // Still `--snapshot consistent`: a table joining a running stream can only be
    // copied online.
    let later = run_until_equal(&cluster, &handle, options(&cluster, &all), &all, 3, true).await;
    assert_eq!(chunks_of(&later, "public.a"), 0, "a was copied again");
    assert!(chunks_of(&later, "public.b") >= 1);
    let (started, completed) = table_markers(&later, "public.b");
    assert_eq!((started, completed.len()), (1, 1), "b copied once");
}

/// Issue 44, case 2 with `--snapshot never`: what the stream began without copying stays
/// uncopied; a table added by a rerun in `never` is streamed only; a table added by a
/// rerun in the online mode is copied — and only that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_stream_copies_only_what_a_later_online_run_adds() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let never = |tables: &[&str]| {
        let mut options = options(&cluster, tables);
        options.config.snapshot = SnapshotMode::Never;
        options
    };
    let mut running = spawn(never(&["public.a"]), &handle);
    // The slot exists once the stream runs: a change after it is delivered.
    wait_for_slot(&cluster, &mut running).await;
    cluster
        .execute("INSERT INTO public.a VALUES (100001, 'after')")
        .await
        .unwrap();
    wait_rows(&handle, "public.a", 1).await;
    running.stop().await;

    let mut running = spawn(never(&["public.a", "public.b"]), &handle);
    wait_for_slot(&cluster, &mut running).await;
    cluster
        .execute("INSERT INTO public.b VALUES (100001, 'after')")
        .await
        .unwrap();
    wait_rows(&handle, "public.b", 1).await;
    running.stop().await;

    let all = ["public.a", "public.b", "public.k"];
    let mut running = spawn(online(&cluster, &all, 300), &handle);
    running
        .wait_for_equal(&cluster, &handle, &["public.k"], TIMEOUT)
        .await;
    wait_for_snapshot_completed(&handle, 0).await;
    cluster
        .execute("INSERT INTO public.a VALUES (100002, 'later')")
        .await
        .unwrap();
    wait_rows(&handle, "public.a", 2).await;
    running.stop().await;
    let events = handle.changes();
    assert_eq!(chunks_of(&events, "public.a"), 0);
    assert_eq!(chunks_of(&events, "public.b"), 0);
    assert!(chunks_of(&events, "public.k") >= 1);
    assert_eq!(
        sink_text(&handle, "public.a").len(),
        2,
        "a: its changes only"
    );
    assert_eq!(
        sink_text(&handle, "public.b").len(),
        1,
        "b: its changes only"
    );
    assert_no_position_twice_and_no_anomaly(&handle);
}

/// Waits until the run's slot exists and is held by its walsender (the stream runs).
async fn wait_for_slot(cluster: &Cluster, running: &mut Running) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let client = cluster.connect("postgres").await.unwrap();
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE active",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if active == 1 {
            return;
        }
        if running.task.is_finished() {
            let result = (&mut running.task).await.expect("pipeline task panicked");
            panic!("the pipeline stopped: {result:?}");
        }
        assert!(std::time::Instant::now() < deadline, "no active slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_rows(handle: &MemoryHandle, table: &str, rows: usize) {
    let seen = handle
        .wait_until(Duration::from_secs(60), |_| {
            sink_text(handle, table).len() == rows
        })
        .await;
    assert!(
        seen,
        "{table} never held {rows} rows: {:?}",
        sink_text(handle, table)
    );
}
