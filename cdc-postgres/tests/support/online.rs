//! Shared helpers of the online snapshot suites: options, the assertions every suite
//! makes on the in-memory sink, and the tables and write load they snapshot.

use std::time::Duration;

use cdc_core::{EventKind, SnapshotMarker};
use cdc_postgres::conn::SnapshotMode;
use cdc_postgres::source::PgSourceOptions;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;

use super::options;

pub fn online(cluster: &Cluster, tables: &[&str], chunk_rows: usize) -> PgSourceOptions {
    let mut options = options(cluster, tables);
    options.config.snapshot = SnapshotMode::Online;
    options.backfill_chunk_rows = chunk_rows;
    options
}

/// No position applied twice, and nothing the multiset sink could not apply (a second
/// insert of a row it holds, an update or delete of one it lacks).
pub fn assert_no_position_twice_and_no_anomaly(handle: &MemoryHandle) {
    assert!(
        handle.duplicate_positions().is_empty(),
        "{:?}",
        handle.duplicate_positions()
    );
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
}

/// Waits until the sink holds a `SnapshotMarker::Completed` after event `from` (the
/// sink's state can equal the tables before an empty last chunk is placed).
pub async fn wait_for_snapshot_completed(handle: &MemoryHandle, from: usize) {
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
pub fn assert_backfill_announced_once(events: &[cdc_core::ChangeEvent]) {
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
pub fn chunk_rows(handle: &MemoryHandle) -> (u64, usize) {
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

pub const SCHEMA: &str = "
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

pub const TABLES: [&str; 4] = [
    "public.items",
    "public.\"Mixed Case\"",
    "public.codes",
    "public.events",
];

/// Writes while the snapshot runs: inserts, updates (also of TOASTed rows without touching
/// the TOASTed column), key changes that move rows across chunks, deletes and re-inserts
/// of the same key, and one large transaction spanning several chunk reads.
pub async fn write_load(cluster: &Cluster, rounds: usize) {
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
