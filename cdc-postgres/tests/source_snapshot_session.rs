//! The session that exports the consistent snapshot stays idle in a transaction for the
//! whole copy. Terminated during the copy, or under a server whose
//! `idle_in_transaction_session_timeout` is far shorter than the copy, the snapshot must
//! still complete in the same run — copied once, no restart — and streaming must start
//! from the slot's consistent point on a new session.
//!
//! The source is driven by hand (no pipeline), so the copy provably waits, held back by
//! its bounded channel, while the exporting session is killed or sits idle.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{EventKind, SnapshotMarker, Source};
use cdc_postgres::source::PgSource;
use cdc_testkit::Cluster;
use support::*;

const ROWS: i64 = 20_000;

async fn setup(cluster: &Cluster) {
    cluster
        .execute(&format!(
            "CREATE TABLE public.t (id int PRIMARY KEY, v text);
             INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, {ROWS}) g;
             CREATE PUBLICATION pub FOR TABLE public.t;"
        ))
        .await
        .unwrap();
}

/// Counts what the source delivers until the snapshot completed and `streamed` rows
/// inserted after it arrived.
#[derive(Default, Debug)]
struct Seen {
    snapshot_rows: i64,
    streamed: i64,
    restarts: usize,
    completed: bool,
}

impl Seen {
    fn add(&mut self, batch: &cdc_core::ChangeBatch) {
        for event in &batch.events {
            match &event.kind {
                EventKind::Insert { .. } if !self.completed => self.snapshot_rows += 1,
                EventKind::Insert { .. } => self.streamed += 1,
                EventKind::Snapshot(SnapshotMarker::Restarted) => self.restarts += 1,
                EventKind::Snapshot(SnapshotMarker::Completed { .. }) => self.completed = true,
                _ => {}
            }
        }
    }
}

/// Starts the source, takes one batch (the copy is then running and held back), calls
/// `meanwhile`, then drains the snapshot and 100 rows inserted after it.
async fn run(cluster: &Cluster, meanwhile: impl std::future::Future<Output = ()>) -> Seen {
    let mut options = options(cluster, &["public.t"]);
    options.snapshot_workers = 1;
    let mut source = PgSource::new(options);
    source.start(None).await.unwrap();
    let mut seen = Seen::default();
    let first = source.next_batch().await.unwrap().unwrap();
    seen.add(&first);
    assert!(
        !seen.completed,
        "the snapshot finished before the test could interfere"
    );
    meanwhile.await;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut inserted = false;
    while seen.streamed < 100 {
        assert!(std::time::Instant::now() < deadline, "{seen:?}");
        let batch = tokio::time::timeout(Duration::from_secs(60), source.next_batch())
            .await
            .expect("next_batch hung")
            .unwrap()
            .expect("the stream ended");
        seen.add(&batch);
        if seen.completed && !inserted {
            cluster
                .execute(
                    "INSERT INTO public.t SELECT g, 'after' FROM generate_series(100001, 100100) g",
                )
                .await
                .unwrap();
            inserted = true;
        }
    }
    source.close().await.unwrap();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exporting_walsender_terminated_during_the_copy_costs_nothing() {
    let cluster = Cluster::new().await.unwrap();
    setup(&cluster).await;
    let seen = run(&cluster, async {
        let killed = cluster.terminate_walsenders().await.unwrap();
        assert_eq!(
            killed, 1,
            "the exporting session should be the only walsender"
        );
    })
    .await;
    assert_eq!(seen.restarts, 0, "{seen:?}");
    assert_eq!(seen.snapshot_rows, ROWS, "{seen:?}");
    assert_eq!(seen.streamed, 100, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_idle_in_transaction_timeout_does_not_end_the_snapshot() {
    let cluster = Cluster::builder()
        .setting("idle_in_transaction_session_timeout", "1s")
        .setting("idle_session_timeout", "1s")
        .build()
        .await
        .unwrap();
    setup(&cluster).await;
    // The copy waits three times the timeout, with the exporting session idle in its
    // transaction and the copy worker's transaction open.
    let seen = run(&cluster, tokio::time::sleep(Duration::from_secs(3))).await;
    assert_eq!(seen.restarts, 0, "{seen:?}");
    assert_eq!(seen.snapshot_rows, ROWS, "{seen:?}");
    assert_eq!(seen.streamed, 100, "{seen:?}");
}
