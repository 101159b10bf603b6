//! The online snapshot against a real cluster: tables read in key-ordered chunks while the
//! stream runs and writers change them, the sink's final state compared with `SELECT *`
//! (Postgres's own output), no position applied twice, and no anomaly in the in-memory
//! sink (a second insert of a key it holds, an update or delete of one it lacks).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{EventKind, SnapshotMarker};
use cdc_postgres::conn::SnapshotMode;
use cdc_postgres::source::PgSourceOptions;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

fn online(cluster: &Cluster, tables: &[&str], chunk_rows: usize) -> PgSourceOptions {
    let mut options = options(cluster, tables);
    options.config.snapshot = SnapshotMode::Online;
    options.backfill_chunk_rows = chunk_rows;
    options
}

/// No position applied twice, and nothing the multiset sink could not apply (a second
/// insert of a row it holds, an update or delete of one it lacks).
fn assert_no_position_twice_and_no_anomaly(handle: &MemoryHandle) {
    assert!(
        handle.duplicate_positions().is_empty(),
        "{:?}",
        handle.duplicate_positions()
    );
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
}

/// Waits until the sink holds a `SnapshotMarker::Completed` after event `from` (the
/// sink's state can equal the tables before an empty last chunk is placed).
async fn wait_for_snapshot_completed(handle: &MemoryHandle, from: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !handle.changes()[from..].iter().any(|e| {
        matches!(
            e.kind,
            EventKind::Snapshot(SnapshotMarker::Completed { .. })
        )
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the online snapshot never said it completed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The backfill in `events` is announced as a whole: one `Started` before anything it
/// placed (table and chunk markers, the TRUNCATE before a copy taken again), one
/// `Completed` after every table's completion.
fn assert_backfill_announced_once(events: &[cdc_core::ChangeEvent]) {
    let at = |wanted: fn(&EventKind) -> bool| -> Vec<usize> {
        events
            .iter()
            .enumerate()
            .filter(|(_, e)| wanted(&e.kind))
            .map(|(i, _)| i)
            .collect()
    };
    let started = at(|k| matches!(k, EventKind::Snapshot(SnapshotMarker::Started)));
    let completed = at(|k| matches!(k, EventKind::Snapshot(SnapshotMarker::Completed { .. })));
    let placed = at(|k| {
        matches!(
            k,
            EventKind::Snapshot(
                SnapshotMarker::TableStarted(_) | SnapshotMarker::ChunkStarted { .. }
            ) | EventKind::Truncate { .. }
        )
    });
    let tables_done = at(|k| {
        matches!(
            k,
            EventKind::Snapshot(SnapshotMarker::TableCompleted { .. })
        )
    });
    assert_eq!(started.len(), 1, "one Started marker");
    assert_eq!(completed.len(), 1, "one Completed marker");
    assert!(
        placed.iter().all(|&i| i > started[0]),
        "Started comes first"
    );
    assert!(
        !tables_done.is_empty() && tables_done.iter().all(|&i| i < completed[0]),
        "Completed comes after every table's completion"
    );
}

/// Snapshot rows delivered per table (inserts between chunk markers).
fn chunk_rows(handle: &MemoryHandle) -> (u64, usize) {
    let mut rows = 0;
    let mut chunks = 0;
    for event in handle.changes() {
        if let EventKind::Snapshot(SnapshotMarker::ChunkCompleted { rows: n, .. }) = event.kind {
            rows += n;
            chunks += 1;
        }
    }
    (rows, chunks)
}

const SCHEMA: &str = "
    CREATE TABLE public.items (id int PRIMARY KEY, name text, qty numeric, big text);
    ALTER TABLE public.items ALTER COLUMN big SET STORAGE EXTERNAL;
    CREATE TABLE public.\"Mixed Case\" (k bigint PRIMARY KEY, v float8);
    CREATE TABLE public.codes (code text COLLATE \"C\", n int, PRIMARY KEY (code, n), note text);
    CREATE TABLE public.events (region int, id uuid, v text, PRIMARY KEY (region, id)) PARTITION BY LIST (region);
    CREATE TABLE public.events_1 PARTITION OF public.events FOR VALUES IN (1);
    CREATE TABLE public.events_2 PARTITION OF public.events FOR VALUES IN (2);
    INSERT INTO public.items SELECT g, 'item ' || g, g * 1.5,
        CASE WHEN g % 100 = 0 THEN repeat(md5(g::text), 200) END FROM generate_series(1, 6000) g;
    INSERT INTO public.\"Mixed Case\" SELECT g, g / 3.0 FROM generate_series(1, 700) g;
    INSERT INTO public.codes SELECT chr(65 + g % 26) || 'é' || g, g % 3, 'n' FROM generate_series(1, 900) g;
    INSERT INTO public.events SELECT 1 + g % 2, gen_random_uuid(), 'e' || g FROM generate_series(1, 1500) g;
    CREATE PUBLICATION pub FOR TABLE public.items, public.\"Mixed Case\", public.codes, public.events
        WITH (publish_via_partition_root = true);";

const TABLES: [&str; 4] = [
    "public.items",
    "public.\"Mixed Case\"",
    "public.codes",
    "public.events",
];

/// Writes while the snapshot runs: inserts, updates (also of TOASTed rows without touching
/// the TOASTed column), key changes that move rows across chunks, deletes and re-inserts
/// of the same key, and one large transaction spanning several chunk reads.
async fn write_load(cluster: &Cluster, rounds: usize) {
    let client = cluster.connect("postgres").await.unwrap();
    for i in 0..rounds {
        let sql = format!(
            "BEGIN;
             INSERT INTO public.items VALUES ({new}, 'new', {i}, NULL);
             UPDATE public.items SET qty = qty + 1, name = name || '!' WHERE id = {upd};
             UPDATE public.items SET id = id + 100000 WHERE id = {mv};
             DELETE FROM public.items WHERE id = {del};
             INSERT INTO public.items VALUES ({del}, 'reborn', 0, NULL) ON CONFLICT DO NOTHING;
             UPDATE public.\"Mixed Case\" SET v = v * 2 WHERE k = {k};
             UPDATE public.codes SET note = note || 'x' WHERE n = {n} AND code LIKE '{c}%';
             UPDATE public.events SET v = v || '!' WHERE id IN (SELECT id FROM public.events ORDER BY v LIMIT 3 OFFSET {i});
             COMMIT;",
            new = 50_000 + i,
            upd = 1 + (i * 37) % 6000,
            mv = 1 + (i * 53) % 6000,
            del = 1 + (i * 101) % 6000,
            k = 1 + i % 700,
            n = i % 3,
            c = char::from(b'A' + (i % 26) as u8),
        );
        client.batch_execute(&sql).await.unwrap();
        if i == rounds / 3 {
            // A large transaction: its changes span many chunk reads.
            client
                .batch_execute(
                    "BEGIN; UPDATE public.items SET qty = qty * 2 WHERE id % 7 = 0;
                     UPDATE public.items SET big = repeat('z', 3000) WHERE id % 500 = 1;
                     SELECT pg_sleep(0.3); COMMIT;",
                )
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_snapshot_under_concurrent_writes_equals_select() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(online(&cluster, &TABLES, 200), &handle);
    write_load(&cluster, 300).await;
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    wait_for_snapshot_completed(&handle, 0).await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
    assert_backfill_announced_once(&handle.changes());
    let (rows, chunks) = chunk_rows(&handle);
    assert!(chunks > 30, "the tables were read in chunks ({chunks})");
    assert!(rows > 0);
    let completed = handle
        .changes()
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Snapshot(SnapshotMarker::TableCompleted { .. })
            )
        })
        .count();
    assert_eq!(completed, TABLES.len(), "every table completed once");
}

/// More readers than tables: the readers share a table, each copying one of its next key
/// ranges (split at the ends of the next chunks, found first) in a transaction of its own,
/// and the ranges are placed together — under the same writes as above, including rows
/// deleted at a range's end between the split and the read, and a partitioned table,
/// quoted names and composite keys split as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_sharing_a_table_under_concurrent_writes_equal_select() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let mut options = online(&cluster, &TABLES, 150);
    options.snapshot_workers = 7;
    let mut running = spawn(options, &handle);
    write_load(&cluster, 300).await;
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
    // Several chunks of one table placed at one point of the stream: their markers share
    // the anchor's commit LSN.
    let mut shared_anchor = false;
    let mut last: Option<(String, cdc_core::Lsn)> = None;
    for event in handle.changes() {
        if let EventKind::Snapshot(SnapshotMarker::ChunkStarted { table, .. }) = &event.kind {
            let here = (table.to_string(), event.position.commit_lsn);
            shared_anchor |= last.as_ref() == Some(&here);
            last = Some(here);
        }
    }
    assert!(
        shared_anchor,
        "some round placed several chunks of one table"
    );
    // The ranges were split where the key order says (a split in another order, e.g.
    // text order of integer keys, gives ranges far larger than a chunk).
    for event in handle.changes() {
        if let EventKind::Snapshot(SnapshotMarker::ChunkCompleted { rows, table, .. }) = &event.kind
        {
            assert!(*rows <= 2 * 150, "a chunk of {table} held {rows} rows");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_that_grows_after_its_end_was_found_is_cut_at_its_cap() {
    // Keys 1000 apart, chunks of 10, two readers: the ends of a round's ranges are found
    // while the round before it reads. The sink holds its acknowledgements, so the
    // pipeline stops reading and the source waits with those ends found; then inserts
    // into every gap make each range ahead several times a chunk.
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.spread (id int PRIMARY KEY, v text);
             INSERT INTO public.spread SELECT g * 1000, 'seed' FROM generate_series(1, 3000) g;
             CREATE PUBLICATION pub FOR TABLE public.spread;",
        )
        .await
        .unwrap();
    let tables = ["public.spread"];
    let chunk = 10u64;
    let handle = MemoryHandle::new(cdc_sinks::memory::MemorySinkOptions {
        async_writes: true,
        async_checkpoints: true,
        ..Default::default()
    });
    let mut options = online(&cluster, &tables, chunk as usize);
    options.snapshot_workers = 2;
    let mut running = spawn(options, &handle);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while chunk_rows(&handle).1 < 10 {
        assert!(std::time::Instant::now() < deadline, "no chunk arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Long enough for the source to fill the pipeline and wait.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster
        .execute(
            "INSERT INTO public.spread SELECT g * 1000 + 1 + g % 7 * 100 + s, 'burst'
             FROM generate_series(1, 3000) g, generate_series(1, 3) s",
        )
        .await
        .unwrap();
    let acks = {
        let handle = handle.clone();
        tokio::spawn(async move {
            loop {
                handle.complete_pending_writes();
                handle.complete_pending_checkpoints();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    running
        .wait_for_equal(&cluster, &handle, &tables, Duration::from_secs(120))
        .await;
    // Acknowledged until the pipeline has stopped: its drain waits for every write.
    running.stop().await;
    acks.abort();
    assert_no_position_twice_and_no_anomaly(&handle);
    let sizes: Vec<u64> = handle
        .changes()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Snapshot(SnapshotMarker::ChunkCompleted { rows, .. }) => Some(rows),
            _ => None,
        })
        .collect();
    assert!(
        sizes.iter().all(|&rows| rows <= 2 * chunk),
        "every chunk within its cap: {sizes:?}"
    );
    assert!(
        sizes.contains(&(2 * chunk)),
        "some range grew past its cap and was cut there: {sizes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_snapshot_continues_after_restarts_without_copying_done_chunks_again() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let chunk = 150;
    let readers = 2;
    let table_rows: u64 = 6000 + 700 + 900 + 1500;
    let writer = {
        let cluster_writes = cluster.connect("postgres").await.unwrap();
        tokio::spawn(async move {
            for i in 0..400 {
                cluster_writes
                    .batch_execute(&format!(
                        "UPDATE public.items SET qty = qty + 1 WHERE id = {};
                         INSERT INTO public.items VALUES ({}, 'w', 1, NULL);",
                        1 + (i * 13) % 6000,
                        70_000 + i
                    ))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let mut restarts = 0u64;
    // Stop part-way several times; every run continues from the sink's durable token.
    for round in 0..4 {
        let mut options = online(&cluster, &TABLES, chunk);
        options.snapshot_workers = readers;
        let running = spawn(options, &handle);
        tokio::time::sleep(Duration::from_millis(400 + 150 * round)).await;
        running.stop().await;
        restarts += 1;
    }
    writer.await.unwrap();
    let mut options = online(&cluster, &TABLES, chunk);
    options.snapshot_workers = readers;
    let mut running = spawn(options, &handle);
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    let (rows, _) = chunk_rows(&handle);
    // Rows written concurrently may be copied by a chunk too; bound by what exists now.
    let now_rows: u64 = {
        let client = cluster.connect("postgres").await.unwrap();
        let mut total = 0;
        for table in TABLES {
            let row = client
                .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                .await
                .unwrap();
            total += row.get::<_, i64>(0) as u64;
        }
        total
    };
    let bound = table_rows.max(now_rows) + 400 + restarts * readers as u64 * chunk as u64;
    assert!(
        rows <= bound,
        "snapshot rows delivered across runs: {rows}, bound {bound}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_snapshot_completes_under_a_short_idle_in_transaction_timeout_and_the_slot_advances()
{
    let cluster = cdc_testkit::ClusterBuilder::new()
        .setting("idle_in_transaction_session_timeout", "1s")
        .build()
        .await
        .unwrap();
    cluster
        .execute(
            "CREATE TABLE public.big (id int PRIMARY KEY, v text);
             INSERT INTO public.big SELECT g, repeat('x', 100) FROM generate_series(1, 40000) g;
             CREATE PUBLICATION pub FOR TABLE public.big;",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let options = online(&cluster, &["public.big"], 100);
    let slot = options.config.slot_name();
    let mut running = spawn(options, &handle);
    // Writes during the backfill; the slot must move while chunks are still being read.
    let client = cluster.connect("postgres").await.unwrap();
    let mut advanced_during_backfill = false;
    let mut first = None;
    let mut polls_during_backfill = 0;
    for i in 0..200 {
        client
            .batch_execute(&format!(
                "UPDATE public.big SET v = 'w{i}' WHERE id = {}",
                1 + i * 173
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let backfilling = !handle.changes().iter().any(|e| {
            matches!(
                e.kind,
                EventKind::Snapshot(SnapshotMarker::TableCompleted { .. })
            )
        });
        polls_during_backfill += usize::from(backfilling);
        if let Some(lsn) = confirmed_flush(&cluster, &slot).await {
            match first {
                None => first = Some(lsn),
                Some(start) if backfilling && lsn > start => advanced_during_backfill = true,
                _ => {}
            }
        }
    }
    running
        .wait_for_equal(&cluster, &handle, &["public.big"], Duration::from_secs(120))
        .await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(
        polls_during_backfill > 5,
        "the snapshot was too quick to observe ({polls_during_backfill} polls)"
    );
    assert!(
        advanced_during_backfill,
        "confirmed_flush_lsn did not move while the snapshot ran ({polls_during_backfill} polls)"
    );
}

/// Copies `public.a` of a new cluster (tables `a` and `b`, both published), stops, then
/// leaves the server idle just past a WAL page header: hint bits set everywhere, a
/// checkpoint, then a WAL switch (the insert position is then just past the next
/// segment's page header, where no record ends: the stream never reports it). Returns the
/// insert positions before and after the switch.
async fn idle_just_past_a_wal_page_header(
    cluster: &Cluster,
    handle: &MemoryHandle,
) -> (cdc_core::Lsn, cdc_core::Lsn) {
    cluster
        .execute(
            "CREATE TABLE public.a (id int PRIMARY KEY, v text);
             CREATE TABLE public.b (id int PRIMARY KEY, v text);
             INSERT INTO public.a SELECT g, 'a' || g FROM generate_series(1, 300) g;
             INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 500) g;
             CREATE PUBLICATION pub FOR TABLE public.a, public.b;",
        )
        .await
        .unwrap();
    let mut running = spawn(online(cluster, &["public.a"], 100), handle);
    running
        .wait_for_equal(cluster, handle, &["public.a"], Duration::from_secs(60))
        .await;
    wait_for_snapshot_completed(handle, 0).await;
    running.stop().await;
    cluster.execute("VACUUM").await.unwrap();
    cluster.execute("CHECKPOINT").await.unwrap();
    let client = cluster.connect("postgres").await.unwrap();
    let before: String = client
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .unwrap()
        .get(0);
    let after: String = client
        .query_one(
            "SELECT pg_switch_wal()::text, pg_current_wal_insert_lsn()::text",
            &[],
        )
        .await
        .unwrap()
        .get(1);
    let after: cdc_core::Lsn = after.parse().unwrap();
    assert_eq!(
        after.0 % (16 << 20),
        40,
        "just past a segment's page header"
    );
    (before.parse().unwrap(), after)
}

/// Waits for a stream given an end to stop by itself, well before other WAL comes (the
/// background writer logs running transactions every 15 s, which would end the wait).
async fn ends_by_itself(running: Running, what: &str) {
    tokio::time::timeout(Duration::from_secs(10), running.task)
        .await
        .unwrap_or_else(|_| panic!("the stream never ended: {what}"))
        .expect("pipeline task panicked")
        .expect("pipeline failed");
}

/// A chunk read on an idle server just past a WAL page header must still let the
/// backfill finish (its merge window closes once the stream is at the page's start), so a
/// stream given an end stops by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_on_an_idle_server_just_past_a_wal_page_header_finishes() {
    let cluster = Cluster::new().await.unwrap();
    let handle = MemoryHandle::default();
    let (before_switch, _) = idle_just_past_a_wal_page_header(&cluster, &handle).await;
    let from = handle.changes().len();
    let mut options = online(&cluster, &["public.a", "public.b"], 100);
    options.end_lsn = Some(before_switch);
    ends_by_itself(
        spawn(options, &handle),
        "the backfill stayed open on the idle server",
    )
    .await;
    wait_for_snapshot_completed(&handle, from).await;
    wait_for_equal(&cluster, &handle, &["public.a", "public.b"], Duration::ZERO).await;
    assert_no_position_twice_and_no_anomaly(&handle);
}

/// An end given as the insert position just past a WAL page header is reached on an
/// idle server (where the stream reports the page's start).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_just_past_a_wal_page_header_is_reached_on_an_idle_server() {
    let cluster = Cluster::new().await.unwrap();
    let handle = MemoryHandle::default();
    let (_, after_switch) = idle_just_past_a_wal_page_header(&cluster, &handle).await;
    let mut options = online(&cluster, &["public.a"], 100);
    options.end_lsn = Some(after_switch);
    ends_by_itself(spawn(options, &handle), "its end was never reached").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_added_on_a_rerun_is_backfilled_alone() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.a (id int PRIMARY KEY, v text);
             CREATE TABLE public.b (id bigint PRIMARY KEY, v text);
             INSERT INTO public.a SELECT g, 'a' || g FROM generate_series(1, 3000) g;
             INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 2000) g;
             CREATE PUBLICATION pub FOR TABLE public.a, public.b;",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(online(&cluster, &["public.a"], 400), &handle);
    running
        .wait_for_equal(&cluster, &handle, &["public.a"], Duration::from_secs(60))
        .await;
    running.stop().await;
    let chunks_of = |table: &str| {
        let name = cdc_core::TableName::parse(table).unwrap();
        handle
            .changes()
            .iter()
            .filter(|e| {
                matches!(&e.kind, EventKind::Snapshot(SnapshotMarker::ChunkStarted { table, .. }) if *table == name)
            })
            .count()
    };
    let a_chunks = chunks_of("public.a");
    assert!(a_chunks >= 8, "{a_chunks}");
    assert_eq!(chunks_of("public.b"), 0);
    // Writes to both while nothing runs; then the same stream with b added.
    cluster
        .execute(
            "UPDATE public.a SET v = v || '!' WHERE id % 10 = 0;
             UPDATE public.b SET v = v || '?' WHERE id % 10 = 0;
             DELETE FROM public.b WHERE id % 7 = 0;",
        )
        .await
        .unwrap();
    let mut running = spawn(online(&cluster, &["public.a", "public.b"], 400), &handle);
    cluster
        .execute("INSERT INTO public.b SELECT g, 'late' FROM generate_series(5000, 5100) g")
        .await
        .unwrap();
    running
        .wait_for_equal(
            &cluster,
            &handle,
            &["public.a", "public.b"],
            Duration::from_secs(60),
        )
        .await;
    running.stop().await;
    assert_eq!(chunks_of("public.a"), a_chunks, "a was copied again");
    assert!(chunks_of("public.b") >= 5);
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(handle.duplicate_positions().is_empty());
}

/// One fault during an online snapshot: the consumer crashes (its unsaved state lost), the
/// walsender is terminated, or the server is killed with `kill -9`.
#[derive(Clone, Copy, Debug)]
enum Fault {
    ConsumerCrash,
    WalsenderKilled,
    ServerKilled,
}

async fn online_snapshot_with_faults(faults: &[(Fault, u64)]) {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    let chunk = 100;
    let readers = 2;
    let mut restarts = 0u64;
    let writes = cluster.connect("postgres").await.unwrap();
    for (round, (fault, after_ms)) in faults.iter().enumerate() {
        let mut options = online(&cluster, &TABLES, chunk);
        options.snapshot_workers = readers;
        let running = spawn(options, &handle);
        for i in 0..20 {
            let n = round * 20 + i;
            let _ = writes
                .batch_execute(&format!(
                    "UPDATE public.items SET qty = qty + 1 WHERE id = {};
                     UPDATE public.items SET id = id + 200000 WHERE id = {};
                     INSERT INTO public.items VALUES ({}, 'f', 1, NULL);",
                    1 + (n * 17) % 6000,
                    1 + (n * 29) % 6000,
                    80_000 + n
                ))
                .await;
        }
        tokio::time::sleep(Duration::from_millis(*after_ms)).await;
        match fault {
            Fault::ConsumerCrash => {
                running.task.abort();
                let _ = running.task.await;
                handle.simulate_crash();
                restarts += 1;
            }
            Fault::WalsenderKilled => {
                cluster.terminate_walsenders().await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                running.stop().await;
                restarts += 1;
            }
            Fault::ServerKilled => {
                cluster.kill9().await.unwrap();
                cluster.start().await.unwrap();
                running.task.abort();
                let _ = running.task.await;
                handle.simulate_crash();
                restarts += 1;
            }
        }
    }
    let mut options = online(&cluster, &TABLES, chunk);
    options.snapshot_workers = readers;
    let mut running = spawn(options, &handle);
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(
        handle.duplicate_positions().is_empty(),
        "{:?}",
        handle.duplicate_positions()
    );
    // The sink's durable log holds every snapshot row it kept across the runs.
    let (rows, _) = chunk_rows(&handle);
    let client = cluster.connect("postgres").await.unwrap();
    let mut table_rows = 0u64;
    for table in TABLES {
        let row = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap();
        table_rows += row.get::<_, i64>(0) as u64;
    }
    let writes = faults.len() as u64 * 20;
    let bound = table_rows + writes + restarts * readers as u64 * chunk as u64;
    assert!(rows <= bound, "snapshot rows {rows}, bound {bound}");
}

fn fault() -> impl proptest::strategy::Strategy<Value = (Fault, u64)> {
    use proptest::prelude::*;
    (
        prop_oneof![
            3 => Just(Fault::ConsumerCrash),
            1 => Just(Fault::WalsenderKilled),
            1 => Just(Fault::ServerKilled),
        ],
        0u64..1500,
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 4,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Faults at points proptest chooses (a new choice on every run of the suite): each
    /// restart continues the snapshot, and the sink ends equal to the tables.
    #[test]
    fn online_snapshot_recovers_from_faults_at_random_points(
        faults in proptest::collection::vec(fault(), 1..4)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(online_snapshot_with_faults(&faults));
    }
}

/// Regressions found by the test above: a consumer crash right after chunks were placed
/// while the stream had moved on idle (past the token's `commit_end`) must not give the
/// next rows positions below the token's, which deduplication would drop; and a crash
/// before the first checkpoint (a slot, no token) must start the online snapshot over,
/// not stream from the slot as if the sink had the tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_crash_among_chunk_rows_continues_the_snapshot() {
    online_snapshot_with_faults(&[(Fault::ConsumerCrash, 300), (Fault::ConsumerCrash, 200)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_crash_before_the_first_checkpoint_starts_the_snapshot_over() {
    online_snapshot_with_faults(&[(Fault::ConsumerCrash, 0)]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resnapshot_of_one_table_converges_while_writes_continue() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.a (id int PRIMARY KEY, v text);
             CREATE TABLE public.b (id int PRIMARY KEY, v text);
             INSERT INTO public.a SELECT g, 'a' || g FROM generate_series(1, 2000) g;
             INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 2000) g;
             CREATE PUBLICATION pub FOR TABLE public.a, public.b;",
        )
        .await
        .unwrap();
    // First run: the consistent snapshot, then streaming.
    let handle = MemoryHandle::default();
    let mut running = spawn(options(&cluster, &["public.a", "public.b"]), &handle);
    running
        .wait_for_equal(
            &cluster,
            &handle,
            &["public.a", "public.b"],
            Duration::from_secs(60),
        )
        .await;
    running.stop().await;
    let events_before = handle.changes().len();
    // Second run: copy b again while writers change both tables.
    let mut options = online(&cluster, &["public.a", "public.b"], 300);
    options.resnapshot = vec![cdc_core::TableName::new("public", "b")];
    let mut running = spawn(options, &handle);
    let client = cluster.connect("postgres").await.unwrap();
    for i in 0..100 {
        client
            .batch_execute(&format!(
                "UPDATE public.a SET v = v || '!' WHERE id = {x};
                 UPDATE public.b SET v = v || '?' WHERE id = {y};
                 UPDATE public.b SET id = id + 10000 WHERE id = {z};
                 INSERT INTO public.b VALUES ({n}, 'new');",
                x = 1 + i * 19,
                y = 1 + i * 17,
                z = 1 + i * 13 + 5,
                n = 20_000 + i
            ))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running
        .wait_for_equal(
            &cluster,
            &handle,
            &["public.a", "public.b"],
            Duration::from_secs(60),
        )
        .await;
    wait_for_snapshot_completed(&handle, events_before).await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(handle.duplicate_positions().is_empty());
    let later = &handle.changes()[events_before..];
    assert_backfill_announced_once(later);
    let name_b = cdc_core::TableName::new("public", "b");
    let name_a = cdc_core::TableName::new("public", "a");
    assert!(
        later.iter().any(|e| matches!(&e.kind, EventKind::Truncate { tables, .. } if tables.iter().any(|t| t.name == name_b))),
        "b was not reset before its new copy"
    );
    let chunks = |name: &cdc_core::TableName| {
        later
            .iter()
            .filter(|e| matches!(&e.kind, EventKind::Snapshot(SnapshotMarker::ChunkStarted { table, .. }) if table == name))
            .count()
    };
    assert!(
        chunks(&name_b) >= 6,
        "b copied in chunks: {}",
        chunks(&name_b)
    );
    assert_eq!(chunks(&name_a), 0, "a was not copied again");
}

/// On a standby (PostgreSQL 16+) nothing can be written: the online snapshot reads its
/// chunks there and places them by the standby's replay position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_snapshot_from_a_standby_equals_select() {
    let primary = Cluster::builder().major(16).build().await.unwrap();
    primary
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 3000) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let standby = primary.standby().await.unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(online(&standby, &["public.t"], 250), &handle);
    // Slot creation on a standby waits for the primary's next running-transactions record.
    let nudge = {
        let primary = primary.connect("postgres").await.unwrap();
        tokio::spawn(async move {
            for i in 0..60 {
                let _ = primary
                    .batch_execute("SELECT pg_log_standby_snapshot()")
                    .await;
                let _ = primary
                    .batch_execute(&format!(
                        "UPDATE public.t SET v = v || '!' WHERE id = {}",
                        1 + i * 41
                    ))
                    .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    nudge.await.unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    running
        .wait_for_equal(&standby, &handle, &["public.t"], Duration::from_secs(120))
        .await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(chunk_rows(&handle).1 >= 12, "read in chunks");
}

/// A lost replication connection during the snapshot: the same run reconnects, drops the
/// chunk rows still queued with the lost session's queue, reads them again, and ends equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walsender_terminated_during_the_snapshot_the_same_run_continues() {
    let cluster = Cluster::new().await.unwrap();
    cluster.execute(SCHEMA).await.unwrap();
    let handle = MemoryHandle::default();
    // Small chunks, so the backfill outlasts several kills.
    let mut running = spawn(online(&cluster, &TABLES, 20), &handle);
    let client = cluster.connect("postgres").await.unwrap();
    let mut kills_during_backfill = 0;
    for i in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        client
            .batch_execute(&format!(
                "UPDATE public.items SET qty = qty + 1 WHERE id % 50 = {i};
                 UPDATE public.items SET id = id + 300000 WHERE id = {};",
                100 + i * 497
            ))
            .await
            .unwrap();
        let completed = handle.changes().iter().any(|e| {
            matches!(
                e.kind,
                EventKind::Snapshot(SnapshotMarker::Completed { .. })
            )
        });
        if cluster.terminate_walsenders().await.unwrap() >= 1 && !completed {
            kills_during_backfill += 1;
        }
    }
    assert!(
        kills_during_backfill >= 2,
        "the backfill ended before the walsender was killed twice ({kills_during_backfill})"
    );
    running
        .wait_for_equal(&cluster, &handle, &TABLES, Duration::from_secs(120))
        .await;
    wait_for_snapshot_completed(&handle, 0).await;
    running.stop().await;
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
    assert!(handle.duplicate_positions().is_empty());
    // Reconnects within the run continue the backfill: it is announced once.
    assert_backfill_announced_once(&handle.changes());
}

/// A chunk is delivered whole and ends its batch (with its table's completion when it is
/// the last): batch limits smaller than a chunk wait for the chunk's end, so a resume
/// token never falls inside a chunk and a sink whose output cannot be withdrawn (the
/// JetStream sink) can publish a chunk as one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chunk_is_whole_in_one_batch_and_ends_it() {
    use cdc_core::Source;
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.items (id int PRIMARY KEY, v text);
             INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 1000) g;
             CREATE PUBLICATION pub FOR TABLE public.items;",
        )
        .await
        .unwrap();
    let mut options = online(&cluster, &["public.items"], 300);
    options.config.batch.max_events = 50;
    let mut source = cdc_postgres::source::PgSource::new(options);
    source.start(None).await.unwrap();
    let writer = cluster.connect("postgres").await.unwrap();
    let mut chunks = 0;
    let mut done = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut i = 0;
    while !done {
        assert!(
            std::time::Instant::now() < deadline,
            "the backfill did not finish"
        );
        i += 1;
        writer
            .execute(
                &format!(
                    "UPDATE public.items SET v = 'w{i}' WHERE id = {}",
                    1 + i % 1000
                ),
                &[],
            )
            .await
            .unwrap();
        let batch = source.next_batch().await.unwrap().unwrap();
        let kinds: Vec<&EventKind> = batch.events.iter().map(|e| &e.kind).collect();
        let Some(start) = kinds
            .iter()
            .position(|k| matches!(k, EventKind::Snapshot(SnapshotMarker::ChunkStarted { .. })))
        else {
            assert!(
                !kinds.iter().any(|k| matches!(
                    k,
                    EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. })
                )),
                "a chunk's end without its start in the batch"
            );
            continue;
        };
        let tail = &kinds[start..];
        let end = tail
            .iter()
            .position(|k| {
                matches!(
                    k,
                    EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. })
                )
            })
            .expect("the chunk ends in the batch it starts in");
        let rest = &tail[end + 1..];
        // After the last chunk: the table's completion, then the snapshot's.
        assert!(
            rest.is_empty()
                || (rest.len() == 2
                    && matches!(
                        rest[0],
                        EventKind::Snapshot(SnapshotMarker::TableCompleted { .. })
                    )
                    && matches!(
                        rest[1],
                        EventKind::Snapshot(SnapshotMarker::Completed { .. })
                    )),
            "the chunk ends its batch: {rest:?}"
        );
        let rows = tail[..end]
            .iter()
            .filter(|k| matches!(k, EventKind::Insert { .. }))
            .count();
        assert!(rows <= 300);
        chunks += 1;
        done = rest.len() == 2;
    }
    assert!(chunks >= 4, "1000 rows in chunks of 300: {chunks}");
    source.close().await.unwrap();
}

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

/// `log` has no key; `hosts` has one whose order pgcdc does not reproduce (`inet`), so it
/// is read whole too.
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
    for round in 0..6 {
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
    let running = spawn(options, &handle);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while handle.rows(&table).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no snapshot row arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.stop().await;
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
