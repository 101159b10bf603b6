//! Issue 44, case 6: a commit the stream passed before a restart, but not yet visible to
//! new snapshots, against a real cluster. `synchronous_standby_names` naming a standby
//! that is not there makes a commit wait after its commit record is flushed: logical
//! decoding sends it, `pg_xact` says committed, and snapshots still list it as running.
//! A run drops its change (the key is beyond the copied range) and acknowledges past it;
//! the next run's stream starts after it, so only its chunks can show it — and they must
//! wait until they do.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use cdc_core::{EventKind, SnapshotMarker};
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::online::*;
use support::*;

async fn count(cluster: &Cluster, sql: &str) -> i64 {
    let client = cluster.connect("postgres").await.unwrap();
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Waits until `sql` (a count) is at least 1.
async fn wait_until_counted(cluster: &Cluster, sql: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(cluster, sql).await < 1 {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_passed_before_a_restart_but_not_yet_visible_reaches_the_next_run_s_chunks() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             CREATE TABLE public.other (id int);
             INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 100000) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let options = || online(&cluster, &["public.t"], 200);

    // Run A copies its first chunks; then a commit to the table's last row waits for a
    // standby that does not exist.
    let running = spawn(options(), &handle);
    let copied = handle
        .wait_until(Duration::from_secs(60), |h| {
            h.changes().iter().any(|e| {
                matches!(
                    e.kind,
                    EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. })
                )
            })
        })
        .await;
    assert!(copied, "no chunk was placed");
    cluster
        .execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody_here'")
        .await
        .unwrap();
    cluster.execute("SELECT pg_reload_conf()").await.unwrap();
    let waiting = {
        let client = cluster.connect("postgres").await.unwrap();
        tokio::spawn(async move {
            client
                .batch_execute("UPDATE public.t SET v = 'late' WHERE id = 100000")
                .await
        })
    };
    wait_until_counted(
        &cluster,
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        "the commit waiting for the standby",
    )
    .await;
    // Run A decodes the commit, drops its change (beyond what it copied) and cannot place
    // a chunk of the table while it is invisible; it acknowledges past it.
    let past: cdc_core::Lsn = cluster.current_wal_lsn().await.unwrap().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while confirmed_flush(&cluster, &running_slot(&cluster).await)
        .await
        .is_none_or(|c| c < past)
    {
        assert!(!running.task.is_finished(), "run A stopped");
        assert!(
            Instant::now() < deadline,
            "run A never acknowledged the commit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.stop().await;
    assert!(
        !sink_text(&handle, "public.t")
            .iter()
            .any(|r| r.first() == Some(&Some("100000".to_owned()))),
        "the test needs the row beyond the copied range"
    );
    // A transaction that ends after the waiting one (an abort does not wait) moves the
    // snapshots' xmax past it: it is then listed as running rather than left out above
    // xmax — invisible either way.
    cluster
        .execute("BEGIN; INSERT INTO public.other VALUES (1); ROLLBACK;")
        .await
        .unwrap();

    // Run B resumes after the commit. Its chunks must not copy the row without it.
    let from = handle.changes().len();
    let mut running = spawn(options(), &handle);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let placed_while_invisible = handle.changes()[from..]
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. })
            )
        })
        .count();
    assert!(!running.task.is_finished(), "run B stopped");
    cluster
        .execute("ALTER SYSTEM RESET synchronous_standby_names")
        .await
        .unwrap();
    cluster.execute("SELECT pg_reload_conf()").await.unwrap();
    waiting.await.unwrap().unwrap();
    running
        .wait_for_equal(&cluster, &handle, &["public.t"], Duration::from_secs(60))
        .await;
    running.stop().await;
    assert_no_position_twice_and_no_anomaly(&handle);
    assert_eq!(
        placed_while_invisible, 0,
        "run B placed chunks while a commit run A passed was invisible"
    );
}

/// The name of the one replication slot on `cluster`.
async fn running_slot(cluster: &Cluster) -> String {
    let client = cluster.connect("postgres").await.unwrap();
    client
        .query_one("SELECT slot_name::text FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .get(0)
}
