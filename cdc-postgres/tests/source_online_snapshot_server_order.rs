//! The online snapshot of tables whose key order only the server knows (issue 44, case 8)
//! against a real cluster: text under an ICU collation (whose order is far from byte
//! order), an enum, `inet`, `interval` and a domain, read in chunks while writers insert,
//! update, move and delete keys, with the server comparing streamed keys with the merge's
//! boundaries. The sink ends equal to `SELECT *` as a strict multiset, and no table is
//! read whole.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{EventKind, SnapshotMarker};
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::online::*;
use support::*;

const TABLES: [&str; 4] = [
    "public.names",
    "public.tagged",
    "public.hosts",
    "public.spans",
];

/// The schema, with `collation` for the text keys (an ICU one when the server has ICU).
fn schema(collation: &str) -> String {
    format!(
        "CREATE DOMAIN public.label AS text COLLATE {collation};
         CREATE TABLE public.names (name text COLLATE {collation} PRIMARY KEY, n int);
         CREATE TABLE public.tagged (kind public.mood, label public.label, v int,
             PRIMARY KEY (kind, label));
         CREATE TABLE public.hosts (addr inet PRIMARY KEY, seen int);
         CREATE TABLE public.spans (span interval PRIMARY KEY, note text);
         INSERT INTO public.names
             SELECT (ARRAY['a', 'B', 'é', 'Z', 'ä', 'b'])[1 + g % 6] || g, g FROM generate_series(1, 3000) g;
         INSERT INTO public.tagged
             SELECT (ARRAY['sad', 'meh', 'ok', 'happy'])[1 + g % 4]::public.mood,
                    (ARRAY['x', 'Y', 'é'])[1 + g % 3] || g, g FROM generate_series(1, 1200) g;
         INSERT INTO public.hosts SELECT ('10.' || (g % 3) || '.' || (g / 256) || '.' || (g % 256))::inet, g
             FROM generate_series(1, 1500) g;
         INSERT INTO public.spans SELECT make_interval(days => g % 40, mins => g), 'n' || g
             FROM generate_series(1, 900) g;
         CREATE PUBLICATION pub FOR TABLE public.names, public.tagged, public.hosts, public.spans;"
    )
}

/// Writes while the snapshot runs: inserts, updates, key changes across the table (a
/// case change moves a name far in the collation's order) and deletes.
async fn write_load(cluster: &Cluster, rounds: std::ops::Range<usize>) {
    let client = cluster.connect("postgres").await.unwrap();
    for i in rounds {
        let g = 1 + (i * 37) % 3000;
        let prefix = ["a", "B", "é", "Z", "ä", "b"][g % 6];
        let upper = prefix.to_uppercase();
        client
            .batch_execute(&format!(
                "BEGIN;
                 INSERT INTO public.names VALUES ('{new}', {i}) ON CONFLICT DO NOTHING;
                 UPDATE public.names SET n = n + 1 WHERE name = 'a{u}';
                 UPDATE public.names SET name = '{upper}{g}x' WHERE name = '{prefix}{g}';
                 DELETE FROM public.names WHERE name = 'b{d}';
                 UPDATE public.tagged SET v = v + 1 WHERE label = 'Y{t}';
                 UPDATE public.tagged SET kind = 'happy' WHERE kind = 'sad' AND label = 'x{t3}';
                 DELETE FROM public.tagged WHERE label = 'é{t2}';
                 INSERT INTO public.tagged VALUES ('meh', 'new{i}', {i});
                 UPDATE public.hosts SET addr = ('192.168.' || {i} % 200 || '.' || {i} % 250)::inet
                     WHERE addr = ('10.1.' || {h} / 256 || '.' || {h} % 256)::inet;
                 UPDATE public.hosts SET seen = seen + 1 WHERE addr = ('10.0.' || {h} / 256 || '.' || {h} % 256)::inet;
                 UPDATE public.spans SET span = span + interval '1 month' WHERE note = 'n{s}';
                 DELETE FROM public.spans WHERE note = 'n{s2}';
                 COMMIT;",
                new = ["Ä", "z", "É", "A"][i % 4].to_owned() + &i.to_string(),
                u = 1 + (i * 6) % 3000,
                d = 6 * (1 + i % 500),
                t = 1 + (i * 7) % 1200,
                t2 = 2 + 3 * (i % 400),
                t3 = 3 + 3 * (i % 400),
                h = 1 + (i * 13) % 1500,
                s = 1 + (i * 11) % 900,
                s2 = 1 + (i * 17) % 900,
            ))
            .await
            .unwrap();
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// An ICU collation whose order is far from byte order, when the server has ICU; else the
/// database's default (which pgcdc does not order itself unless it is `C`).
async fn linguistic_collation(cluster: &Cluster) -> String {
    let client = cluster.connect("postgres").await.unwrap();
    let icu = client
        .query_opt(
            "SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu'",
            &[],
        )
        .await
        .unwrap();
    if icu.is_some() {
        "\"und-x-icu\"".to_owned()
    } else {
        "pg_catalog.\"default\"".to_owned()
    }
}

/// A cluster with the tables, their text keys under [`linguistic_collation`] (returned).
async fn cluster_with_tables() -> (Cluster, String) {
    let cluster = Cluster::new().await.unwrap();
    let collation = linguistic_collation(&cluster).await;
    // An enum value added out of order (its sort order is not its creation order),
    // committed before it is used.
    cluster
        .execute("CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy')")
        .await
        .unwrap();
    cluster
        .execute("ALTER TYPE public.mood ADD VALUE 'meh' BEFORE 'ok'")
        .await
        .unwrap();
    cluster.execute(&schema(&collation)).await.unwrap();
    (cluster, collation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_only_the_server_orders_are_read_in_chunks_under_concurrent_writes() {
    let (cluster, collation) = cluster_with_tables().await;
    let handle = MemoryHandle::default();
    let mut options = online(&cluster, &TABLES, 100);
    options.snapshot_workers = 3;
    let (mut running, stats) = spawn_with_stats(options, &handle);
    write_load(&cluster, 0..400).await;
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    wait_for_snapshot_completed(&handle, 0).await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
    assert_backfill_announced_once(&handle.changes());
    assert!(
        stats.snapshot().tables_read_whole.is_empty(),
        "{:?}",
        stats.snapshot().tables_read_whole
    );
    // Every table was read in chunks of at most twice the chunk size.
    for table in TABLES {
        let chunks = handle
            .changes()
            .iter()
            .filter(|e| {
                matches!(&e.kind,
                    EventKind::Snapshot(SnapshotMarker::ChunkCompleted { table: t, rows, .. })
                        if t.to_string() == table && *rows <= 200)
            })
            .count();
        assert!(
            chunks >= 5,
            "{table} was read in {chunks} chunks ({collation})"
        );
    }
}

/// Connections lost while keys wait for the server's comparisons: every client session
/// (the chunk readers, the one comparing keys) and the walsender terminated between
/// bursts of writes, six times during the copy. Held events are streamed again by the new
/// session, a comparison that failed is asked again, and the sink still ends equal to
/// `SELECT *` with no position twice and nothing applied that a multiset could not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_ordered_keys_survive_lost_connections() {
    let (cluster, _) = cluster_with_tables().await;
    let handle = MemoryHandle::default();
    let mut options = online(&cluster, &TABLES, 20);
    options.snapshot_workers = 2;
    let mut running = spawn(options, &handle);
    for burst in 0..6 {
        write_load(&cluster, burst * 40..(burst + 1) * 40).await;
        if burst == 0 {
            let completed = handle.changes().iter().any(|e| {
                matches!(
                    e.kind,
                    EventKind::Snapshot(SnapshotMarker::Completed { .. })
                )
            });
            assert!(!completed, "the copy ended before the first fault");
        }
        let admin = cluster.connect("postgres").await.unwrap();
        admin
            .batch_execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE backend_type IN ('client backend', 'walsender') AND pid <> pg_backend_pid()",
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
}
