//! Standby sources: `check` knows that logical decoding in recovery needs PostgreSQL 16+,
//! and on a 16+ standby a slot whose creation waits for the primary says what it waits
//! for, stops promptly on SIGTERM, and leaves no slot behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_USER, Cluster};
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
