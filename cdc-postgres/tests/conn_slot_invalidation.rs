//! A slot invalidated because it fell behind `max_slot_wal_keep_size` is its own,
//! resync-required error, both in preflight and at `START_REPLICATION`. Own cluster: the
//! tiny WAL allowance would invalidate other tests' slots too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::time::Duration;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{
    CreateSlotOptions, PgOutputOptions, PreflightOptions, ProblemKind, ReplicationConnection,
    SlotProblem, SnapshotAction, SourceConfig, StreamOptions, connect_sql, preflight,
};
use cdc_testkit::ClusterBuilder;
use conn_support::{uri, wait_for};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    #[tokio::test]
    async fn an_invalidated_slot_is_a_distinct_resync_error() {
        let cluster = ClusterBuilder::new()
            .setting("max_slot_wal_keep_size", "1MB")
            .setting("wal_keep_size", "0")
            .user("cdc", "unused")
            .build()
            .await
            .unwrap();
        cluster
            .execute(
                "CREATE TABLE public.t (id serial PRIMARY KEY, pad text);
                 CREATE PUBLICATION p FOR TABLE public.t;
                 GRANT SELECT ON public.t TO cdc;",
            )
            .await
            .unwrap();
        let config = SourceConfig::new(&uri(&cluster, "cdc", None, "postgres", ""), "p")
            .unwrap()
            .with_tables(["public.t"])
            .unwrap();
        let slot = config.slot_name();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = repl
            .create_slot(
                &slot,
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();

        // Write WAL past the allowance and let checkpoints remove it.
        let admin = cluster.connect("postgres").await.unwrap();
        wait_for("the slot to be invalidated", Duration::from_secs(120), || async {
            admin
                .batch_execute("INSERT INTO public.t (pad) SELECT repeat('x', 1000) FROM generate_series(1, 2000)")
                .await
                .unwrap();
            admin.batch_execute("SELECT pg_switch_wal()").await.unwrap();
            admin.batch_execute("CHECKPOINT").await.unwrap();
            let status: Option<String> = admin
                .query_one("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", &[&slot])
                .await
                .unwrap()
                .get(0);
            (status.as_deref() == Some("lost")).then_some(())
        })
        .await;

        let client = connect_sql(&config.connection).await.unwrap();
        let options = PreflightOptions {
            slot_must_exist: true,
            own_pid: None,
        };
        let report = preflight(&client, &config, &options).await.unwrap();
        let slot_problems: Vec<_> = report
            .problems
            .iter()
            .filter_map(|p| match &p.kind {
                ProblemKind::Slot(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        assert!(
            matches!(&slot_problems[..], [SlotProblem::Invalidated { reason, .. }] if reason.contains("lost")),
            "{slot_problems:?}"
        );
        let err = report.into_result().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
        assert!(err.message().contains("invalidated"), "{err}");

        let err = repl
            .start_replication(
                &slot,
                created.consistent_point,
                &PgOutputOptions::new(["p"]),
                StreamOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
        assert_eq!(
            err.server_error().map(|s| s.code.as_str()),
            Some("55000"),
            "{err}"
        );
        assert!(err.message().contains("invalidated"), "{err}");
    }
}
