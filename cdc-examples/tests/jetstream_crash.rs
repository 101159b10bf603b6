//! `pgcdc stream --sink nats://…` under write load: killed with SIGKILL at
//! proptest-chosen points and restarted (online snapshot, both message groupings); and
//! with the stream's leader killed mid-stream in a three-node JetStream cluster (replicas
//! 3). A consumer reading the stream from the start (the NATS client, not pgcdc's code)
//! rebuilds each table equal to `SELECT *`, and no (source, position, part) appears twice.
//! The same with Debezium records (`--format debezium`, with transaction metadata),
//! rebuilt by `id` and `version` from the envelopes' `op`, `before` and `after`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cdc_sinks::jetstream::headers;
use cdc_sinks::testing::jetstream::read_stream;
use cdc_testkit::{ADMIN_USER, Cluster, NatsCluster};
use proptest::prelude::*;
use serde_json::Value;
use support::bank::*;
use support::*;

const SEED_ACCOUNTS: i64 = 20_000;

/// `pgcdc stream` into `stream` on `nats`, subjects under `prefix`.
fn args(uri: &str, nats: &str, stream: &str, prefix: &str, extra: &[&str]) -> Vec<String> {
    let template = format!("{prefix}.{{database}}.{{schema}}.{{table}}");
    let mut args: Vec<String> = [
        "stream",
        "--uri",
        uri,
        "--publication",
        "pub",
        "--table",
        "public.accounts",
        "--table",
        "public.notes",
        "--sink",
        nats,
        "--stream",
        stream,
        "--subject-template",
        &template,
        "--create-stream",
        "--create-slot",
        "--chunk-rows",
        "5000",
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
}

/// Reads the whole stream back and applies it per table, asserting that sequences have
/// no gap and no (source, position, part) appears twice.
async fn rebuild(nats: &str, stream: &str) -> BTreeMap<String, BTreeMap<i64, Value>> {
    let messages = read_stream(nats, stream).await;
    assert!(!messages.is_empty(), "the stream is empty");
    let mut seen = HashSet::new();
    let mut tables: BTreeMap<String, BTreeMap<i64, Value>> = BTreeMap::new();
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(
            m.sequence,
            i as u64 + 1,
            "a gap before message {}",
            m.sequence
        );
        let key = (
            m.header(headers::SOURCE).unwrap().to_owned(),
            m.header(headers::POSITION).unwrap().to_owned(),
            m.header(headers::PART).unwrap_or("0").to_owned(),
        );
        assert!(seen.insert(key.clone()), "{key:?} appears twice");
        // Subjects are <prefix>.<database>.<schema>.<table>.
        let mut tokens = m.subject.rsplit('.');
        let (table, schema) = (tokens.next().unwrap(), tokens.next().unwrap());
        let rows = tables.entry(format!("{schema}.{table}")).or_default();
        for (n, record) in m.records().iter().enumerate() {
            apply(rows, record, &format!("message {} record {n}", m.sequence));
        }
    }
    tables
}

async fn assert_stream_equals_select(cluster: &Cluster, nats: &str, stream: &str) {
    let tables = rebuild(nats, stream).await;
    let client = cluster.connect("postgres").await.unwrap();
    for (table, select) in TABLES {
        let empty = BTreeMap::new();
        let replayed = tables.get(table).unwrap_or(&empty);
        assert_equals_select(&client, table, select, replayed).await;
    }
}

/// Runs `args` with `--end-lsn` at the current end of WAL, expecting it to finish.
async fn finish_at_end(cluster: &Cluster, mut args: Vec<String>) {
    let end = cluster.current_wal_lsn().await.unwrap();
    args.extend(["--end-lsn".into(), end, "--summary".into(), "json".into()]);
    let output = tokio::task::spawn_blocking(move || run(pgcdc(args), Duration::from_secs(180)))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "final run failed:\n{stderr}");
    let summary: Value = serde_json::from_str(stderr.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("the last line is not the JSON summary ({e}):\n{stderr}"));
    assert_eq!(summary["outcome"], "end_reached", "{summary}");
}

async fn killed_and_restarted(nats: &NatsCluster, case: usize, kills: Vec<u64>, grouping: &str) {
    let (cluster, stream) = kill_and_finish(nats, case, kills, &["--grouping", grouping]).await;
    assert_stream_equals_select(&cluster, &nats.url(), &stream).await;
}

/// Runs pgcdc (with `extra` arguments) under the workload, killing it after each of
/// `kills` milliseconds, then once more to the end of WAL. Returns the cluster and the
/// stream's name.
async fn kill_and_finish(
    nats: &NatsCluster,
    case: usize,
    kills: Vec<u64>,
    extra: &[&str],
) -> (Cluster, String) {
    let cluster = Cluster::new().await.unwrap();
    create_schema(&cluster, SEED_ACCOUNTS).await;
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let (stream, prefix) = (format!("KILLED{case}"), format!("killed{case}"));
    let args = |more: &[&str]| {
        let mut all = extra.to_vec();
        all.extend_from_slice(more);
        args(&uri, &nats.url(), &stream, &prefix, &all)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(workload(
        cluster.connect("postgres").await.unwrap(),
        stop.clone(),
        SEED_ACCOUNTS,
    ));
    for (round, wait) in kills.iter().enumerate() {
        let mut child = pgcdc(args(&[]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Lines::collect(child.stderr.take().unwrap());
        tokio::time::sleep(Duration::from_millis(*wait)).await;
        signal(child.id(), libc::SIGKILL);
        child.wait().unwrap();
        let stderr = stderr.finish();
        assert!(
            !stderr.iter().any(|l| l.contains("panicked")),
            "case {case} round {round}:\n{}",
            stderr.join("\n")
        );
        eprintln!("case {case} ({extra:?}): killed after {wait} ms");
    }
    stop.store(true, Ordering::SeqCst);
    assert!(load.await.unwrap() > 0);
    finish_at_end(&cluster, args(&[])).await;
    (cluster, stream)
}

/// Applies the stream's Debezium records per table by `id`, keeping each row's
/// `version`, with no change applied twice: a create or snapshot read finds no row, an
/// update finds one and raises its version, a delete finds one; a TRUNCATE empties the
/// table. Transaction metadata records are counted: every BEGIN has its END. The
/// snapshot's labels say where each row stands as in one uninterrupted snapshot of two
/// tables: one `first`, one `last`, one table's first and one table's last besides.
async fn rebuild_debezium(nats: &str, stream: &str) -> BTreeMap<String, BTreeMap<i64, i64>> {
    let messages = read_stream(nats, stream).await;
    assert!(!messages.is_empty(), "the stream is empty");
    let mut tables: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
    let mut open_transactions = HashSet::new();
    let mut labels: BTreeMap<String, usize> = BTreeMap::new();
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(
            m.sequence,
            i as u64 + 1,
            "a gap before message {}",
            m.sequence
        );
        for (n, value) in m.records().iter().enumerate() {
            let at = format!("message {} record {n}", m.sequence);
            if let Some(status) = value["status"].as_str() {
                let id = value["id"].as_str().unwrap();
                let xid = id.split(':').next().unwrap().to_owned();
                match status {
                    "BEGIN" => assert!(open_transactions.insert(xid), "{at}: BEGIN twice"),
                    _ => assert!(open_transactions.remove(&xid), "{at}: END without BEGIN"),
                }
                continue;
            }
            let source = &value["source"];
            let table = format!(
                "{}.{}",
                source["schema"].as_str().unwrap(),
                source["table"].as_str().unwrap()
            );
            let rows = tables.entry(table).or_default();
            let row_of = |side: &str| {
                let row = &value[side];
                (row["id"].as_i64().unwrap(), row["version"].as_i64())
            };
            match value["op"].as_str().unwrap() {
                "c" | "r" => {
                    if value["op"] == "r" {
                        let label = source["snapshot"].as_str().unwrap().to_owned();
                        *labels.entry(label).or_default() += 1;
                    }
                    let (id, version) = row_of("after");
                    let old = rows.insert(id, version.unwrap());
                    assert!(old.is_none(), "{at}: row {id} inserted twice");
                }
                "u" => {
                    let (id, version) = row_of("after");
                    let current = rows
                        .get_mut(&id)
                        .unwrap_or_else(|| panic!("{at}: update of missing row {id}"));
                    let version = version.unwrap();
                    assert!(
                        version > *current,
                        "{at}: update of row {id} applied twice ({current} -> {version})"
                    );
                    *current = version;
                }
                "d" => {
                    let (id, _) = row_of("before");
                    assert!(
                        rows.remove(&id).is_some(),
                        "{at}: row {id} deleted twice or never inserted"
                    );
                }
                "t" => rows.clear(),
                other => panic!("{at}: unexpected op {other}"),
            }
        }
    }
    assert!(
        open_transactions.is_empty(),
        "transactions without END: {open_transactions:?}"
    );
    for (label, count) in [
        ("first", 1),
        ("first_in_data_collection", 1),
        ("last_in_data_collection", 1),
        ("last", 1),
    ] {
        assert_eq!(
            labels.get(label),
            Some(&count),
            "snapshot labels {labels:?}"
        );
    }
    tables
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_records_killed_and_restarted_rebuild_every_row_once() {
    let nats = NatsCluster::single().await.unwrap();
    let extra = [
        "--format",
        "debezium",
        "--debezium-schemas",
        "false",
        "--debezium-transactions",
    ];
    let (cluster, stream) = kill_and_finish(&nats, 100, vec![300, 900, 2200], &extra).await;
    let tables = rebuild_debezium(&nats.url(), &stream).await;
    let client = cluster.connect("postgres").await.unwrap();
    for table in ["public.accounts", "public.notes"] {
        let expected: BTreeMap<i64, i64> = client
            .query(&format!("SELECT id::int8, version::int8 FROM {table}"), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        let empty = BTreeMap::new();
        let replayed = tables.get(table).unwrap_or(&empty);
        assert_eq!(replayed.len(), expected.len(), "{table}: row count");
        assert!(
            replayed == &expected,
            "{table}: rows by id and version differ"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3,
        failure_persistence: None,
        // A case takes seconds: report the failing input instead of shrinking it.
        max_shrink_iters: 0,
        ..ProptestConfig::default()
    })]

    /// Kill points early (mostly during the online snapshot's chunks) and later (while
    /// streaming, possibly between a publish and its checkpoint).
    #[test]
    fn killed_at_proptest_chosen_points_and_restarted_the_stream_equals_select(
        kills in prop::collection::vec(150u64..2500, 2..=3),
        transaction_grouping in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, Ordering::SeqCst);
        let grouping = if transaction_grouping { "transaction" } else { "event" };
        runtime.block_on(async {
            let nats = NatsCluster::single().await.unwrap();
            killed_and_restarted(&nats, case, kills, grouping).await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streams_leader_killed_mid_stream_in_a_three_node_cluster() {
    let nats = NatsCluster::start(3).await.unwrap();
    let cluster = Cluster::new().await.unwrap();
    create_schema(&cluster, SEED_ACCOUNTS).await;
    let uri = cluster.uri("postgres", ADMIN_USER, None);
    let args = args(&uri, &nats.url(), "R3", "r3", &["--stream-replicas", "3"]);
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(workload(
        cluster.connect("postgres").await.unwrap(),
        stop.clone(),
        SEED_ACCOUNTS,
    ));
    let mut child = pgcdc(args.clone())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Lines::collect(child.stderr.take().unwrap());

    let client = async_nats::connect(nats.url().split(',').collect::<Vec<_>>())
        .await
        .unwrap();
    let context = async_nats::jetstream::new(client);
    // Mid-stream: pgcdc has made the replicated stream, it has a leader, and changes arrive.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let leader = loop {
        if let Ok(mut stream) = context.get_stream("R3").await
            && let Ok(info) = stream.info().await
            && info.state.messages > 0
            && let Some(leader) = info.cluster.clone().and_then(|c| c.leader)
        {
            break leader;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no change reached a replicated stream with a leader within 60 s:\n{}",
            stderr.snapshot().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let index = leader.trim_start_matches('n').parse::<usize>().unwrap() - 1;
    nats.kill9(index).unwrap();
    eprintln!("killed the stream's leader {leader}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    nats.restart(index).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    assert!(load.await.unwrap() > 0);

    // The node's loss was repaired in place: pgcdc is still running.
    assert!(
        child.try_wait().unwrap().is_none(),
        "pgcdc exited after the node was killed:\n{}",
        stderr.snapshot().join("\n")
    );
    signal(child.id(), libc::SIGTERM);
    let status = wait_status(&mut child, Duration::from_secs(60));
    let stderr = stderr.finish();
    assert!(
        status.success(),
        "pgcdc after SIGTERM: {status}\n{}",
        stderr.join("\n")
    );
    let repairs = stderr.iter().filter(|l| l.contains("repairing")).count();
    eprintln!("pgcdc repaired its publish chain {repairs} times");
    finish_at_end(&cluster, args).await;
    assert_stream_equals_select(&cluster, &nats.url(), "R3").await;
}
