//! What PostgreSQL 18 changed: stored generated columns published with
//! `publish_generated_columns = stored` stream like any column (and are marked generated
//! in the schema), and a slot invalidated by `idle_replication_slot_timeout` is reported
//! as such. Always on version 18 (the test kit fetches it when the distribution lacks it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{ErrorKind, EventKind, Pipeline, TableName};
use cdc_postgres::source::PgSource;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_generated_columns_stream_when_the_publication_publishes_them() {
    let cluster = Cluster::builder().major(18).build().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.g (
                 id int PRIMARY KEY,
                 a int,
                 doubled int GENERATED ALWAYS AS (a * 2) STORED,
                 label text GENERATED ALWAYS AS ('#' || id::text) STORED
             );
             INSERT INTO public.g (id, a) SELECT g, g FROM generate_series(1, 20) g;
             CREATE PUBLICATION pub FOR TABLE public.g WITH (publish_generated_columns = stored);",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(options(&cluster, &["public.g"]), &handle);
    running.wait_snapshot(&handle).await;
    cluster
        .execute(
            "UPDATE public.g SET a = a + 100 WHERE id % 2 = 0;
             DELETE FROM public.g WHERE id % 5 = 0;
             INSERT INTO public.g (id, a) VALUES (21, -1), (22, NULL);",
        )
        .await
        .unwrap();
    running
        .wait_for_equal(&cluster, &handle, &["public.g"], Duration::from_secs(60))
        .await;
    running.stop().await;
    let schema = handle.schema(&TableName::new("public", "g")).unwrap();
    let generated: Vec<(&str, bool)> = schema
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.generated))
        .collect();
    assert_eq!(
        generated,
        [
            ("id", false),
            ("a", false),
            ("doubled", true),
            ("label", true)
        ]
    );
    // The snapshot's schema (from the catalog) and the stream's (Relation messages) agree.
    assert!(
        !handle
            .changes()
            .iter()
            .any(|e| matches!(e.kind, EventKind::SchemaChange { .. })),
        "a schema change between snapshot and stream"
    );
    assert!(handle.anomalies().is_empty(), "{:?}", handle.anomalies());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_invalidated_by_the_idle_timeout_is_reported_as_such() {
    let cluster = Cluster::builder()
        .major(18)
        .setting("idle_replication_slot_timeout", "1s")
        .build()
        .await
        .unwrap();
    cluster
        .execute(
            "CREATE TABLE public.t (id int PRIMARY KEY);
             INSERT INTO public.t VALUES (1);
             CREATE PUBLICATION pub FOR TABLE public.t;",
        )
        .await
        .unwrap();
    let handle = MemoryHandle::default();
    let mut running = spawn(options(&cluster, &["public.t"]), &handle);
    running
        .wait_for_equal(&cluster, &handle, &["public.t"], Duration::from_secs(60))
        .await;
    running.stop().await;
    // Inactive past the timeout; the next checkpoint invalidates the slot.
    let client = cluster.connect("postgres").await.unwrap();
    let mut reason: Option<String> = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        client.batch_execute("CHECKPOINT").await.unwrap();
        reason = client
            .query_one(
                "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_type = 'logical'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if reason.is_some() {
            break;
        }
    }
    assert_eq!(reason.as_deref(), Some("idle_timeout"));
    let err = Pipeline::new(
        PgSource::new(options(&cluster, &["public.t"])),
        handle.sink(),
        pipeline_config(),
    )
    .run()
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("idle_timeout") && text.contains("idle_replication_slot_timeout"),
        "{text}"
    );
}
