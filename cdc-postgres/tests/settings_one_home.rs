//! Each setting has one home, and every way of building a configuration reaches it: the
//! commit mode and the snapshot mode live in `SourceConfig` (also what its JSON form, the
//! Feldera connector's, sets), the source reports its commit mode to the pipeline
//! (`Source::commit_mode`), and the running pipeline does what the setting says —
//! whether the configuration came from JSON or from the builder. (The CLI's mapping of
//! its flags onto `SourceConfig` is a unit test in `cdc-examples`, `commands::stream`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use cdc_core::{CommitMode, Lsn, Pipeline, RunEnd, Source, TableName};
use cdc_postgres::conn::{SnapshotMode, SourceConfig};
use cdc_postgres::source::{PgSource, PgSourceOptions};
use cdc_sinks::memory::{MemoryHandle, MemorySinkOptions};
use cdc_testkit::Cluster;
use support::*;

async fn setup() -> Cluster {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'v' FROM generate_series(1, 50) g;
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    cluster
}

/// The same settings, built from the connector's JSON and with the builder.
fn both_ways(cluster: &Cluster, commit_mode: Option<&str>, snapshot: &str) -> [SourceConfig; 2] {
    let uri = cluster.uri("postgres", "postgres", None);
    let mut json = serde_json::json!({
        "uri": uri, "publication": "pub", "source_table": "public.t", "snapshot": snapshot,
    });
    if let Some(mode) = commit_mode {
        json["commit_mode"] = mode.into();
    }
    let from_json = SourceConfig::from_json(&json.to_string()).unwrap();
    let mut built = SourceConfig::new(&uri, "pub")
        .unwrap()
        .with_tables(["public.t"])
        .unwrap();
    built.snapshot = match snapshot {
        "never" => SnapshotMode::Never,
        "initial_only" => SnapshotMode::InitialOnly,
        other => panic!("{other}"),
    };
    if commit_mode == Some("completion") {
        built.commit_mode = CommitMode::Completion;
    }
    assert_eq!(from_json, built, "the JSON and the builder disagree");
    [from_json, built]
}

fn source(config: SourceConfig) -> PgSource {
    let mut options = PgSourceOptions::new(config);
    options.config.batch.max_latency = Duration::from_millis(20);
    options.progress_interval = Duration::from_millis(200);
    PgSource::new(options)
}

/// Streams a change into a sink that never makes a checkpoint durable, and returns how far
/// the slot is confirmed once the sink has the change (waiting up to `wait` for it to pass
/// the change).
async fn slot_after_a_change(
    cluster: &Cluster,
    mut config: SourceConfig,
    slot: &str,
    wait: Duration,
) -> (Lsn, Lsn) {
    config.slot = Some(slot.to_owned());
    let source = source(config);
    let mode = source.commit_mode();
    let handle = MemoryHandle::new({
        let mut options = MemorySinkOptions::default();
        options.async_checkpoints = true;
        options
    });
    let pipeline = Pipeline::new(source, handle.sink(), pipeline_config());
    let shutdown = pipeline.shutdown_handle();
    let task = tokio::spawn(pipeline.run());
    let table = TableName::new("public", "t");
    // The slot exists once the stream started; then a change.
    let started = Instant::now();
    while confirmed_flush(cluster, slot).await.is_none() {
        assert!(started.elapsed() < Duration::from_secs(60), "no slot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster
        .execute("DELETE FROM public.t WHERE id = 1000; INSERT INTO public.t VALUES (1000, 'new')")
        .await
        .unwrap();
    let change_end: Lsn = cluster.current_wal_lsn().await.unwrap().parse().unwrap();
    assert!(
        handle
            .wait_until(Duration::from_secs(60), |h| h.row_count(&table) >= 1)
            .await,
        "the change never reached the sink ({mode:?})"
    );
    let deadline = Instant::now() + wait;
    let mut confirmed = confirmed_flush(cluster, slot).await.unwrap();
    while confirmed < change_end && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        confirmed = confirmed_flush(cluster, slot).await.unwrap();
    }
    drop(shutdown);
    task.abort();
    let _ = task.await;
    (confirmed, change_end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_mode_set_in_the_source_configuration_is_the_one_the_pipeline_follows() {
    let cluster = setup().await;
    for (n, config) in both_ways(&cluster, Some("completion"), "never")
        .into_iter()
        .enumerate()
    {
        assert_eq!(config.commit_mode, CommitMode::Completion);
        // Completion: the slot follows what the sink processed, durable or not.
        let slot = format!("completion_{n}");
        let (confirmed, change) =
            slot_after_a_change(&cluster, config, &slot, Duration::from_secs(30)).await;
        assert!(
            confirmed >= change,
            "way {n}: completion mode, but the slot stayed at {confirmed} (change at {change})"
        );
    }
    for (n, config) in both_ways(&cluster, None, "never").into_iter().enumerate() {
        assert_eq!(config.commit_mode, CommitMode::Checkpoint);
        // Checkpoint (default): nothing durable, so the slot stays before the change.
        let slot = format!("checkpoint_{n}");
        let (confirmed, change) =
            slot_after_a_change(&cluster, config, &slot, Duration::from_secs(2)).await;
        assert!(
            confirmed < change,
            "way {n}: checkpoint mode, but the slot moved to {confirmed} past an undurable change at {change}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_mode_initial_only_copies_and_stops_however_it_was_set() {
    let cluster = setup().await;
    let table = TableName::new("public", "t");
    for (n, config) in both_ways(&cluster, None, "initial_only")
        .into_iter()
        .enumerate()
    {
        let slot = config.slot_name();
        let handle = MemoryHandle::default();
        let pipeline = Pipeline::new(source(config), handle.sink(), pipeline_config());
        let summary = tokio::time::timeout(Duration::from_secs(60), pipeline.run())
            .await
            .expect("an initial_only run ends by itself")
            .unwrap();
        assert_eq!(summary.end, RunEnd::SourceEnded, "way {n}");
        assert_eq!(handle.row_count(&table), 50, "way {n}");
        // The slot was temporary: nothing is left on the server.
        assert_eq!(confirmed_flush(&cluster, &slot).await, None, "way {n}");
    }
}
