//! The online snapshot of tables without a primary key against a real cluster: read whole
//! under one snapshot while the stream waits, copied again after a TRUNCATE when cut
//! short, and a consistent snapshot cut short and rerun online.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{EventKind, SnapshotMarker};
use cdc_postgres::conn::SnapshotMode;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::online::*;
use support::*;

const KEYLESS_SCHEMA: &str = "
    CREATE TABLE public.log (n int, note text, at date);
    ALTER TABLE public.log REPLICA IDENTITY FULL;
    CREATE TABLE public.kv (k int PRIMARY KEY, v text);
    INSERT INTO public.log SELECT
        CASE WHEN g % 13 = 0 THEN NULL ELSE g % 500 END,
        CASE WHEN g % 17 = 0 THEN NULL ELSE 'note ' || (g % 7) END,
        CASE WHEN g % 19 = 0 THEN NULL ELSE date '2024-01-01' + g % 30 END
        FROM generate_series(1, 4000) g;
    INSERT INTO public.kv SELECT g, 'v' FROM generate_series(1, 2000) g;
    CREATE TABLE public.hosts (addr inet PRIMARY KEY, seen int);
    INSERT INTO public.hosts SELECT ('10.0.' || (g / 256) || '.' || (g % 256))::inet, g
        FROM generate_series(1, 1500) g;
    CREATE PUBLICATION pub FOR TABLE public.log, public.kv, public.hosts;";

/// `log` has no key, and is read whole; `hosts` has one whose order only the server knows
/// (`inet`), read in chunks with the server comparing keys.
const KEYLESS_TABLES: [&str; 3] = ["public.log", "public.kv", "public.hosts"];

/// Writes to a table without a key (duplicate rows: one of them updated or deleted by
/// `ctid`; rows with NULLs inserted, updated and deleted, so the old row's NULLs must
/// match) and to a keyed one, in the same transactions.
async fn keyless_write_load(client: &tokio_postgres::Client, rounds: usize, pause: Duration) {
    for i in 0..rounds {
        client
            .batch_execute(&format!(
                "BEGIN;
                 INSERT INTO public.log VALUES ({n}, 'new', date '2025-01-01');
                 UPDATE public.log SET note = note || '!'
                     WHERE ctid = (SELECT ctid FROM public.log WHERE n = {u} LIMIT 1);
                 DELETE FROM public.log
                     WHERE ctid = (SELECT ctid FROM public.log WHERE n = {d} LIMIT 1);
                 INSERT INTO public.log VALUES (NULL, NULL, NULL);
                 UPDATE public.log SET note = 'was null'
                     WHERE ctid = (SELECT ctid FROM public.log WHERE note IS NULL LIMIT 1);
                 DELETE FROM public.log
                     WHERE ctid = (SELECT ctid FROM public.log WHERE n IS NULL AND at IS NULL LIMIT 1);
                 UPDATE public.kv SET v = v || 'x' WHERE k = {k};
                 UPDATE public.hosts SET seen = seen + 1 WHERE addr = '10.0.0.{h}';
                 DELETE FROM public.hosts WHERE addr = '10.0.1.{h}';
                 INSERT INTO public.hosts VALUES ('10.0.1.{h}', {i}) ON CONFLICT DO NOTHING;
                 COMMIT;",
                h = 1 + i % 200,
                n = i % 500,
                u = (i * 7) % 500,
                d = (i * 13) % 500,
                k = 1 + (i * 17) % 2000,
            ))
            .await
            .unwrap();
        tokio::time::sleep(pause).await;
    }
}

/// A table without a primary key is read whole under one snapshot, in pieces of the chunk
/// size, while the stream waits; duplicates and changes to one of several equal rows
/// leave the multiset sink equal to `SELECT *`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_a_primary_key_is_read_whole_under_concurrent_writes() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(KEYLESS_SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(online(&cluster, &KEYLESS_TABLES, 300), &handle);
    let client = cluster.connect("postgres").await.unwrap();
    keyless_write_load(&client, 300, Duration::from_millis(3)).await;
    running
        .wait_for_equal(&cluster, &handle, &KEYLESS_TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
    let pieces = handle
        .changes()
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::Snapshot(SnapshotMarker::ChunkCompleted { table, rows, .. })
                if table.to_string() == "public.log" && *rows <= 300)
        })
        .count();
    assert!(
        pieces >= 10,
        "the table was placed in pieces of the chunk size ({pieces})"
    );
}

/// Stopped while a table without a primary key is being copied: the next run copies it
/// again after a TRUNCATE of it (no key to continue from), and the multiset sink still
/// ends equal to `SELECT *`, never holding a row twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_a_primary_key_cut_short_is_copied_again_after_a_truncate() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(&KEYLESS_SCHEMA.replace("generate_series(1, 4000)", "generate_series(1, 60000)"))
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let writer = {
        let client = cluster.connect("postgres").await.unwrap();
        tokio::spawn(async move {
            keyless_write_load(&client, 200, Duration::from_millis(10)).await;
        })
    };
    let is_log = |table: &cdc_core::TableName| table.to_string() == "public.log";
    // The first run stops for certain while `log` is being copied, at its first piece; the
    // other runs stop at times of the clock.
    spawn(online(&cluster, &KEYLESS_TABLES, 500), &handle)
        .stop_once(&handle, "a piece of public.log", |h| {
            h.changes().iter().any(|e| {
                matches!(&e.kind, EventKind::Snapshot(SnapshotMarker::ChunkCompleted { table, .. })
                    if is_log(table))
            })
        })
        .await;
    assert!(
        !handle.changes().iter().any(|e| matches!(&e.kind,
            EventKind::Snapshot(SnapshotMarker::TableCompleted { table, .. }) if is_log(table))),
        "the first run was to stop before public.log was copied"
    );
    for round in 1..6 {
        let running = spawn(online(&cluster, &KEYLESS_TABLES, 500), &handle);
        tokio::time::sleep(Duration::from_millis(150 + 60 * round)).await;
        running.stop().await;
    }
    writer.await.unwrap();
    let mut running = spawn(online(&cluster, &KEYLESS_TABLES, 500), &handle);
    running
        .wait_for_equal(&cluster, &handle, &KEYLESS_TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    // The change log keeps every run's events.
    let truncated = handle.changes().iter().any(|e| {
        matches!(&e.kind, EventKind::Truncate { tables, .. }
            if tables.iter().any(|t| t.name.to_string() == "public.log"))
    });
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(
        truncated,
        "a run stopped during the copy, and the next one started over"
    );
}

/// A consistent snapshot stopped part-way, then the stream run again in the online mode:
/// the sink drops the partial copy first (a snapshot-restart marker), so the online copy
/// never inserts a row the sink already holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_consistent_snapshot_rerun_online_drops_the_partial_copy_first() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.big (id int PRIMARY KEY, v text);
             INSERT INTO public.big SELECT g, repeat('x', 50) FROM generate_series(1, 300000) g;
             CREATE PUBLICATION pub FOR TABLE public.big;",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let table = cdc_core::TableName::parse("public.big").unwrap();
    let mut options = options(&cluster, &["public.big"]);
    options.config.snapshot = SnapshotMode::Initial;
    options.snapshot_workers = 1;
    options.config.batch.max_events = 1000;
    spawn(options, &handle)
        .stop_once(&handle, "a snapshot row", |h| h.row_count(&table) > 0)
        .await;
    let partial = handle.rows(&table).len();
    assert!(
        partial > 0 && partial < 300_000,
        "stopped part-way ({partial} rows)"
    );
    let mut running = spawn(online(&cluster, &["public.big"], 20_000), &handle);
    running
        .wait_for_equal(&cluster, &handle, &["public.big"], Duration::from_secs(120))
        .await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
    assert!(
        handle
            .changes()
            .iter()
            .any(|e| matches!(e.kind, EventKind::Snapshot(SnapshotMarker::Restarted))),
        "the online run restarted the snapshot"
    );
}
