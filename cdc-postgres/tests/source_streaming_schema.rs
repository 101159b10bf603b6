//! Large transactions streamed by the server (protocol v2, `logical_decoding_work_mem`
//! tiny) with rollbacks and rolled-back subtransactions, logical messages, and schema
//! changes mid-stream under both policies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{ErrorKind, EventKind, Value};
use cdc_pgoutput::changes::{MessageFilter, SchemaChangePolicy};
use cdc_postgres::conn::Streaming;
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::Cluster;
use support::*;

async fn streaming_cluster() -> Cluster {
    let cluster = Cluster::builder()
        .setting("logical_decoding_work_mem", "64kB")
        .build()
        .await
        .unwrap();
    cluster
        .execute(
            "CREATE TABLE public.big (id int PRIMARY KEY, v text);
             CREATE PUBLICATION pub FOR TABLE public.big;",
        )
        .await
        .unwrap();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_transactions_deliver_only_what_committed() {
    let cluster = streaming_cluster().await;
    let handle = MemoryHandle::default();
    let mut options = options(&cluster, &["public.big"]);
    options.config.streaming = Streaming::On;
    options.stream_memory_limit = 256 << 10;
    options.messages = MessageFilter::Prefixes(vec!["app".into()]);
    let running = spawn(options, &handle);
    wait_snapshot_completed(&handle).await;
    // A large committed transaction with a rolled-back subtransaction in the middle.
    cluster
        .execute(
            "BEGIN;
             INSERT INTO public.big SELECT g, repeat('a', 50) FROM generate_series(1, 5000) g;
             SAVEPOINT s1;
             INSERT INTO public.big SELECT g, 'rolled back' FROM generate_series(5001, 9000) g;
             ROLLBACK TO SAVEPOINT s1;
             SELECT pg_logical_emit_message(true, 'app', 'inside');
             SELECT pg_logical_emit_message(true, 'other', 'filtered out');
             INSERT INTO public.big SELECT g, repeat('b', 50) FROM generate_series(9001, 12000) g;
             COMMIT;",
        )
        .await
        .unwrap();
    // A large transaction that rolls back entirely.
    cluster
        .execute(
            "BEGIN;
             INSERT INTO public.big SELECT g, 'never' FROM generate_series(20001, 30000) g;
             ROLLBACK;",
        )
        .await
        .unwrap();
    cluster
        .execute("INSERT INTO public.big VALUES (99999, 'after')")
        .await
        .unwrap();
    wait_for_equal(&cluster, &handle, &["public.big"], Duration::from_secs(60)).await;
    running.stop().await;
    let changes = handle.changes();
    assert!(!changes.iter().any(|e| match &e.kind {
        EventKind::Insert { new, .. } => matches!(&new[1], Value::Text(t) if t.as_str() == "rolled back" || t.as_str() == "never"),
        _ => false,
    }));
    let messages: Vec<&str> = changes
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Message { prefix, .. } => Some(prefix.as_str()),
            _ => None,
        })
        .collect();
    let kinds: std::collections::BTreeMap<String, usize> =
        changes.iter().fold(Default::default(), |mut m, e| {
            let k = format!("{:?}", e.kind).chars().take(12).collect::<String>();
            *m.entry(k).or_default() += 1;
            m
        });
    let dups = handle.duplicate_positions();
    let begins: Vec<String> = changes
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Begin(_) | EventKind::Commit(_)))
        .map(|e| format!("{} {:?}", e.position, e.kind))
        .collect();
    assert_eq!(
        messages,
        vec!["app"],
        "{kinds:?} dups {} {:?} {begins:?}",
        dups.len(),
        dups.first()
    );
    assert!(handle.duplicate_positions().is_empty());
    // The streamed transaction was really streamed by the server.
    let client = cluster.connect("postgres").await.unwrap();
    let streamed: i64 = client
        .query_one(
            "SELECT COALESCE(sum(stream_txns), 0)::int8 FROM pg_stat_replication_slots",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(streamed > 0, "the server did not stream any transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_transaction_in_v1_flows_in_bounded_batches() {
    let cluster = streaming_cluster().await;
    let handle = MemoryHandle::default();
    let mut options = options(&cluster, &["public.big"]);
    options.config.batch.max_events = 1000;
    let running = spawn(options, &handle);
    wait_snapshot_completed(&handle).await;
    cluster
        .execute("INSERT INTO public.big SELECT g, 'x' FROM generate_series(1, 20000) g")
        .await
        .unwrap();
    wait_for_equal(&cluster, &handle, &["public.big"], Duration::from_secs(60)).await;
    let summary = running.stop().await;
    assert!(
        summary.stats.batches >= 20,
        "{} batches",
        summary.stats.batches
    );
}

async fn schema_cluster() -> Cluster {
    let cluster = Cluster::new().await.unwrap();
    cluster
        .execute(
            "CREATE TABLE public.s (id int PRIMARY KEY, a text, b int);
             INSERT INTO public.s VALUES (1, 'one', 1);
             CREATE PUBLICATION pub FOR TABLE public.s;",
        )
        .await
        .unwrap();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_change_fails_by_default_naming_the_difference() {
    for (ddl, expected) in [
        (
            "ALTER TABLE public.s ADD COLUMN c text",
            "column \"c\" added",
        ),
        ("ALTER TABLE public.s DROP COLUMN b", "column \"b\" dropped"),
        (
            "ALTER TABLE public.s ALTER COLUMN b TYPE bigint",
            "changed type",
        ),
    ] {
        let cluster = schema_cluster().await;
        let handle = MemoryHandle::default();
        let running = spawn(options(&cluster, &["public.s"]), &handle);
        cluster
            .execute("INSERT INTO public.s VALUES (2, 'two', 2)")
            .await
            .unwrap();
        wait_for_equal(&cluster, &handle, &["public.s"], Duration::from_secs(30)).await;
        cluster.execute(ddl).await.unwrap();
        cluster
            .execute("UPDATE public.s SET a = 'changed' WHERE id = 1")
            .await
            .unwrap();
        let result = tokio::time::timeout(Duration::from_secs(30), running.task)
            .await
            .expect("the pipeline should stop")
            .unwrap();
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.to_string().contains(expected), "{ddl}: {err}");
        assert!(err.to_string().contains("public.s"), "{err}");
        // Nothing under the new schema reached the sink.
        let rows = sink_text(&handle, "public.s");
        assert!(
            rows.iter().all(|r| r[1].as_deref() != Some("changed")),
            "{rows:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_change_evolves_when_asked() {
    let cluster = schema_cluster().await;
    let handle = MemoryHandle::default();
    let mut options = options(&cluster, &["public.s"]);
    options.schema_policy = SchemaChangePolicy::Evolve;
    let running = spawn(options, &handle);
    cluster
        .execute("INSERT INTO public.s VALUES (2, 'two', 2)")
        .await
        .unwrap();
    wait_for_equal(&cluster, &handle, &["public.s"], Duration::from_secs(30)).await;
    cluster
        .execute(
            "ALTER TABLE public.s ADD COLUMN c text;
             INSERT INTO public.s VALUES (3, 'three', 3, 'new column');",
        )
        .await
        .unwrap();
    let seen = handle
        .wait_until(Duration::from_secs(30), |h| {
            h.changes()
                .iter()
                .any(|e| matches!(e.kind, EventKind::SchemaChange { .. }))
        })
        .await;
    assert!(seen, "no schema change event");
    let delivered_new = handle
        .wait_until(Duration::from_secs(30), |h| {
            h.changes().iter().any(|e| match &e.kind {
                EventKind::Insert { new, .. } => new.len() == 4,
                _ => false,
            })
        })
        .await;
    assert!(delivered_new, "no row with the new column");
    running.stop().await;
}
