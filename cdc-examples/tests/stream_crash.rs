//! `pgcdc stream --out-dir` killed with SIGKILL at random points (during the snapshot or
//! while streaming) and restarted: the files, replayed, equal `SELECT *` of the source,
//! and no change appears twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cdc_testkit::{ADMIN_USER, Cluster};
use rand::Rng;
use serde_json::Value;
use support::bank::*;
use support::*;

const SEED_ACCOUNTS: i64 = 50_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_dir_killed_at_random_points_and_restarted_equals_select() {
    let cluster = Cluster::new().await.unwrap();
    create_schema(&cluster, SEED_ACCOUNTS).await;
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("out");
    let args = |extra: &[&str]| {
        let mut args: Vec<String> = [
            "stream",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.accounts",
            "--table",
            "public.notes",
            "--out-dir",
            dir.to_str().unwrap(),
            "--create-slot",
            "--checkpoint-interval",
            "200ms",
            "--status-interval",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };

    let stop = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn(workload(
        cluster.connect("postgres").await.unwrap(),
        stop.clone(),
        SEED_ACCOUNTS,
    ));

    // Kill it three times: early (most likely during the snapshot), then later (while
    // streaming, possibly mid-checkpoint).
    for (round, range) in [(1, 300..1200), (2, 500..2500), (3, 1000..3000)] {
        let mut child = pgcdc(args(&[]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Lines::collect(child.stderr.take().unwrap());
        let wait = rand::rng().random_range(range);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        signal(child.id(), libc::SIGKILL);
        child.wait().unwrap();
        let stderr = stderr.finish();
        assert!(
            !stderr.iter().any(|l| l.contains("panicked")),
            "round {round}:\n{}",
            stderr.join("\n")
        );
        eprintln!(
            "round {round}: killed after {wait} ms; stderr:\n{}",
            stderr.join("\n")
        );
    }

    stop.store(true, Ordering::SeqCst);
    let changes = workload.await.unwrap();
    assert!(changes > 0);
    let client = cluster.connect("postgres").await.unwrap();
    let end = cluster.current_wal_lsn().await.unwrap();

    // The same command, told to stop at the current end of WAL, finishes the job.
    let final_args = args(&["--end-lsn", &end, "--summary", "json"]);
    let output =
        tokio::task::spawn_blocking(move || run(pgcdc(final_args), Duration::from_secs(180)))
            .await
            .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "final run failed:\n{stderr}");
    let summary: Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(summary["outcome"], "end_reached", "{summary}");

    for (table, select) in TABLES {
        let replayed = replay(&dir.join(format!("{table}.json")));
        assert_equals_select(&client, table, select, &replayed).await;
    }
}
