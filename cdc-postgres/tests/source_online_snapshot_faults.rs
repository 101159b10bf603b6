//! The online snapshot under faults against a real cluster: the consumer crashes, the
//! walsender is terminated, the chunk readers' connections are terminated or the server
//! killed with `kill -9` at points proptest chooses, and every restart continues the
//! snapshot; the sink ends equal to `SELECT *`, with no position applied twice and at most
//! restarts × readers × chunk size rows read again — asserted after every run.
//!
//! How many: `PGCDC_FAULT_RUNS` runs of 4 or 5 faults each (default 8: at least 32 faults
//! per suite run), plus a run with every kind of fault in turn (the server's `kill -9`
//! among them, so every suite run has one) and the regressions below. Set it to hundreds
//! for a long soak: `PGCDC_FAULT_RUNS=200 cargo test -p cdc-postgres --test
//! source_online_snapshot_faults`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::online::*;
use support::*;

/// One fault during an online snapshot: the consumer crashes (its unsaved state lost, as
/// by SIGKILL), the walsender is terminated, the connections reading chunks (every
/// client session but the test's own) are terminated, or the server is killed with
/// `kill -9`.
#[derive(Clone, Copy, Debug)]
enum Fault {
    ConsumerCrash,
    WalsenderKilled,
    ReadersKilled,
    ServerKilled,
}

/// Runs of the randomized fault test (`PGCDC_FAULT_RUNS`, default 8).
fn fault_runs() -> u32 {
    std::env::var("PGCDC_FAULT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
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
            Fault::ReadersKilled => {
                // The source reads again what the lost connections were reading, on new
                // ones, and goes on; then it stops as after any run.
                // A connection of its own: the writer's may have died with a killed server.
                let admin = cluster.connect("postgres").await.unwrap();
                admin
                    .batch_execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
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
    assert_no_position_twice_and_no_anomaly(&handle);
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
            1 => Just(Fault::ReadersKilled),
            1 => Just(Fault::ServerKilled),
        ],
        0u64..1500,
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: fault_runs(),
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Faults at points proptest chooses (a new choice on every run of the suite): each
    /// restart continues the snapshot, and the sink ends equal to the tables.
    #[test]
    fn online_snapshot_recovers_from_faults_at_random_points(
        faults in proptest::collection::vec(fault(), 4..6)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(online_snapshot_with_faults(&faults));
    }
}

/// Every kind of fault in one run, the server's `kill -9` among them, so that every run
/// of the suite has each, whatever proptest chooses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_fault_in_turn() {
    online_snapshot_with_faults(&[
        (Fault::ReadersKilled, 150),
        (Fault::ServerKilled, 300),
        (Fault::WalsenderKilled, 200),
        (Fault::ConsumerCrash, 400),
    ])
    .await;
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

/// Found by the source simulation (seed 7964): a table TRUNCATEd while its copy runs
/// starts the copy over; after a lost connection the stream sends that TRUNCATE again
/// (the slot is not confirmed past it), and it must not start the copy over a second
/// time — the sink holds the chunks placed after the first, and the TRUNCATE itself is
/// dropped as already handed out, so the rows would come twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncate_sent_again_after_a_reconnect_does_not_restart_the_copy_twice() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.tt (id int PRIMARY KEY, v text);
             INSERT INTO public.tt SELECT g, 'old' FROM generate_series(1, 3000) g;
             CREATE PUBLICATION pub FOR TABLE public.tt;",
        )
        .await
        .unwrap();
    // Nothing becomes durable: the slot stays at its start, before the TRUNCATE.
    let handle = MemoryHandle::new({
        let mut options = cdc_sinks::memory::MemorySinkOptions::default();
        options.async_checkpoints = true;
        options
    });
    let table = cdc_core::TableName::new("public", "tt");
    let mut running = spawn(online(&cluster, &["public.tt"], 5), &handle);
    assert!(
        handle
            .wait_until(Duration::from_secs(30), |h| h.row_count(&table) >= 50)
            .await
    );
    cluster
        .execute(
            "TRUNCATE public.tt;
             INSERT INTO public.tt SELECT g, 'new' FROM generate_series(10001, 13000) g;",
        )
        .await
        .unwrap();
    // The copy started over: some of its new chunks are in the sink, most are not.
    assert!(
        handle
            .wait_until(Duration::from_secs(30), |h| {
                let rows = h.rows_text(&table);
                rows.len() >= 20
                    && rows.iter().all(|r| {
                        r.first()
                            .and_then(|v| v.as_deref())
                            .is_some_and(|id| id.len() == 5)
                    })
            })
            .await,
        "the copy did not start over after the TRUNCATE"
    );
    cluster.terminate_walsenders().await.unwrap();
    running
        .wait_for_equal(&cluster, &handle, &["public.tt"], Duration::from_secs(120))
        .await;
    // A graceful stop waits for its last checkpoint: let them all complete.
    let completer = handle.clone();
    let completing = tokio::spawn(async move {
        loop {
            completer.complete_pending_checkpoints();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    running.stop().await;
    completing.abort();
    assert_no_position_twice_and_no_anomaly(&handle);
}
