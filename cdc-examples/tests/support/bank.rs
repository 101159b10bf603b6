//! The crash tests' schema and workload (`accounts` and `notes` under random
//! transactions), `pgcdc stream --out-dir` of both tables run, killed and finished, and
//! the oracle: applying Feldera envelopes to a map keyed by `id`, with no change applied
//! twice, compared with `SELECT *` rendered by Postgres.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cdc_testkit::{ADMIN_USER, Cluster};
use rand::Rng;
use serde_json::Value;

/// Each table with the SQL that renders its rows the way the Feldera encoder does
/// (numeric as text, timestamptz as RFC 3339 UTC with microseconds).
pub const TABLES: [(&str, &str); 2] = [
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

/// Creates both tables with `seed_accounts` accounts and 500 notes, and publication `pub`.
pub async fn create_schema(cluster: &Cluster, seed_accounts: i64) {
    cluster
        .execute(&format!(
            "CREATE TABLE public.accounts (id int PRIMARY KEY, owner text NOT NULL,
                 balance numeric(12,2) NOT NULL, version int NOT NULL, tags text[], doc jsonb,
                 flag boolean NOT NULL DEFAULT false, updated timestamptz NOT NULL DEFAULT now());
             INSERT INTO public.accounts
                 SELECT g, 'owner ' || g, g * 1.25, 0, ARRAY['a', g::text],
                        jsonb_build_object('g', g), g % 2 = 0, now()
                 FROM generate_series(1, {seed_accounts}) g;
             CREATE TABLE public.notes (id bigint PRIMARY KEY, body text, version int NOT NULL);
             INSERT INTO public.notes SELECT g, 'note ' || g, 0 FROM generate_series(1, 500) g;
             ANALYZE public.accounts, public.notes;
             CREATE PUBLICATION pub FOR TABLE public.accounts, public.notes;"
        ))
        .await
        .unwrap();
}

/// Random transactions until `stop`: updates (raising `version`), inserts of new ids,
/// deletes, and now and then a multi-row update. Returns the number of transactions.
pub async fn workload(
    client: cdc_testkit::tokio_postgres::Client,
    stop: Arc<AtomicBool>,
    seed_accounts: i64,
) -> u64 {
    match run_workload(&client, &stop, seed_accounts + 1).await {
        Ok(done) => done,
        Err((done, e)) => panic!("workload transaction {done} failed: {e}"),
    }
}

/// Like [`workload`], for a server that is killed under it: ends at the first failed
/// transaction (returning how many committed before), as a client of a crashed server
/// would. Inserted ids start at `first_id`, so a second run on a promoted standby does
/// not collide with the first.
pub async fn workload_until_lost(
    client: cdc_testkit::tokio_postgres::Client,
    stop: Arc<AtomicBool>,
    first_id: i64,
) -> u64 {
    match run_workload(&client, &stop, first_id).await {
        Ok(done) | Err((done, _)) => done,
    }
}

async fn run_workload(
    client: &cdc_testkit::tokio_postgres::Client,
    stop: &AtomicBool,
    first_id: i64,
) -> Result<u64, (u64, cdc_testkit::tokio_postgres::Error)> {
    let mut next_id = first_id;
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
        client.batch_execute(&sql).await.map_err(|e| (done, e))?;
        done += 1;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    Ok(done)
}

/// Applies one Feldera envelope to `rows`, asserting that no change is applied twice: an
/// insert finds no row, a delete finds one, and every update raises the row's `version`.
/// `at` names the envelope in failures.
pub fn apply(rows: &mut BTreeMap<i64, Value>, envelope: &Value, at: &str) {
    let object = envelope.as_object().unwrap();
    assert_eq!(
        object.len(),
        1,
        "{at}: one operation per envelope: {envelope}"
    );
    let (op, row) = object.iter().next().unwrap();
    let id = row["id"].as_i64().unwrap();
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

/// Asserts `replayed` equals the table's rows as Postgres renders them with `select`.
pub async fn assert_equals_select(
    client: &cdc_testkit::tokio_postgres::Client,
    table: &str,
    select: &str,
    replayed: &BTreeMap<i64, Value>,
) {
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

/// Applies a per-table Feldera JSON file (`--out-dir`) in order (see [`apply`]).
pub fn replay(path: &Path) -> BTreeMap<i64, Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: BTreeMap<i64, Value> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let envelope: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}:{}: {e}: {line}", path.display(), n + 1));
        apply(
            &mut rows,
            &envelope,
            &format!("{}:{}", path.display(), n + 1),
        );
    }
    rows
}

/// `pgcdc stream --out-dir` of [`TABLES`] from publication `pub` (creating its slot,
/// checkpointing every 200 ms), plus the test's own flags.
pub struct OutDirStream {
    /// The output directory.
    pub dir: PathBuf,
    flags: Vec<String>,
}

impl OutDirStream {
    /// A stream into `dir` with `flags` added to every run.
    pub fn new(dir: PathBuf, flags: &[&str]) -> Self {
        OutDirStream {
            dir,
            flags: flags.iter().map(|f| f.to_string()).collect(),
        }
    }

    /// The command line against `source` (as the admin over TCP), with `extra` last.
    pub fn args(&self, source: &Cluster, extra: &[&str]) -> Vec<String> {
        self.args_for_uri(&admin_uri(source), extra)
    }

    /// The command line against the connection string `uri`, with `extra` last.
    pub fn args_for_uri(&self, uri: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "stream",
            "--uri",
            uri,
            "--publication",
            "pub",
            "--out-dir",
            self.dir.to_str().unwrap(),
            "--create-slot",
            "--checkpoint-interval",
            "200ms",
            "--status-interval",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (table, _) in TABLES {
            args.extend(["--table".to_string(), table.to_string()]);
        }
        args.extend(self.flags.iter().cloned());
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Starts a run against `source`, its stderr collected.
    pub fn spawn(&self, source: &Cluster) -> (Child, super::Lines) {
        self.spawn_for_uri(&admin_uri(source))
    }

    /// Starts a run against the connection string `uri`, its stderr collected.
    pub fn spawn_for_uri(&self, uri: &str) -> (Child, super::Lines) {
        let mut child = super::pgcdc(self.args_for_uri(uri, &[]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = super::Lines::collect(child.stderr.take().unwrap());
        (child, stderr)
    }

    /// Starts a run against `source` and kills it with SIGKILL after `wait_ms`.
    pub async fn kill_after(&self, source: &Cluster, wait_ms: u64, what: &str) {
        let (child, stderr) = self.spawn(source);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        kill_and_report(child, stderr, &format!("{what}: killed after {wait_ms} ms"));
    }

    /// Runs against `source` until `end_lsn` and checks that it ended there, then that the
    /// files, replayed, equal `SELECT *` on `oracle`.
    pub async fn finish_and_compare(&self, source: &Cluster, end_lsn: &str, oracle: &Cluster) {
        self.finish_and_compare_for_uri(&admin_uri(source), end_lsn, oracle)
            .await
    }

    /// [`Self::finish_and_compare`] with the connection string `uri`.
    pub async fn finish_and_compare_for_uri(&self, uri: &str, end_lsn: &str, oracle: &Cluster) {
        let args = self.args_for_uri(uri, &["--end-lsn", end_lsn, "--summary", "json"]);
        let output = tokio::task::spawn_blocking(move || {
            super::run(super::pgcdc(args), Duration::from_secs(180))
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "final run failed:\n{stderr}");
        let summary: Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
        assert_eq!(summary["outcome"], "end_reached", "{summary}");
        let client = oracle.connect("postgres").await.unwrap();
        for (table, select) in TABLES {
            let replayed = replay(&self.dir.join(format!("{table}.json")));
            assert_equals_select(&client, table, select, &replayed).await;
        }
    }
}

/// The admin's connection URI for `cluster` (over TCP, no password).
pub fn admin_uri(cluster: &Cluster) -> String {
    cluster.uri("postgres", ADMIN_USER, None)
}

/// Kills `child` with SIGKILL, asserts it had not panicked, and prints its stderr
/// under `what`.
pub fn kill_and_report(mut child: Child, stderr: super::Lines, what: &str) {
    super::signal(child.id(), libc::SIGKILL);
    child.wait().unwrap();
    let stderr = stderr.finish();
    assert!(
        !stderr.iter().any(|l| l.contains("panicked")),
        "{what}:\n{}",
        stderr.join("\n")
    );
    eprintln!("{what}; stderr:\n{}", stderr.join("\n"));
}
