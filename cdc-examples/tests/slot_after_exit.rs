//! After every clean exit of `pgcdc stream` — end LSN reached (stdout and `--out-dir`),
//! snapshot then end LSN, snapshot-only, SIGTERM, Ctrl-C — the slot's
//! `confirmed_flush_lsn` is exactly the position the exit summary reports as confirmed,
//! so a job run in `--end-lsn` batches does not make the server keep WAL forever, and
//! a rerun to stdout does not repeat what was already delivered.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;
use std::time::Duration;

use cdc_core::Lsn;
use cdc_testkit::{ADMIN_USER, Cluster};
use serde_json::Value;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(120);
const SLOT: &str = "exit_slot";

/// The last stderr line as the JSON summary.
fn summary(output: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    serde_json::from_str(stderr.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

fn lsn(v: &Value) -> Lsn {
    v.as_str().unwrap().parse().unwrap()
}

async fn slot_confirmed(cluster: &Cluster) -> Option<Lsn> {
    let lsn = cluster.slot_confirmed_flush_lsn(SLOT).await.unwrap()?;
    Some(lsn.parse().unwrap())
}

async fn write(cluster: &Cluster, from: i32) {
    cluster
        .execute(&format!(
            "INSERT INTO public.t SELECT g, 'v' || g FROM generate_series({from}, {from} + 9) g"
        ))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_is_confirmed_where_the_summary_says_after_every_clean_exit() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 50) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("out");
    let with = |extra: &[&str]| {
        let mut args = vec![
            "stream",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.t",
            "--slot",
            SLOT,
            "--summary",
            "json",
        ];
        args.extend_from_slice(extra);
        pgcdc(args)
    };

    // Snapshot-only: its slot is temporary, so none is left behind.
    let output = run(with(&["--snapshot", "initial-only"]), TIMEOUT);
    let s = summary(&output);
    assert_eq!(s["outcome"], "end_reached");
    assert_eq!(s["snapshot"]["rows"], 50);
    assert_eq!(
        slot_confirmed(&cluster).await,
        None,
        "a temporary slot remains"
    );

    // Snapshot, then stream to an end LSN: the slot ends at the confirmed position, which
    // covers the end.
    write(&cluster, 100).await;
    let end = cluster.current_wal_lsn().await.unwrap();
    let output = run(
        with(&[
            "--create-slot",
            "--end-lsn",
            &end,
            "--out-dir",
            dir.to_str().unwrap(),
        ]),
        TIMEOUT,
    );
    let s = summary(&output);
    assert_eq!(s["snapshot"]["rows"], 60, "{s}");
    let confirmed = lsn(&s["confirmed_lsn"]);
    assert!(confirmed >= end.parse().unwrap(), "{s}");
    assert_eq!(slot_confirmed(&cluster).await, Some(confirmed), "{s}");

    // Resumed from the out-dir, to the next end LSN.
    write(&cluster, 200).await;
    let end = cluster.current_wal_lsn().await.unwrap();
    let output = run(
        with(&["--end-lsn", &end, "--out-dir", dir.to_str().unwrap()]),
        TIMEOUT,
    );
    let s = summary(&output);
    assert_eq!(s["total"]["insert"], 10, "{s}");
    let confirmed = lsn(&s["confirmed_lsn"]);
    assert!(confirmed >= end.parse().unwrap(), "{s}");
    assert_eq!(slot_confirmed(&cluster).await, Some(confirmed), "{s}");

    // To stdout, to an end LSN; a rerun to the same end repeats nothing.
    write(&cluster, 300).await;
    let end = cluster.current_wal_lsn().await.unwrap();
    let output = run(with(&["--snapshot", "never", "--end-lsn", &end]), TIMEOUT);
    let s = summary(&output);
    assert_eq!(s["total"]["insert"], 10, "{s}");
    let confirmed = lsn(&s["confirmed_lsn"]);
    assert_eq!(slot_confirmed(&cluster).await, Some(confirmed), "{s}");
    let output = run(with(&["--snapshot", "never", "--end-lsn", &end]), TIMEOUT);
    let s = summary(&output);
    assert_eq!(s["total"]["insert"], 0, "the rerun repeated changes: {s}");
    assert!(output.stdout.is_empty());
    assert_eq!(
        slot_confirmed(&cluster).await,
        Some(lsn(&s["confirmed_lsn"]))
    );

    // Stopped by SIGTERM and by Ctrl-C while streaming.
    for (sig, base) in [(libc::SIGTERM, 400), (libc::SIGINT, 500)] {
        let (mut child, stdout, stderr) = spawn_collecting(with(&["--snapshot", "never"]));
        // Writes until the stream has delivered some of them (it may start after the
        // first writes, which it then reads from the slot).
        let mut written = 0;
        while !stdout.wait_for(Duration::from_millis(300), |l| !l.is_empty()) {
            assert!(written < 100, "nothing streamed: {:?}", stderr.snapshot());
            write(&cluster, base * 100 + written * 10).await;
            written += 1;
        }
        signal(child.id(), sig);
        let status = wait_status(&mut child, TIMEOUT);
        let err = stderr.finish();
        stdout.finish();
        assert!(status.success(), "{err:?}");
        let s: Value = serde_json::from_str(err.last().unwrap()).unwrap();
        assert_eq!(s["outcome"], "stopped", "{s}");
        assert_eq!(
            slot_confirmed(&cluster).await,
            Some(lsn(&s["confirmed_lsn"])),
            "signal {sig}: {s}"
        );
    }
}
