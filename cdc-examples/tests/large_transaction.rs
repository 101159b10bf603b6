//! Part of the version suite: one 1,000,000-row transaction through `pgcdc stream` with
//! the default settings (`--streaming auto`, the server's default
//! `logical_decoding_work_mem`) on each version in `PGCDC_PG_VERSIONS`. The server streams
//! it while in progress (checked in `pg_stat_replication_slots`), every row comes out once,
//! and the pgcdc process's peak resident memory (the kernel's `ru_maxrss` for the child)
//! stays under 100 MB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cdc_testkit::{ADMIN_USER, Cluster};
use support::*;

const ROWS: i64 = 1_000_000;
const PEAK_RSS_LIMIT_KIB: i64 = 100 * 1024;

/// Waits for `pid` (a child of this process) with the kernel's resource usage; kills it
/// after `timeout`. Returns the exit status (as `wait4` reports it) and the peak RSS in KiB.
fn wait_with_peak_rss(pid: u32, timeout: Duration) -> (libc::c_int, i64) {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if flag.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal(pid, libc::SIGKILL);
        true
    });
    let mut status: libc::c_int = 0;
    // SAFETY: plain syscall on our own child; `status` and `usage` are valid for writes.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    done.store(true, Ordering::SeqCst);
    let timed_out = watchdog.join().unwrap();
    assert_eq!(waited, pid as libc::pid_t, "wait4 failed");
    assert!(!timed_out, "pgcdc did not finish within {timeout:?}");
    (status, usage.ru_maxrss)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_row_transaction_streams_with_default_settings_in_bounded_memory() {
    for version in cdc_testkit::versions_under_test() {
        let cluster = Cluster::builder().major(version).build().await.unwrap();
        let client = cluster.connect("postgres").await.unwrap();
        client
            .batch_execute(
                "CREATE TABLE public.big (id int8 PRIMARY KEY, v text);
                 CREATE PUBLICATION pub FOR TABLE public.big;",
            )
            .await
            .unwrap();
        client
            .batch_execute("SELECT pg_create_logical_replication_slot('big_slot', 'pgoutput')")
            .await
            .unwrap();
        client
            .batch_execute(&format!(
                "INSERT INTO public.big SELECT g, repeat('v', 60) || g FROM generate_series(1, {ROWS}) g"
            ))
            .await
            .unwrap();
        let end: String = client
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);

        let dir = tempfile::tempdir().unwrap();
        let out_path = dir.path().join("out.json");
        let uri = cluster.uri("postgres", ADMIN_USER, None);
        let mut cmd = pgcdc([
            "stream",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.big",
            "--slot",
            "big_slot",
            "--snapshot",
            "never",
            "--end-lsn",
            &end,
            "--summary",
            "none",
            "--quiet",
        ]);
        cmd.stdout(File::create(&out_path).unwrap())
            .stderr(Stdio::inherit());
        // Reaped by `wait4` below, which also reports its resource usage.
        #[allow(clippy::zombie_processes)]
        let child = cmd.spawn().unwrap();
        let started = Instant::now();
        let (status, peak_kib) = wait_with_peak_rss(child.id(), Duration::from_secs(300));
        let elapsed = started.elapsed();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "PostgreSQL {version}: pgcdc exited with wait status {status}"
        );

        let mut inserts = 0i64;
        for line in BufReader::new(File::open(&out_path).unwrap()).lines() {
            if line.unwrap().contains("\"insert\"") {
                inserts += 1;
            }
        }
        assert_eq!(inserts, ROWS, "PostgreSQL {version}");
        let streamed: i64 = client
            .query_one(
                "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = 'big_slot'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        eprintln!(
            "PostgreSQL {version}: {ROWS} rows in one transaction, streamed {streamed} time(s): \
             {elapsed:?}, peak RSS {} MiB",
            peak_kib / 1024
        );
        assert!(
            streamed >= 1,
            "PostgreSQL {version}: the server did not stream the transaction"
        );
        assert!(
            peak_kib < PEAK_RSS_LIMIT_KIB,
            "PostgreSQL {version}: peak RSS {peak_kib} KiB"
        );
    }
}
