//! Standby sources: `check` knows that logical decoding in recovery needs PostgreSQL 16+;
//! on a 16+ standby a slot whose creation waits for the primary says what it waits for,
//! stops promptly on SIGTERM, and leaves no slot behind; and `pgcdc stream --out-dir` from
//! a standby under write load on the primary, killed at random points and restarted
//! (both snapshot modes), ends equal to `SELECT *` on the primary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_USER, Cluster};
use rand::Rng;
use support::bank::*;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn primary_and_standby(major: u32) -> (Cluster, Cluster) {
    let primary = Cluster::builder().major(major).build().await.unwrap();
    primary
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t VALUES (1, 'one');
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let standby = primary.standby().await.unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    (primary, standby)
}

fn args<'a>(command: &'a str, uri: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        command,
        "--uri",
        uri,
        "--publication",
        "pub",
        "--table",
        "public.t",
    ];
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_stream_refuse_a_standby_older_than_16() {
    for major in [14, 15] {
        let (_primary, standby) = primary_and_standby(major).await;
        let uri = standby.uri("postgres", ADMIN_USER, None);
        let output = run(pgcdc(args("check", &uri, &[])), TIMEOUT);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(3),
            "PostgreSQL {major}:\n{stdout}"
        );
        assert!(
            stdout.contains("needs PostgreSQL 16 or later") && stdout.contains("primary"),
            "PostgreSQL {major}:\n{stdout}"
        );
        let output = run(
            pgcdc(args(
                "stream",
                &uri,
                &["--snapshot", "never", "--create-slot"],
            )),
            TIMEOUT,
        );
        let stderr = assert_clean_failure(&output, Some(3));
        assert!(
            stderr.contains("needs PostgreSQL 16 or later"),
            "PostgreSQL {major}:\n{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_creation_on_a_standby_says_what_it_waits_for_and_stops_on_sigterm() {
    let (primary, standby) = primary_and_standby(16).await;
    // A transaction with an xid open on the primary: a slot created on the standby cannot
    // be consistent before it ends, so the creation waits for as long as the test wants.
    let holder = primary.connect("postgres").await.unwrap();
    holder
        .batch_execute("BEGIN; SELECT txid_current();")
        .await
        .unwrap();
    primary
        .execute("SELECT pg_log_standby_snapshot()")
        .await
        .unwrap();
    standby.wait_for_replay(&primary).await.unwrap();

    let uri = standby.uri("postgres", ADMIN_USER, None);
    let (mut child, stdout, stderr) = spawn_collecting(pgcdc(args(
        "stream",
        &uri,
        &["--snapshot", "never", "--create-slot"],
    )));
    assert!(
        stderr.wait_for(TIMEOUT, |lines| lines
            .iter()
            .any(|l| l.contains("pg_log_standby_snapshot"))),
        "no word on what slot creation waits for: {:?}",
        stderr.snapshot()
    );
    let asked = Instant::now();
    signal(child.id(), libc::SIGTERM);
    let status = wait_status(&mut child, Duration::from_secs(30));
    let stopped_after = asked.elapsed();
    let err = stderr.finish();
    stdout.finish();
    assert!(status.success(), "{err:?}");
    assert!(
        stopped_after < Duration::from_secs(15),
        "took {stopped_after:?} to stop"
    );
    // The half-created slot is gone (the server drops it once the session is gone).
    let client = standby.connect("postgres").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let slots: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if slots == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "a slot was left behind: {err:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    holder.batch_execute("COMMIT").await.unwrap();
}

/// `pgcdc stream --out-dir` from a standby of a primary (`major`) under write load, killed
/// three times at random points (slot creation, snapshot, streaming) and rerun to the
/// primary's end of WAL: the files equal `SELECT *` on the primary.
async fn stream_from_a_standby_with_consumer_kills(major: u32, snapshot: &str) {
    const SEED_ACCOUNTS: i64 = 20_000;
    let primary = Cluster::builder().major(major).build().await.unwrap();
    create_schema(&primary, SEED_ACCOUNTS).await;
    // A physical slot, so hot_standby_feedback holds the catalog rows decoding needs.
    let standby = primary
        .standby_builder()
        .slot("standby_1")
        .build()
        .await
        .unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let stream = OutDirStream::new(out.path().join("out"), &["--snapshot", snapshot]);

    let stop = Arc::new(AtomicBool::new(false));
    let writes = tokio::spawn(workload(
        primary.connect("postgres").await.unwrap(),
        stop.clone(),
        SEED_ACCOUNTS,
    ));
    // Slot creation on a standby waits for the primary's next running-transactions
    // record; the primary logs one every 15 s, this shortens the wait as README advises.
    let snapshots = {
        let client = primary.connect("postgres").await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                client
                    .batch_execute("SELECT pg_log_standby_snapshot()")
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };

    for (round, range) in [(1, 300..1500), (2, 1000..3000), (3, 1500..3500)] {
        let wait = rand::rng().random_range(range);
        stream
            .kill_after(
                &standby,
                wait,
                &format!("PostgreSQL {major}, round {round}"),
            )
            .await;
    }

    stop.store(true, Ordering::SeqCst);
    assert!(writes.await.unwrap() > 0);
    snapshots.await.unwrap();
    let end = primary.current_wal_lsn().await.unwrap();
    standby.wait_for_replay(&primary).await.unwrap();
    stream.finish_and_compare(&standby, &end, &primary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_from_a_standby_with_consumer_kills_on_16() {
    stream_from_a_standby_with_consumer_kills(16, "initial").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_from_a_standby_with_consumer_kills_on_17() {
    stream_from_a_standby_with_consumer_kills(17, "online").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_from_a_standby_with_consumer_kills_on_18() {
    stream_from_a_standby_with_consumer_kills(18, "initial").await;
}
