//! The version suite: what must hold on every supported PostgreSQL major version, run on
//! each version in `PGCDC_PG_VERSIONS` (CI: 14, 15, 16, 17 and 18; locally the
//! distribution's server unless set). Each test loops over the versions, one throwaway
//! cluster at a time:
//!
//! - the default session negotiates the best protocol the server has (v2 streaming on 14
//!   and 15, v4 parallel streaming on 16+), snapshot + stream equal `SELECT *`, and a
//!   restart resumes without loss or duplicates;
//! - large transactions streamed in progress deliver exactly what committed (a
//!   transaction aborted after streaming 100k rows, a rolled-back subtransaction);
//! - two-phase decoding (15+): a prepared transaction is delivered once, at COMMIT
//!   PREPARED, in commit order; ROLLBACK PREPARED delivers nothing; the slot is held at the
//!   PREPARE while it waits, so a crash between PREPARE and COMMIT PREPARED loses and
//!   duplicates nothing.
//!
//! Every built-in type on every version is in `source_all_types.rs`; PostgreSQL 18's
//! generated columns and slot timeout in `source_postgres18.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cdc_core::{EventKind, Lsn, Value};
use cdc_sinks::memory::MemoryHandle;
use cdc_testkit::{Cluster, ClusterBuilder};
use support::*;

const WAIT: Duration = Duration::from_secs(90);

async fn cluster(version: u32, settings: &[(&str, &str)]) -> Cluster {
    let mut builder = ClusterBuilder::new().major(version);
    for (name, value) in settings {
        builder = builder.setting(*name, *value);
    }
    builder.build().await.unwrap()
}

/// The `START_REPLICATION` command our walsender runs (`pg_stat_activity.query`).
async fn start_replication_command(cluster: &Cluster) -> String {
    let client = cluster.connect("postgres").await.unwrap();
    for _ in 0..100 {
        let rows = client
            .query(
                "SELECT query FROM pg_stat_activity \
                 WHERE backend_type = 'walsender' AND query LIKE 'START_REPLICATION%'",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = rows.first() {
            return row.get(0);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no walsender runs START_REPLICATION");
}

fn assert_clean(handle: &MemoryHandle, version: u32) {
    assert!(
        handle.duplicate_positions().is_empty(),
        "PostgreSQL {version}: duplicate positions {:?}",
        handle.duplicate_positions()
    );
    assert!(
        handle.anomalies().is_empty(),
        "PostgreSQL {version}: {:?}",
        handle.anomalies()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_session_negotiates_streaming_and_matches_select_across_a_restart() {
    for version in cdc_testkit::versions_under_test() {
        let cluster = cluster(version, &[]).await;
        cluster
            .execute(
                "CREATE TABLE public.t (id int PRIMARY KEY, v text, n numeric, at timestamptz);
                 INSERT INTO public.t SELECT g, 'row ' || g, g / 7.0, now() FROM generate_series(1, 500) g;
                 CREATE PUBLICATION pub FOR TABLE public.t;",
            )
            .await
            .unwrap();
        let handle = MemoryHandle::default();
        let mut running = spawn(options(&cluster, &["public.t"]), &handle);
        running.wait_snapshot(&handle).await;
        let command = start_replication_command(&cluster).await;
        let (proto, streaming) = if version >= 16 {
            ("'4'", "\"streaming\" 'parallel'")
        } else {
            ("'2'", "\"streaming\" 'on'")
        };
        assert!(
            command.contains(&format!("\"proto_version\" {proto}")) && command.contains(streaming),
            "PostgreSQL {version}: {command}"
        );
        cluster
            .execute(
                "UPDATE public.t SET v = 'changed' WHERE id % 3 = 0;
                 DELETE FROM public.t WHERE id % 5 = 0;
                 INSERT INTO public.t SELECT g, NULL, -g, NULL FROM generate_series(501, 700) g;",
            )
            .await
            .unwrap();
        running
            .wait_for_equal(&cluster, &handle, &["public.t"], WAIT)
            .await;
        running.stop().await;
        // Changes while stopped, then a restart from the sink's token.
        cluster
            .execute(
                "UPDATE public.t SET n = 0 WHERE id < 100; TRUNCATE public.t; \
                 INSERT INTO public.t SELECT g, 'after restart', g, now() FROM generate_series(1, 50) g;",
            )
            .await
            .unwrap();
        let mut running = spawn(options(&cluster, &["public.t"]), &handle);
        running
            .wait_for_equal(&cluster, &handle, &["public.t"], WAIT)
            .await;
        running.stop().await;
        assert_clean(&handle, version);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_transactions_deliver_exactly_what_committed() {
    for version in cdc_testkit::versions_under_test() {
        let cluster = cluster(version, &[("logical_decoding_work_mem", "64kB")]).await;
        cluster
            .execute(
                "CREATE TABLE public.big (id int PRIMARY KEY, v text);
                 CREATE PUBLICATION pub FOR TABLE public.big;",
            )
            .await
            .unwrap();
        let handle = MemoryHandle::default();
        let mut options = options(&cluster, &["public.big"]);
        options.stream_memory_limit = 1 << 20;
        let mut running = spawn(options, &handle);
        running.wait_snapshot(&handle).await;
        // Aborted after streaming 100k rows.
        cluster
            .execute(
                "BEGIN;
                 INSERT INTO public.big SELECT g, repeat('x', 40) FROM generate_series(1, 100000) g;
                 ROLLBACK;",
            )
            .await
            .unwrap();
        // A rolled-back subtransaction inside a large committed one, and a small one.
        cluster
            .execute(
                "BEGIN;
                 INSERT INTO public.big SELECT g, 'kept' FROM generate_series(1, 20000) g;
                 SAVEPOINT s;
                 INSERT INTO public.big SELECT g, 'rolled back' FROM generate_series(20001, 40000) g;
                 UPDATE public.big SET v = 'rolled back too' WHERE id <= 100;
                 ROLLBACK TO SAVEPOINT s;
                 UPDATE public.big SET v = 'updated' WHERE id > 19900;
                 INSERT INTO public.big SELECT g, 'kept' FROM generate_series(40001, 45000) g;
                 COMMIT;
                 INSERT INTO public.big VALUES (0, 'small');",
            )
            .await
            .unwrap();
        running
            .wait_for_equal(&cluster, &handle, &["public.big"], WAIT)
            .await;
        running.stop().await;
        let streamed: i64 = cluster
            .connect("postgres")
            .await
            .unwrap()
            .query_one(
                "SELECT COALESCE(sum(stream_txns), 0)::int8 FROM pg_stat_replication_slots",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            streamed >= 2,
            "PostgreSQL {version}: the server streamed {streamed} transactions; the test means to stream both"
        );
        assert!(
            !handle.changes().iter().any(|e| match &e.kind {
                EventKind::Insert { new, .. } => new
                    .iter()
                    .any(|v| matches!(v, Value::Text(t) if t.starts_with("rolled back"))),
                _ => false,
            }),
            "PostgreSQL {version}: a rolled-back change was delivered"
        );
        assert_clean(&handle, version);
    }
}

/// Versions with two-phase decoding (15+).
fn two_phase_versions() -> Vec<u32> {
    cdc_testkit::versions_under_test()
        .into_iter()
        .filter(|v| *v >= 15)
        .collect()
}

async fn two_phase_cluster(version: u32) -> Cluster {
    let cluster = cluster(version, &[("max_prepared_transactions", "20")]).await;
    cluster
        .execute(
            "CREATE TABLE public.tp (id int PRIMARY KEY, v text);
             CREATE PUBLICATION pub FOR TABLE public.tp;",
        )
        .await
        .unwrap();
    cluster
}

fn two_phase_options(cluster: &Cluster) -> cdc_postgres::source::PgSourceOptions {
    let mut options = options(cluster, &["public.tp"]);
    options.config.two_phase = true;
    options
}

/// The commit LSN of the transaction that inserted row `id` (from the sink's events).
fn commit_lsn_of(handle: &MemoryHandle, id: i32) -> Option<Lsn> {
    handle.changes().iter().find_map(|e| match &e.kind {
        EventKind::Insert { new, .. } if new.first() == Some(&Value::Int4(id)) => {
            Some(e.position.commit_lsn)
        }
        _ => None,
    })
}

async fn current_lsn(cluster: &Cluster) -> Lsn {
    cluster.current_wal_lsn().await.unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_transactions_are_delivered_once_at_commit_prepared_in_commit_order() {
    for version in two_phase_versions() {
        let cluster = two_phase_cluster(version).await;
        let handle = MemoryHandle::default();
        let mut running = spawn(two_phase_options(&cluster), &handle);
        running.wait_snapshot(&handle).await;
        let slot_two_phase: bool = cluster
            .connect("postgres")
            .await
            .unwrap()
            .query_one("SELECT bool_and(two_phase) FROM pg_replication_slots", &[])
            .await
            .unwrap()
            .get(0);
        assert!(
            slot_two_phase,
            "PostgreSQL {version}: slot without two_phase"
        );
        assert!(
            start_replication_command(&cluster)
                .await
                .contains("\"two_phase\" 'true'")
        );

        // Prepared, then later transactions, then committed: the slot stays at the PREPARE
        // meanwhile, the rows arrive at COMMIT PREPARED.
        let before_prepare = current_lsn(&cluster).await;
        cluster
            .execute(
                "BEGIN; INSERT INTO public.tp SELECT g, 'prepared a' FROM generate_series(1, 100) g;
                 PREPARE TRANSACTION 'a';",
            )
            .await
            .unwrap();
        let after_prepare = current_lsn(&cluster).await;
        cluster
            .execute("INSERT INTO public.tp VALUES (1000, 'after a')")
            .await
            .unwrap();
        assert!(
            handle
                .wait_until(WAIT, |h| h.durable_token().is_some_and(|t| t
                    .position
                    .is_some_and(|p| p.commit_lsn > after_prepare)))
                .await,
            "PostgreSQL {version}: the transaction after the PREPARE never became durable"
        );
        assert!(commit_lsn_of(&handle, 1).is_none(), "delivered at PREPARE");
        // The slot reaches the transaction before the PREPARE, then has time to (wrongly)
        // move past it.
        let slot = running_slot(&cluster).await;
        let deadline = std::time::Instant::now() + WAIT;
        while confirmed_flush(&cluster, &slot).await.unwrap() < before_prepare
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let confirmed = confirmed_flush(&cluster, &slot).await.unwrap();
        assert!(
            confirmed >= before_prepare && confirmed < after_prepare,
            "PostgreSQL {version}: slot confirmed at {confirmed}, outside the PREPARE ({before_prepare}..{after_prepare})"
        );
        cluster.execute("COMMIT PREPARED 'a'").await.unwrap();
        running
            .wait_for_equal(&cluster, &handle, &["public.tp"], WAIT)
            .await;
        assert!(commit_lsn_of(&handle, 1) > commit_lsn_of(&handle, 1000));

        // Rolled back: nothing.
        cluster
            .execute(
                "BEGIN; INSERT INTO public.tp VALUES (2000, 'rolled back'); PREPARE TRANSACTION 'b';",
            )
            .await
            .unwrap();
        cluster.execute("ROLLBACK PREPARED 'b'").await.unwrap();
        cluster
            .execute("INSERT INTO public.tp VALUES (2001, 'marker')")
            .await
            .unwrap();
        running
            .wait_for_equal(&cluster, &handle, &["public.tp"], WAIT)
            .await;
        assert!(commit_lsn_of(&handle, 2000).is_none());

        // Many prepared at once, committed (or rolled back) out of order.
        let mut prepare = String::new();
        for i in 0..8 {
            prepare.push_str(&format!(
                "BEGIN; INSERT INTO public.tp SELECT g, 'c{i}' FROM generate_series({0}, {0} + 49) g; \
                 PREPARE TRANSACTION 'c{i}';",
                10_000 + i * 100
            ));
        }
        cluster.execute(&prepare).await.unwrap();
        let order = [5, 2, 7, 0, 3, 6, 1, 4];
        for (n, i) in order.iter().enumerate() {
            let verb = if n % 4 == 3 { "ROLLBACK" } else { "COMMIT" };
            cluster
                .execute(&format!("{verb} PREPARED 'c{i}'"))
                .await
                .unwrap();
            cluster
                .execute(&format!(
                    "INSERT INTO public.tp VALUES ({}, 'between')",
                    3000 + n
                ))
                .await
                .unwrap();
        }
        running
            .wait_for_equal(&cluster, &handle, &["public.tp"], WAIT)
            .await;
        let committed: Vec<Lsn> = order
            .iter()
            .enumerate()
            .filter(|(n, _)| n % 4 != 3)
            .map(|(_, i)| commit_lsn_of(&handle, 10_000 + *i * 100).unwrap())
            .collect();
        assert!(
            committed.windows(2).all(|w| w[0] < w[1]),
            "PostgreSQL {version}: not in COMMIT PREPARED order: {committed:?}"
        );
        running.stop().await;
        assert_clean(&handle, version);
    }
}

/// The slot of the (single) stream on `cluster`.
async fn running_slot(cluster: &Cluster) -> String {
    cluster
        .connect("postgres")
        .await
        .unwrap()
        .query_one(
            "SELECT slot_name::text FROM pg_replication_slots WHERE slot_type = 'logical'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Aborts the pipeline and drops what the sink had not made durable.
async fn crash(running: Running, handle: &MemoryHandle) {
    running.task.abort();
    let _ = running.task.await;
    handle.simulate_crash();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_prepare_and_commit_prepared_loses_and_duplicates_nothing() {
    for version in two_phase_versions() {
        let cluster = two_phase_cluster(version).await;
        let handle = MemoryHandle::default();
        let mut running = spawn(two_phase_options(&cluster), &handle);
        running.wait_snapshot(&handle).await;

        // 1. Prepared; later transactions durable in the sink; crash; COMMIT PREPARED
        //    after the restart.
        cluster
            .execute(
                "BEGIN; INSERT INTO public.tp SELECT g, 'x' FROM generate_series(1, 100) g;
                 PREPARE TRANSACTION 'x';
                 INSERT INTO public.tp VALUES (500, 'after x');",
            )
            .await
            .unwrap();
        let after = current_lsn(&cluster).await;
        assert!(
            handle
                .wait_until(WAIT, |h| h
                    .durable_token()
                    .is_some_and(|t| t.position.is_some_and(|p| p.commit_lsn < after)
                        && h.row_count(&cdc_core::TableName::new("public", "tp")) == 1))
                .await
        );
        crash(running, &handle).await;
        let mut running = spawn(two_phase_options(&cluster), &handle);
        // The restarted session has received the prepared transaction again.
        tokio::time::sleep(Duration::from_millis(500)).await;
        cluster.execute("COMMIT PREPARED 'x'").await.unwrap();
        running
            .wait_for_equal(&cluster, &handle, &["public.tp"], WAIT)
            .await;

        // 2. Prepared; crash; COMMIT PREPARED while stopped; restart.
        cluster
            .execute(
                "BEGIN; INSERT INTO public.tp SELECT g, 'y' FROM generate_series(1001, 1100) g;
                 PREPARE TRANSACTION 'y';
                 INSERT INTO public.tp VALUES (1500, 'after y');",
            )
            .await
            .unwrap();
        assert!(
            handle
                .wait_until(WAIT, |h| h
                    .durable_token()
                    .is_some_and(|_| commit_lsn_of(h, 1500).is_some()))
                .await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        crash(running, &handle).await;
        cluster.execute("COMMIT PREPARED 'y'").await.unwrap();
        cluster
            .execute("INSERT INTO public.tp VALUES (1600, 'while down')")
            .await
            .unwrap();
        let mut running = spawn(two_phase_options(&cluster), &handle);
        running
            .wait_for_equal(&cluster, &handle, &["public.tp"], WAIT)
            .await;

        // 3. Two prepared; the first committed and durable; the slot held at the
        //    second's PREPARE, past the first's; crash. The restarted session receives
        //    the first's COMMIT PREPARED alone (its PREPARE lies before the start), and
        //    the sink has it already.
        cluster
            .execute(
                "BEGIN; INSERT INTO public.tp SELECT g, 'v' FROM generate_series(2001, 2050) g;
                 PREPARE TRANSACTION 'v';",
            )
            .await
            .unwrap();
        let after_v = current_lsn(&cluster).await;
        cluster
            .execute(
                "BEGIN; INSERT INTO public.tp SELECT g, 'w' FROM generate_series(2101, 2150) g;
                 PREPARE TRANSACTION 'w';",
            )
            .await
            .unwrap();
        cluster.execute("COMMIT PREPARED 'v'").await.unwrap();
        cluster
            .execute("INSERT INTO public.tp VALUES (2500, 'after v')")
            .await
            .unwrap();
        let slot = running_slot(&cluster).await;
        let deadline = std::time::Instant::now() + WAIT;
        while !(commit_lsn_of(&handle, 2500).is_some()
            && handle.durable_token().is_some_and(|t| {
                t.position
                    .is_some_and(|p| Some(p.commit_lsn) >= commit_lsn_of(&handle, 2500))
            })
            && confirmed_flush(&cluster, &slot)
                .await
                .is_some_and(|c| c > after_v))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "PostgreSQL {version}: the slot never moved past the first PREPARE"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        crash(running, &handle).await;
        let mut running = spawn(two_phase_options(&cluster), &handle);
        cluster.execute("COMMIT PREPARED 'w'").await.unwrap();
        running
            .wait_for_equal(&cluster, &handle, &["public.tp"], WAIT)
            .await;
        running.stop().await;
        assert_clean(&handle, version);
    }
}
