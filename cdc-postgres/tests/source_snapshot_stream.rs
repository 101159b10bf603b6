//! PgSource end to end against a real cluster: snapshot consistent with the stream under
//! concurrent writers, unconfigured tables, TRUNCATE, TOAST, identity and special values.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{EventKind, TableName, Value};
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_stream_under_concurrent_writers_equals_select() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.items (id int PRIMARY KEY, name text, qty numeric, at timestamptz, doc jsonb);
             CREATE TABLE public.\"Mixed Case\" (k bigint PRIMARY KEY, v float8);
             INSERT INTO public.items SELECT g, 'item ' || g, g * 1.5, now(), jsonb_build_object('g', g) FROM generate_series(1, 20000) g;
             INSERT INTO public.\"Mixed Case\" SELECT g, g / 3.0 FROM generate_series(1, 500) g;
             CREATE PUBLICATION pub FOR TABLE public.items, public.\"Mixed Case\";",
        )
        .await
        .unwrap();
    let tables = ["public.items", "public.\"Mixed Case\""];
    let handle = MemoryHandle::default();
    let writer_cluster = cluster.connect("postgres").await.unwrap();
    let writer = tokio::spawn(async move {
        for i in 0..300 {
            let sql = format!(
                "BEGIN;
                 INSERT INTO public.items VALUES ({id}, 'new', {i}, now(), '{{}}');
                 UPDATE public.items SET qty = qty + 1, name = name || '!' WHERE id = {upd};
                 DELETE FROM public.items WHERE id = {del};
                 UPDATE public.\"Mixed Case\" SET v = v * 2 WHERE k = {k};
                 COMMIT;",
                id = 100_000 + i,
                upd = 1 + (i * 37) % 20000,
                del = 1 + (i * 101) % 20000,
                k = 1 + i % 500,
            );
            writer_cluster.batch_execute(&sql).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let running = spawn(options(&cluster, &tables), &handle);
    writer.await.unwrap();
    wait_for_equal(&cluster, &handle, &tables, Duration::from_secs(90)).await;
    let summary = running.stop().await;
    assert!(
        handle.duplicate_positions().is_empty(),
        "{:?}",
        handle.duplicate_positions()
    );
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(summary.confirmed > cdc_core::Lsn::ZERO);
    let snapshot_rows = handle
        .changes()
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Snapshot(cdc_core::SnapshotMarker::Completed { .. })
            )
        })
        .count();
    assert_eq!(snapshot_rows, 1, "exactly one completed snapshot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfigured_table_traffic_is_filtered_and_the_slot_keeps_advancing() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.wanted (id int PRIMARY KEY, v text);
             CREATE TABLE public.noise (id serial PRIMARY KEY, v text);
             CREATE PUBLICATION pub FOR TABLE public.wanted, public.noise;",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let options = options(&cluster, &["public.wanted"]);
    let slot = options.config.slot_name();
    let running = spawn(options, &handle);
    cluster
        .execute("INSERT INTO public.wanted VALUES (1, 'a')")
        .await
        .unwrap();
    wait_for_equal(
        &cluster,
        &handle,
        &["public.wanted"],
        Duration::from_secs(30),
    )
    .await;
    for _ in 0..50 {
        cluster
            .execute("INSERT INTO public.noise (v) SELECT 'x' FROM generate_series(1, 100)")
            .await
            .unwrap();
    }
    wait_slot_caught_up(&cluster, &slot, Duration::from_secs(30)).await;
    running.stop().await;
    assert!(handle.changes().iter().all(|e| {
        e.table()
            .is_none_or(|t| t.name == TableName::new("public", "wanted"))
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_toast_identity_and_special_values_end_to_end() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.a (id int PRIMARY KEY, big text, f float8, n numeric, d date, ts timestamp);
             CREATE TABLE public.b (id int PRIMARY KEY, v text);
             ALTER TABLE public.a ALTER COLUMN big SET STORAGE EXTERNAL;
             ALTER TABLE public.b REPLICA IDENTITY FULL;
             CREATE TABLE public.empty (id int PRIMARY KEY);
             CREATE PUBLICATION pub FOR TABLE public.a, public.b, public.empty;",
        )
        .await
        .unwrap();
    let tables = ["public.a", "public.b", "public.empty"];
    let handle = MemoryHandle::default();
    let running = spawn(options(&cluster, &tables), &handle);
    // Wait for the (empty) snapshot to complete before changing data.
    let completed = handle
        .wait_until(Duration::from_secs(30), |h| {
            h.changes().iter().any(|e| {
                matches!(
                    e.kind,
                    EventKind::Snapshot(cdc_core::SnapshotMarker::Completed { .. })
                )
            })
        })
        .await;
    assert!(completed, "the snapshot did not complete");
    cluster
        .execute(
            "INSERT INTO public.a VALUES
               (1, repeat('x', 20000), 'NaN', 'NaN', 'infinity', '-infinity'),
               (2, repeat('y', 9000), '-Infinity', 'Infinity', '0044-03-15 BC', '12345-01-01 00:00:00.000001'),
               (3, 'short', 1e-300, 123456789012345678901234567890.123456789, '2024-02-29', '2000-01-01');
             INSERT INTO public.b VALUES (1, 'one'), (2, 'two');",
        )
        .await
        .unwrap();
    // An update that does not touch the TOASTed column: it arrives as Unchanged and the
    // sink merges it from the stored row.
    cluster
        .execute("UPDATE public.a SET f = 2.5 WHERE id = 1")
        .await
        .unwrap();
    // Rapid cycles on one row, inside and across transactions.
    cluster
        .execute(
            "BEGIN; INSERT INTO public.b VALUES (3, 'x'); UPDATE public.b SET v = 'y' WHERE id = 3;
             DELETE FROM public.b WHERE id = 3; INSERT INTO public.b VALUES (3, 'z'); COMMIT;",
        )
        .await
        .unwrap();
    cluster
        .execute("UPDATE public.b SET id = 4 WHERE id = 3")
        .await
        .unwrap();
    cluster
        .execute("DELETE FROM public.b WHERE id = 1")
        .await
        .unwrap();
    wait_for_equal(&cluster, &handle, &tables, Duration::from_secs(30)).await;
    let unchanged_seen = handle.changes().iter().any(|e| match &e.kind {
        EventKind::Update { new, .. } => new.iter().any(Value::is_unchanged),
        _ => false,
    });
    assert!(unchanged_seen, "the TOAST column was not sent as unchanged");
    let full_old = handle.changes().iter().any(|e| match &e.kind {
        EventKind::Delete {
            old: Some(old),
            table,
        } => table.name.name == "b" && old.kind == cdc_core::OldRowKind::Full,
        _ => false,
    });
    assert!(
        full_old,
        "REPLICA IDENTITY FULL delete carries the full old row"
    );
    cluster
        .execute("TRUNCATE public.a, public.b")
        .await
        .unwrap();
    wait_for_equal(&cluster, &handle, &tables, Duration::from_secs(30)).await;
    let truncate = handle
        .changes()
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Truncate { tables, .. } => Some(tables.len()),
            _ => None,
        })
        .expect("TRUNCATE delivered as an event");
    assert_eq!(truncate, 2, "one event for both tables");
    running.stop().await;
    assert!(handle.duplicate_positions().is_empty());
}

/// With two workers, a table larger than a quarter of `shared_buffers` is read in one COPY
/// whose rows two tasks decode, and a smaller one above the chunk size in `ctid` ranges:
/// both deliver exactly the table (TOASTed values, NULLs and all), every row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_tables_decoded_on_several_tasks_and_ctid_ranges_both_deliver_every_row_once() {
    // 1MB of shared_buffers: a quarter is 32 pages.
    let cluster = Cluster::builder()
        .setting("shared_buffers", "1MB")
        .setting("log_statement", "all")
        .build()
        .await
        .unwrap();
    cluster
        .execute(
            "CREATE TABLE public.big (id int PRIMARY KEY, body text, blob bytea, n numeric);
             CREATE TABLE public.mid (id int PRIMARY KEY, body text);
             INSERT INTO public.big
               SELECT g, repeat(md5(g::text), 6), CASE WHEN g % 3 = 0 THEN NULL ELSE decode(md5(g::text), 'hex') END,
                      CASE WHEN g % 5 = 0 THEN NULL ELSE g / 7.0 END
               FROM generate_series(1, 4000) g;
             UPDATE public.big SET body = (SELECT string_agg(md5(i::text || id::text), '') FROM generate_series(1, 400) i)
               WHERE id % 500 = 0;
             INSERT INTO public.mid SELECT g, repeat('m', 200) || g FROM generate_series(1, 250) g;
             CREATE PUBLICATION pub FOR TABLE public.big, public.mid;",
        )
        .await
        .unwrap();
    // relpages is set by VACUUM (outside a transaction block).
    cluster
        .execute("VACUUM ANALYZE public.big, public.mid")
        .await
        .unwrap();
    let admin = cluster.connect("postgres").await.unwrap();
    let pages = |table: &'static str| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one(
                    "SELECT relpages::int8 FROM pg_class WHERE oid = $1::text::regclass",
                    &[&table],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let (big_pages, mid_pages) = (pages("public.big").await, pages("public.mid").await);
    assert!(
        big_pages > 32,
        "big must exceed a quarter of shared_buffers: {big_pages}"
    );
    assert!((5..=32).contains(&mid_pages), "mid: {mid_pages} pages");
    let tables = ["public.big", "public.mid"];
    let mut options = options(&cluster, &tables);
    options.snapshot_workers = 2;
    options.snapshot_chunk_pages = 4;
    let handle = MemoryHandle::default();
    let running = spawn(options, &handle);
    wait_for_equal(&cluster, &handle, &tables, Duration::from_secs(60)).await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    for (table, rows) in [("big", 4000), ("mid", 250)] {
        let inserts = handle
            .changes()
            .iter()
            .filter(
                |e| matches!(&e.kind, EventKind::Insert { table: t, .. } if t.name.name == table),
            )
            .count();
        assert_eq!(inserts, rows, "rows of {table} delivered");
    }
    // How each was read, as the server logged the COPYs.
    let log = cluster.log_contents();
    let copies: Vec<&str> = log.lines().filter(|l| l.contains("COPY (SELECT")).collect();
    let of = |table: &str| -> Vec<&str> {
        copies
            .iter()
            .copied()
            .filter(|l| l.contains(&format!("FROM ONLY public.{table}")))
            .collect()
    };
    assert_eq!(of("big").len(), 1, "{copies:#?}");
    assert!(!of("big")[0].contains("ctid"), "{copies:#?}");
    assert!(of("mid").len() >= 2, "{copies:#?}");
    assert!(of("mid").iter().all(|l| l.contains("ctid")), "{copies:#?}");
}
