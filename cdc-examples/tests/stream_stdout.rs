//! `pgcdc stream` to stdout: slot creation only when asked, `--end-lsn`, output policies,
//! `--snapshot initial-only` (also rerun into a complete `--out-dir`), `--create-publication`,
//! graceful SIGINT, and the summaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_testkit::{ADMIN_USER, Cluster};
use serde_json::Value;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(120);

fn lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_to_stdout_with_policies_sigint_end_lsn_and_explicit_slot_creation() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.m (id int PRIMARY KEY, x float8, d date);
             INSERT INTO public.m VALUES (1, 1.5, '2024-02-29'), (2, 'NaN', 'infinity');",
        )
        .await
        .unwrap();
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let base = [
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--table",
        "public.m",
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        pgcdc(args)
    };

    // The publication is created only when asked.
    let output = run(with(&["--snapshot", "initial-only"]), TIMEOUT);
    let stderr = assert_clean_failure(&output, Some(3));
    assert!(one_line(&stderr).contains("CREATE PUBLICATION"), "{stderr}");
    let output = run(
        with(&[
            "--snapshot",
            "initial-only",
            "--create-publication",
            "--on-non-finite",
            "null",
        ]),
        TIMEOUT,
    );
    let stderr = assert_clean_failure(&output, Some(8));
    assert!(stderr.contains("created publication \"pub\""), "{stderr}");
    assert!(
        stderr.contains("infinity") || stderr.contains("out-of-range"),
        "{stderr}"
    );

    // initial-only copies the rows and stops; the policies decide what NaN and infinity
    // become.
    let output = run(
        with(&[
            "--snapshot",
            "initial-only",
            "--on-non-finite",
            "string",
            "--on-out-of-range",
            "null",
            "--summary",
            "json",
        ]),
        TIMEOUT,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let rows = lines(&output.stdout);
    assert_eq!(rows.len(), 2, "{rows:?}");
    let nan = rows.iter().find(|r| r["insert"]["id"] == 2).unwrap();
    assert_eq!(nan["insert"]["x"], "NaN");
    assert_eq!(nan["insert"]["d"], Value::Null);
    let summary: Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(summary["tables"]["public.m"]["snapshot"], 2, "{summary}");
    assert_eq!(summary["outcome"], "end_reached");

    // A missing slot is created only with --create-slot.
    let output = run(with(&["--snapshot", "never"]), TIMEOUT);
    let stderr = assert_clean_failure(&output, Some(3));
    assert!(one_line(&stderr).contains("--create-slot"), "{stderr}");

    // Stream changes only (no snapshot), stop with SIGINT: everything written is
    // acknowledged, so the next run continues exactly there.
    let (mut child, stdout, stderr) =
        spawn_collecting(with(&["--snapshot", "never", "--create-slot"]));
    let client = cluster.connect("postgres").await.unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let active: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE active",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if active == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            stderr.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster
        .execute(
            "INSERT INTO public.m VALUES (3, 3.0, '2000-01-01');
             UPDATE public.m SET x = 4.5 WHERE id = 1;
             DELETE FROM public.m WHERE id = 2;",
        )
        .await
        .unwrap();
    assert!(
        stdout.wait_for(TIMEOUT, |l| l.len() >= 3),
        "{:?}",
        stderr.snapshot()
    );
    signal(child.id(), libc::SIGINT);
    let status = wait_status(&mut child, TIMEOUT);
    let (out, err) = (stdout.finish(), stderr.finish().join("\n"));
    assert!(status.success(), "{err}");
    let changes: Vec<Value> = out
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert_eq!(changes[0]["insert"]["id"], 3);
    assert_eq!(changes[1]["update"]["x"], 4.5);
    assert_eq!(changes[2]["delete"], serde_json::json!({"id": 2}));
    assert!(changes.iter().all(|c| c["table"] == "public.m"));
    assert!(
        err.contains("stopped on request") && err.contains("public.m"),
        "{err}"
    );

    // Changes made while it was down; then stream up to the current end of WAL and stop.
    cluster
        .execute("INSERT INTO public.m VALUES (4, 4.0, '2001-01-01')")
        .await
        .unwrap();
    let end = cluster.current_wal_lsn().await.unwrap();
    let output = run(with(&["--snapshot", "never", "--end-lsn", &end]), TIMEOUT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let changes = lines(&output.stdout);
    assert_eq!(changes.len(), 1, "only what changed since: {changes:?}");
    assert_eq!(changes[0]["insert"]["id"], 4);
    assert!(stderr.contains("public.m"), "text summary: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_only_into_an_out_dir_twice_copies_the_rows_once() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 300) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("out");
    let command = || {
        pgcdc([
            "stream",
            "--uri",
            &uri,
            "--publication",
            "pub",
            "--table",
            "public.t",
            "--snapshot",
            "initial-only",
            "--out-dir",
            dir.to_str().unwrap(),
        ])
    };
    let file = dir.join("public.t.json");

    let output = run(command(), TIMEOUT);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let first = std::fs::read_to_string(&file).unwrap();
    let mut copied: Vec<(i64, String)> = lines(first.as_bytes())
        .iter()
        .map(|l| {
            let row = &l["insert"];
            (
                row["id"].as_i64().unwrap(),
                row["v"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    copied.sort();
    let expected: Vec<(i64, String)> = cluster
        .connect("postgres")
        .await
        .unwrap()
        .query("SELECT id::bigint, v FROM public.t ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(copied, expected);

    // The rerun finds the completed snapshot in the output: nothing to copy, no error,
    // and the files stay as they were.
    let output = run(command(), TIMEOUT);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("nothing to do"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), first);
}
