//! `pgcdc stream --out-dir` killed with SIGKILL at random points (during the snapshot or
//! while streaming) and restarted: the files, replayed, equal `SELECT *` of the source,
//! and no change appears twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cdc_testkit::Cluster;
use rand::Rng;
use support::bank::*;

const SEED_ACCOUNTS: i64 = 50_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_dir_killed_at_random_points_and_restarted_equals_select() {
    let cluster = Cluster::new().await.unwrap();
    create_schema(&cluster, SEED_ACCOUNTS).await;
    let out = tempfile::tempdir().unwrap();
    let stream = OutDirStream::new(out.path().join("out"), &[]);

    let stop = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn(workload(
        cluster.connect("postgres").await.unwrap(),
        stop.clone(),
        SEED_ACCOUNTS,
    ));

    // Kill it three times: early (most likely during the snapshot), then later (while
    // streaming, possibly mid-checkpoint).
    for (round, range) in [(1, 300..1200), (2, 500..2500), (3, 1000..3000)] {
        let wait = rand::rng().random_range(range);
        stream
            .kill_after(&cluster, wait, &format!("round {round}"))
            .await;
    }

    stop.store(true, Ordering::SeqCst);
    let changes = workload.await.unwrap();
    assert!(changes > 0);
    // The same command, told to stop at the current end of WAL, finishes the job.
    let end = cluster.current_wal_lsn().await.unwrap();
    stream.finish_and_compare(&cluster, &end, &cluster).await;
}
