//! Crash and fault tests: the consumer killed (also mid-snapshot), Postgres killed with
//! SIGKILL and restarted, the walsender terminated. After recovery the in-memory sink
//! equals `SELECT *` and, with its token-atomic durability, no position is applied twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{CommitMode, ErrorKind, Pipeline, PipelineConfig};
use cdc_postgres::source::PgSource;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

const TABLES: [&str; 2] = ["public.t1", "public.t2"];

async fn setup(rows: u32) -> Cluster {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(&format!(
            "CREATE TABLE public.t1 (id int PRIMARY KEY, v text, n numeric);
             CREATE TABLE public.t2 (id bigint PRIMARY KEY, payload jsonb);
             INSERT INTO public.t1 SELECT g, 'v' || g, g FROM generate_series(1, {rows}) g;
             INSERT INTO public.t2 SELECT g, jsonb_build_object('g', g) FROM generate_series(1, {rows}) g;
             CREATE PUBLICATION pub FOR TABLE public.t1, public.t2;"
        ))
        .await
        .unwrap();
    cluster
}

/// A random-ish workload: inserts, updates, deletes, one large transaction.
async fn workload(cluster: &Cluster, round: u32) {
    let base = 1_000_000 + round * 10_000;
    cluster
        .execute(&format!(
            "BEGIN;
             INSERT INTO public.t1 SELECT g, 'w', g FROM generate_series({base}, {base} + 999) g;
             UPDATE public.t1 SET v = v || 'u' WHERE id % 7 = {m};
             DELETE FROM public.t2 WHERE id % 11 = {m};
             INSERT INTO public.t2 SELECT g, '{{\"r\": {round}}}' FROM generate_series({base}, {base} + 99) g;
             COMMIT;",
            m = round % 7
        ))
        .await
        .unwrap();
    for i in 0..20 {
        cluster
            .execute(&format!(
                "UPDATE public.t1 SET n = n + 1 WHERE id = {}",
                1 + (round * 31 + i) % 500
            ))
            .await
            .unwrap();
    }
}

async fn finish_and_check(cluster: &Cluster, handle: &MemoryHandle) {
    let mut running = spawn(options(cluster, &TABLES), handle);
    running
        .wait_for_equal(cluster, handle, &TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    assert!(
        handle.duplicate_positions().is_empty(),
        "positions applied twice: {:?}",
        handle.duplicate_positions()
    );
}

/// Kills the consumer at the given times (ms after each start, with a workload round
/// before each), then lets a final run catch up and checks the sink against `SELECT *`.
async fn kill_consumer_at(crashes: &[u64]) {
    let cluster = setup(2_000).await;
    let handle = MemoryHandle::default();
    for (round, crash_ms) in crashes.iter().enumerate() {
        let running = spawn(options(&cluster, &TABLES), &handle);
        workload(&cluster, round as u32).await;
        tokio::time::sleep(Duration::from_millis(*crash_ms)).await;
        running.task.abort();
        let _ = running.task.await;
        handle.simulate_crash();
    }
    workload(&cluster, 9).await;
    finish_and_check(&cluster, &handle).await;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 3,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Crash points chosen by proptest: during the snapshot, mid-stream, between
    /// checkpoints.
    #[test]
    fn consumer_killed_at_random_points_recovers_exactly_once(
        crashes in proptest::collection::vec(0u64..1500, 1..4)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(kill_consumer_at(&crashes));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_mid_snapshot_redoes_it_with_a_restart_marker() {
    let cluster = setup(100_000).await;
    let handle = MemoryHandle::default();
    // Small batches and frequent checkpoints, so durable checkpoints fall inside the copy.
    let mut source_options = options(&cluster, &TABLES);
    source_options.config.batch.max_events = 500;
    let pipeline = Pipeline::new(PgSource::new(source_options), handle.sink(), {
        let mut options = PipelineConfig::default();
        options.checkpoint_interval = Duration::from_millis(5);
        options
    });
    let running = Running {
        shutdown: pipeline.shutdown_handle(),
        task: tokio::spawn(pipeline.run()),
    };
    // Wait for some durable snapshot rows, then crash before the snapshot completes.
    let got_rows = handle
        .wait_until(Duration::from_secs(60), |h| {
            h.durable_token().is_some_and(|t| t.snapshot.is_some())
        })
        .await;
    running.task.abort();
    let _ = running.task.await;
    handle.simulate_crash();
    assert!(got_rows, "no durable checkpoint fell inside the snapshot");
    assert!(
        handle.durable_token().is_some_and(|t| t.snapshot.is_some()),
        "the snapshot completed before the crash; the test needs a bigger table"
    );
    workload(&cluster, 1).await;
    finish_and_check(&cluster, &handle).await;
    {
        assert!(
            handle.changes().iter().any(|e| matches!(
                e.kind,
                cdc_core::EventKind::Snapshot(cdc_core::SnapshotMarker::Restarted)
            )),
            "a snapshot redone after a crash starts with a restart marker"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_and_restarted_mid_stream() {
    let cluster = setup(1_000).await;
    let handle = MemoryHandle::default();
    let running = spawn(options(&cluster, &TABLES), &handle);
    workload(&cluster, 0).await;
    wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(60)).await;
    workload(&cluster, 1).await;
    cluster.kill9().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.start().await.unwrap();
    workload(&cluster, 2).await;
    // The same pipeline reconnects by itself.
    wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120)).await;
    running.stop().await;
    assert!(handle.duplicate_positions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_walsender_is_reconnected() {
    let cluster = setup(100).await;
    let handle = MemoryHandle::default();
    let running = spawn(options(&cluster, &TABLES), &handle);
    for round in 0..3 {
        workload(&cluster, round).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        cluster.terminate_walsenders().await.unwrap();
    }
    workload(&cluster, 7).await;
    wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120)).await;
    running.stop().await;
    assert!(handle.duplicate_positions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_mode_window_lost_by_a_stateful_sink_is_reported_as_a_gap() {
    let cluster = setup(10).await;
    let handle = MemoryHandle::new({
        let mut options = cdc_sinks::memory::MemorySinkOptions::default();
        // The sink never makes anything durable on its own: every checkpoint stays pending.
        options.async_checkpoints = true;
        options
    });
    let mut options = options(&cluster, &TABLES);
    options.config.commit_mode = CommitMode::Completion;
    let slot = options.config.slot_name();
    let pipeline = Pipeline::new(PgSource::new(options), handle.sink(), {
        let mut options = PipelineConfig::default();
        options.checkpoint_interval = Duration::from_millis(100);
        options
    });
    let task = tokio::spawn(pipeline.run());
    // Make the whole snapshot durable so the sink has a token past it, then stream more.
    // (An earlier checkpoint may fall between the two tables' rows: its token would make
    // the restart redo the snapshot, not report the gap.)
    wait_snapshot_completed(&handle).await;
    let snapshot_durable = handle
        .wait_until(Duration::from_secs(30), |h| {
            h.complete_pending_checkpoints();
            h.durable_token().is_some_and(|t| t.snapshot.is_none())
        })
        .await;
    assert!(snapshot_durable, "no checkpoint after the snapshot");
    let durable = handle.durable_token().unwrap();
    workload(&cluster, 0).await;
    // Wait until the slot moved past what the sink has made durable.
    let covered = durable.commit_end.unwrap_or(cdc_core::Lsn::ZERO);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while confirmed_flush(&cluster, &slot).await.unwrap() <= covered {
        assert!(
            std::time::Instant::now() < deadline,
            "slot never advanced in completion mode"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    task.abort();
    let _ = task.await;
    handle.simulate_crash();
    // Restart: the token is older than the slot — a reported gap, not a silent skip.
    let restart = Pipeline::new(
        PgSource::new(support::options(&cluster, &TABLES)),
        handle.sink(),
        pipeline_config(),
    )
    .run();
    let err = tokio::time::timeout(Duration::from_secs(60), restart)
        .await
        .expect("the restart ran on instead of reporting the gap")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
    assert!(
        err.to_string().contains("only covers changes up to"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_source_with_traffic_elsewhere_keeps_the_slot_moving() {
    let cluster = setup(10).await;
    cluster.create_database("other").await.unwrap();
    let handle = MemoryHandle::default();
    let options = options(&cluster, &TABLES);
    let slot = options.config.slot_name();
    let running = spawn(options, &handle);
    wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(30)).await;
    cluster
        .execute_in(
            "other",
            "CREATE TABLE x (v int); INSERT INTO x SELECT generate_series(1, 50000)",
        )
        .await
        .unwrap();
    wait_slot_caught_up(&cluster, &slot, Duration::from_secs(60)).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_connection_lost_midway_is_taken_again() {
    let cluster = setup(150_000).await;
    let handle = MemoryHandle::default();
    // Held writes hold the pipeline, and through its bounded channels the copy: the server
    // stays in the middle of its COPY until released, however fast the machine. Over the
    // Unix socket, whose buffers hold a small part of a table's COPY (a loopback TCP
    // receive buffer may grow to tens of MB and take all of it in).
    handle.hold_writes(true);
    let mut options = options(&cluster, &TABLES);
    let over_socket = cluster.socket_connection_string("postgres", "postgres", None);
    options.config.connection = cdc_postgres::conn::SourceConfig::new(&over_socket, "pub")
        .unwrap()
        .connection;
    let mut running = spawn(options, &handle);
    let copying = handle
        .wait_until(Duration::from_secs(60), |h| h.writes_waiting() > 0)
        .await;
    assert!(copying, "the snapshot never started delivering rows");
    let client = cluster.connect("postgres").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let killed = loop {
        let killed: i64 = client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE query LIKE 'COPY (SELECT%' AND state = 'active' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if killed > 0 || std::time::Instant::now() > deadline {
            break killed;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(killed > 0, "no COPY was running to interrupt");
    handle.hold_writes(false);
    workload(&cluster, 3).await;
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    {
        assert!(handle.changes().iter().any(|e| matches!(
            e.kind,
            cdc_core::EventKind::Snapshot(cdc_core::SnapshotMarker::Restarted)
        )));
    }
    assert!(handle.duplicate_positions().is_empty());
}
