//! `pgcdc stream --out-dir` when the table set changes between runs (issue 44, case 1): a
//! table removed, then added back. With an output that applies TRUNCATE (the multiplexed
//! layout with `--on-truncate marker`) the table is truncated and copied anew, and the
//! output, applied as a strict multiset, equals `SELECT *`; with one that does not (the
//! default `--on-truncate error`), the rerun is refused before anything is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cdc_testkit::{ADMIN_USER, Cluster};
use serde_json::Value;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn write(cluster: &Cluster, round: i32) {
    cluster
        .execute(&format!(
            "UPDATE public.b SET v = v || '!' WHERE id % 10 = {r};
             DELETE FROM public.b WHERE id % 17 = {r};
             INSERT INTO public.b SELECT g, 'new' FROM generate_series({lo}, {lo} + 20) g;
             UPDATE public.a SET v = v || '?' WHERE id % 10 = {r};",
            r = round,
            lo = 10_000 + round * 100,
        ))
        .await
        .unwrap();
}

/// Runs `pgcdc stream` over `tables` into `dir` up to the current end of WAL.
async fn run_to_end(
    cluster: &Cluster,
    dir: &Path,
    tables: &[&str],
    extra: &[&str],
) -> std::process::Output {
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let end = cluster.current_wal_lsn().await.unwrap();
    let mut args: Vec<String> = [
        "stream",
        "--uri",
        &uri,
        "--publication",
        "pub",
        "--slot",
        "set_slot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for table in tables {
        args.extend(["--table".into(), table.to_string()]);
    }
    args.extend([
        "--out-dir".into(),
        dir.to_str().unwrap().into(),
        "--end-lsn".into(),
        end,
        "--chunk-rows".into(),
        "100".into(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    run(pgcdc(args), TIMEOUT)
}

/// Table `public.b` as the multiplexed output says, applied as a strict multiset: an
/// insert of an id it holds, an update or delete of one it lacks, a row named without
/// its key, are failures.
fn replay_b(path: &Path) -> BTreeMap<i64, String> {
    let mut rows = BTreeMap::new();
    let text = std::fs::read_to_string(path).unwrap();
    for (n, line) in text.lines().enumerate() {
        let record: Value = serde_json::from_str(line).unwrap();
        if record["table"] != "public.b" {
            continue;
        }
        if record.get("truncate").is_some() {
            rows.clear();
        } else if let Some(row) = record.get("insert") {
            let id = row["id"].as_i64().unwrap();
            let v = row["v"].as_str().unwrap().to_owned();
            assert!(
                rows.insert(id, v).is_none(),
                "line {n}: second insert of {id}"
            );
        } else if let Some(row) = record.get("update") {
            let id = row["id"]
                .as_i64()
                .unwrap_or_else(|| panic!("line {n}: update by {row}"));
            let held = rows
                .get_mut(&id)
                .unwrap_or_else(|| panic!("line {n}: update of absent {id}"));
            if let Some(v) = row.get("v") {
                *held = v.as_str().unwrap().to_owned();
            }
        } else if let Some(row) = record.get("delete") {
            let id = row["id"]
                .as_i64()
                .unwrap_or_else(|| panic!("line {n}: delete by {row}"));
            assert!(
                rows.remove(&id).is_some(),
                "line {n}: delete of absent {id}"
            );
        } else {
            panic!("line {n}: unexpected record {record}");
        }
    }
    rows
}

async fn select_b(cluster: &Cluster) -> BTreeMap<i64, String> {
    let client = cluster.connect("postgres").await.unwrap();
    client
        .query("SELECT id::int8, v FROM public.b", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_removed_and_added_back_is_copied_anew_or_refused() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.a (id int PRIMARY KEY, v text);
             CREATE TABLE public.b (id int PRIMARY KEY, v text);
             INSERT INTO public.a SELECT g, 'a' || g FROM generate_series(1, 500) g;
             INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 1000) g;
             CREATE PUBLICATION pub FOR TABLE public.a, public.b;",
        )
        .await
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let both = ["public.a", "public.b"];

    // An output that applies TRUNCATE: the multiplexed layout with markers.
    let applies = out.path().join("applies");
    let marker = ["--layout", "multiplexed", "--on-truncate", "marker"];
    let extra: Vec<&str> = ["--create-slot"].iter().chain(&marker).copied().collect();
    let output = run_to_end(&cluster, &applies, &both, &extra).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    write(&cluster, 1).await;
    let output = run_to_end(&cluster, &applies, &["public.a"], &marker).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    write(&cluster, 2).await;
    let output = run_to_end(&cluster, &applies, &both, &marker).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("back in the stream"), "says so: {stderr}");
    let changes = applies.join("changes.json");
    assert_eq!(replay_b(&changes), select_b(&cluster).await);
    // Its changes after the new copy apply to it (updates and deletes of rows it holds).
    write(&cluster, 5).await;
    let output = run_to_end(&cluster, &applies, &both, &marker).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(replay_b(&changes), select_b(&cluster).await);

    // The default output (per-table files, TRUNCATE refused): the rerun that adds b back
    // is refused before anything is written, naming the table and the fixes.
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let output = run(pgcdc(["drop-slot", "set_slot", "--uri", &uri]), TIMEOUT);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let refuses = out.path().join("refuses");
    let output = run_to_end(&cluster, &refuses, &both, &["--create-slot"]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    write(&cluster, 3).await;
    let output = run_to_end(&cluster, &refuses, &["public.a"], &[]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    write(&cluster, 4).await;
    let b_file = refuses.join("public.b.json");
    let before = std::fs::read(&b_file).unwrap();
    let output = run_to_end(&cluster, &refuses, &both, &[]).await;
    let stderr = assert_clean_failure(&output, Some(3));
    for text in ["public.b", "--on-truncate marker", "new, empty output"] {
        assert!(stderr.contains(text), "missing {text:?} in:\n{stderr}");
    }
    assert_eq!(
        std::fs::read(&b_file).unwrap(),
        before,
        "b's file was written to"
    );
}
