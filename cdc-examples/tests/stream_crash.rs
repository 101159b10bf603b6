//! `pgcdc stream --out-dir` killed with SIGKILL at random points (during the snapshot or
//! while streaming) and restarted: the files, replayed, equal `SELECT *` of the source,
//! and no change appears twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cdc_testkit::{ADMIN_USER, Cluster};
use rand::Rng;
use serde_json::Value;
use support::*;

/// Each table with the SQL that renders its rows the way the Feldera encoder does
/// (numeric as text, timestamptz as RFC 3339 UTC with microseconds).
const TABLES: [(&str, &str); 2] = [
    (
        "public.accounts",
        "SELECT json_build_object('id', id, 'owner', owner, 'balance', balance::text, \
         'version', version, 'tags', tags, 'doc', doc, 'flag', flag, \
         'updated', to_char(updated AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))::text \
         FROM public.accounts",
    ),
    (
        "public.notes",
        "SELECT json_build_object('id', id, 'body', body, 'version', version)::text FROM public.notes",
    ),
];

const SEED_ACCOUNTS: i64 = 50_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_dir_killed_at_random_points_and_restarted_equals_select() {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(&format!(
            "CREATE TABLE public.accounts (id int PRIMARY KEY, owner text NOT NULL,
                 balance numeric(12,2) NOT NULL, version int NOT NULL, tags text[], doc jsonb,
                 flag boolean NOT NULL DEFAULT false, updated timestamptz NOT NULL DEFAULT now());
             INSERT INTO public.accounts
                 SELECT g, 'owner ' || g, g * 1.25, 0, ARRAY['a', g::text],
                        jsonb_build_object('g', g), g % 2 = 0, now()
                 FROM generate_series(1, {SEED_ACCOUNTS}) g;
             CREATE TABLE public.notes (id bigint PRIMARY KEY, body text, version int NOT NULL);
             INSERT INTO public.notes SELECT g, 'note ' || g, 0 FROM generate_series(1, 500) g;
             ANALYZE public.accounts, public.notes;
             CREATE PUBLICATION pub FOR TABLE public.accounts, public.notes;"
        ))
        .await
        .unwrap();
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
        let expected: BTreeMap<i64, Value> = client
            .query(select, &[])
            .await
            .unwrap()
            .iter()
            .map(|row| {
                let value: Value = serde_json::from_str(row.get::<_, &str>(0)).unwrap();
                (value["id"].as_i64().unwrap(), value)
            })
            .collect();
        assert_eq!(replayed.len(), expected.len(), "{table}: row count");
        for (id, row) in &expected {
            assert_eq!(replayed.get(id), Some(row), "{table}: row {id}");
        }
    }
}

/// Applies a per-table Feldera JSON file in order to a map keyed by `id`, asserting that
/// no change is applied twice: an insert finds no row, a delete finds one, and every
/// update raises the row's `version`.
fn replay(path: &Path) -> BTreeMap<i64, Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: BTreeMap<i64, Value> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let envelope: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}:{}: {e}: {line}", path.display(), n + 1));
        let object = envelope.as_object().unwrap();
        assert_eq!(object.len(), 1, "one operation per envelope: {line}");
        let (op, row) = object.iter().next().unwrap();
        let id = row["id"].as_i64().unwrap();
        let at = format!("{}:{}", path.display(), n + 1);
        match op.as_str() {
            "insert" => {
                let old = rows.insert(id, row.clone());
                assert!(old.is_none(), "{at}: row {id} inserted twice");
            }
            "delete" => {
                assert!(
                    rows.remove(&id).is_some(),
                    "{at}: row {id} deleted twice or never inserted"
                );
            }
            "update" => {
                let current = rows
                    .get_mut(&id)
                    .unwrap_or_else(|| panic!("{at}: update of missing row {id}"));
                let (old, new) = (current["version"].as_i64(), row["version"].as_i64());
                assert!(
                    new > old,
                    "{at}: update of row {id} applied twice ({old:?} -> {new:?})"
                );
                for (column, value) in row.as_object().unwrap() {
                    current[column] = value.clone();
                }
            }
            other => panic!("{at}: unexpected envelope {other}"),
        }
    }
    rows
}

/// Random transactions until `stop`: updates (raising `version`), inserts of new ids,
/// deletes, and now and then a multi-row update. Returns the number of transactions.
async fn workload(client: cdc_testkit::tokio_postgres::Client, stop: Arc<AtomicBool>) -> u64 {
    let mut next_id = SEED_ACCOUNTS + 1;
    let mut done = 0;
    while !stop.load(Ordering::SeqCst) {
        let sql = {
            let mut rng = rand::rng();
            let (a, b, n) = (
                rng.random_range(1..next_id),
                rng.random_range(1..next_id),
                rng.random_range(1..=500),
            );
            next_id += 1;
            if rng.random_range(0..10) == 0 {
                format!(
                    "UPDATE public.accounts SET version = version + 1, flag = NOT flag
                     WHERE id BETWEEN {a} AND {a} + 40"
                )
            } else {
                format!(
                    "BEGIN;
                     UPDATE public.accounts SET balance = balance + 1, version = version + 1,
                            updated = now(), doc = doc || jsonb_build_object('u', {done})
                     WHERE id = {a};
                     INSERT INTO public.accounts (id, owner, balance, version, tags, doc)
                     VALUES ({next_id}, 'new {next_id}', 0.5, 0, ARRAY['n'], '{{}}');
                     DELETE FROM public.accounts WHERE id = {b};
                     UPDATE public.notes SET version = version + 1, body = body || '.' WHERE id = {n};
                     COMMIT;"
                )
            }
        };
        client.batch_execute(&sql).await.unwrap();
        done += 1;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    done
}
