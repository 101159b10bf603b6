//! Shared helpers of the PgSource integration tests: a cluster, a pipeline into the
//! in-memory sink, and the oracle (`SELECT` through Postgres's own text output).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use cdc_core::{Pipeline, PipelineConfig, RunSummary, ShutdownHandle, TableName};
use cdc_postgres::conn::SourceConfig;
use cdc_postgres::source::{PgSource, PgSourceOptions};
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;

pub mod online;

/// Source options for `tables` of publication `pub` on `cluster`'s `postgres` database.
pub fn options(cluster: &Cluster, tables: &[&str]) -> PgSourceOptions {
    let uri = cluster.uri("postgres", "postgres", None);
    let config = SourceConfig::new(&uri, "pub")
        .unwrap()
        .with_tables(tables.iter().copied())
        .unwrap();
    let mut options = PgSourceOptions::new(config);
    // Most suites test the consistent snapshot (online has its own suite).
    options.config.snapshot = cdc_postgres::conn::SnapshotMode::Initial;
    options.config.batch.max_latency = Duration::from_millis(20);
    options.progress_interval = Duration::from_millis(200);
    // The suites' streams restart after crashes that lost their first token: they may
    // replace their own slot (the library's default refuses; `source_slot_policy` tests
    // that).
    options.slot_policy.may_replace = true;
    options
}

/// A pipeline config with a short checkpoint interval.
pub fn pipeline_config() -> PipelineConfig {
    {
        let mut options = PipelineConfig::default();
        options.checkpoint_interval = Duration::from_millis(100);
        options
    }
}

/// A running pipeline.
pub struct Running {
    pub shutdown: ShutdownHandle,
    pub task: tokio::task::JoinHandle<cdc_core::Result<RunSummary>>,
}

/// Starts a pipeline from `options` into the memory sink `handle`.
pub fn spawn(options: PgSourceOptions, handle: &MemoryHandle) -> Running {
    spawn_with_stats(options, handle).0
}

/// [`spawn`], also returning the source's live statistics.
pub fn spawn_with_stats(
    options: PgSourceOptions,
    handle: &MemoryHandle,
) -> (Running, cdc_postgres::source::SourceStats) {
    let source = PgSource::new(options);
    let stats = source.stats();
    let pipeline = Pipeline::new(source, handle.sink(), pipeline_config());
    let shutdown = pipeline.shutdown_handle();
    let task = tokio::spawn(pipeline.run());
    (Running { shutdown, task }, stats)
}

impl Running {
    /// Stops the run as soon as `condition` holds (checked every 10 ms, for up to 60 s;
    /// panics naming `awaited` if it never does). The sink's writes are held from the
    /// moment it is seen while the shutdown is requested, so the pipeline writes at most
    /// the batch in hand after it, however slow the machine.
    pub async fn stop_once(
        self,
        handle: &MemoryHandle,
        awaited: &str,
        mut condition: impl FnMut(&MemoryHandle) -> bool,
    ) -> RunSummary {
        let seen = handle
            .wait_until(Duration::from_secs(60), |h| {
                let seen = condition(h);
                if seen {
                    h.hold_writes(true);
                }
                seen
            })
            .await;
        assert!(seen, "{awaited} never happened");
        self.shutdown.shutdown();
        handle.hold_writes(false);
        self.stop().await
    }

    /// Graceful shutdown; returns the summary.
    pub async fn stop(self) -> RunSummary {
        self.shutdown.shutdown();
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("pipeline did not stop within 60 s")
            .expect("pipeline task panicked")
            .expect("pipeline failed")
    }
}

/// `SELECT *` of `table` as Postgres's output functions print it (the simple query
/// protocol returns exactly that text), sorted.
pub async fn select_text(cluster: &Cluster, table: &str) -> Vec<Vec<Option<String>>> {
    let client = cluster.connect("postgres").await.unwrap();
    client
        .batch_execute(
            "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'; \
             SET extra_float_digits = 1; SET bytea_output = 'hex'",
        )
        .await
        .unwrap();
    let name = TableName::parse(table).unwrap();
    let messages = client
        .simple_query(&format!("SELECT * FROM {name}"))
        .await
        .unwrap();
    let mut out: Vec<Vec<Option<String>>> = messages
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// The memory sink's rows of `table` through our own text rendering, sorted.
pub fn sink_text(handle: &MemoryHandle, table: &str) -> Vec<Vec<Option<String>>> {
    let mut rows = handle.rows_text(&TableName::parse(table).unwrap());
    rows.sort();
    rows
}

/// Waits until the sink's rows of every table equal `SELECT *`; panics with the
/// difference after `timeout`.
pub async fn wait_for_equal(
    cluster: &Cluster,
    handle: &MemoryHandle,
    tables: &[&str],
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut all_equal = true;
        let mut report = String::new();
        for table in tables {
            let expected = select_text(cluster, table).await;
            let actual = sink_text(handle, table);
            if expected != actual {
                all_equal = false;
                report.push_str(&format!(
                    "{table}: sink has {} rows, source {}\n",
                    actual.len(),
                    expected.len()
                ));
                if let Some(first) = expected.iter().find(|r| !actual.contains(r)) {
                    report.push_str(&format!("  first missing in sink: {first:?}\n"));
                }
                if let Some(first) = actual.iter().find(|r| !expected.contains(r)) {
                    report.push_str(&format!("  first extra in sink: {first:?}\n"));
                }
            }
        }
        if all_equal {
            return;
        }
        if Instant::now() > deadline {
            panic!("sink never matched SELECT *:\n{report}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The slot's `confirmed_flush_lsn`.
pub async fn confirmed_flush(cluster: &Cluster, slot: &str) -> Option<cdc_core::Lsn> {
    let lsn = cluster.slot_confirmed_flush_lsn(slot).await.unwrap()?;
    Some(lsn.parse().unwrap())
}

/// Waits until the sink has seen the snapshot's Completed marker (streaming has begun).
pub async fn wait_snapshot_completed(handle: &MemoryHandle) {
    let done = handle
        .wait_until(Duration::from_secs(60), |h| {
            h.changes().iter().any(|e| {
                matches!(
                    e.kind,
                    cdc_core::EventKind::Snapshot(cdc_core::SnapshotMarker::Completed { .. })
                )
            })
        })
        .await;
    assert!(done, "the snapshot did not complete within 60 s");
}

impl Running {
    /// Like [`wait_for_equal`], failing at once with the pipeline's error if it stopped.
    pub async fn wait_for_equal(
        &mut self,
        cluster: &Cluster,
        handle: &MemoryHandle,
        tables: &[&str],
        timeout: Duration,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut equal = true;
            for table in tables {
                if select_text(cluster, table).await != sink_text(handle, table) {
                    equal = false;
                    break;
                }
            }
            if equal {
                return;
            }
            if self.task.is_finished() {
                let result = (&mut self.task).await.expect("pipeline task panicked");
                panic!("the pipeline stopped before the sink matched: {result:?}");
            }
            if Instant::now() > deadline {
                // Reports the difference.
                wait_for_equal(cluster, handle, tables, Duration::ZERO).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Like [`wait_snapshot_completed`], failing at once with the pipeline's error if it
    /// stopped.
    pub async fn wait_snapshot(&mut self, handle: &MemoryHandle) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if handle.changes().iter().any(|e| {
                matches!(
                    e.kind,
                    cdc_core::EventKind::Snapshot(cdc_core::SnapshotMarker::Completed { .. })
                )
            }) {
                return;
            }
            if self.task.is_finished() {
                let result = (&mut self.task).await.expect("pipeline task panicked");
                panic!("the pipeline stopped before the snapshot completed: {result:?}");
            }
            assert!(
                Instant::now() < deadline,
                "the snapshot did not complete within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Waits until `slot`'s `confirmed_flush_lsn` reaches the server's current WAL position (as
/// of the call): the slot does not retain WAL written so far.
pub async fn wait_slot_caught_up(cluster: &Cluster, slot: &str, timeout: Duration) {
    let target: cdc_core::Lsn = cluster.current_wal_lsn().await.unwrap().parse().unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        let now = confirmed_flush(cluster, slot).await.unwrap();
        if now >= target {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "slot stuck at {now}, WAL at {target}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
