//! Replication commands, streaming and slot health against a real cluster (preflight's
//! checks of publications, tables and privileges: `conn_preflight`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::sync::Arc;
use std::time::Duration;

use cdc_core::{ErrorKind, Lsn, ResumeToken};
use cdc_postgres::conn::{
    CreateSlotOptions, PgOutputOptions, PreflightOptions, ProblemKind, ReplicationConnection,
    SlotProblem, SnapshotAction, SourceConfig, StreamOptions, check_resume,
};
use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder};
use conn_support::{
    SharedCluster, check, confirmed_flush, kinds, read_commits, source, uri, wait_for,
};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    static CLUSTER: SharedCluster = SharedCluster::new();

    const SETUP: &str = "
    CREATE SCHEMA audit;
    CREATE TABLE public.orders (id int PRIMARY KEY, note text);
    CREATE TABLE audit.orders (id int PRIMARY KEY, note text);
    CREATE PUBLICATION both_orders FOR TABLE public.orders, audit.orders;
    GRANT USAGE ON SCHEMA audit TO cdc;
    GRANT SELECT ON public.orders, audit.orders TO cdc;
    CREATE TABLE public.stream_t (id int PRIMARY KEY);
    CREATE PUBLICATION stream_pub FOR TABLE public.stream_t;
    GRANT SELECT ON public.stream_t TO cdc;
    CREATE TABLE public.rotate_t (id int PRIMARY KEY);
    CREATE PUBLICATION rotate_pub FOR TABLE public.rotate_t;
    GRANT SELECT ON public.rotate_t TO cdc;
    ";

    async fn cluster() -> Arc<Cluster> {
        CLUSTER
            .get(
                || {
                    ClusterBuilder::new()
                        .auth(AuthMethod::ScramSha256)
                        .user("cdc", "cdc-secret")
                        .user("rotating", "old-secret")
                },
                SETUP,
            )
            .await
    }

    #[tokio::test]
    async fn slot_commands_work_on_a_real_server() {
        let cluster = cluster().await;
        let config = source(&cluster, "both_orders", &["public.orders"])
            .with_slot("cmd_slot")
            .unwrap();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        assert!(repl.server_version_num() >= 100000);
        let system = repl.identify_system().await.unwrap();
        assert_eq!(
            system.system_identifier,
            cluster.system_identifier().await.unwrap().to_string()
        );
        assert_eq!(system.timeline, 1);
        assert_eq!(system.dbname.as_deref(), Some("postgres"));

        let first = repl
            .create_slot("cmd_slot", CreateSlotOptions::default())
            .await
            .unwrap();
        assert_eq!(first.slot_name, "cmd_slot");
        assert!(first.snapshot_name.is_some());
        assert!(first.consistent_point > Lsn(0));
        assert_eq!(first.output_plugin.as_deref(), Some("pgoutput"));

        if repl.server_version_num() >= 150000 {
            let read = repl.read_slot("cmd_slot").await.unwrap().unwrap();
            assert_eq!(read.slot_type, "logical");
            assert_eq!(repl.read_slot("no_such_slot").await.unwrap(), None);
        }
        let err = repl
            .create_slot("cmd_slot", CreateSlotOptions::default())
            .await
            .unwrap_err();
        assert_eq!(
            err.server_error().map(|s| s.code.as_str()),
            Some("42710"),
            "{err}"
        );

        let temporary = CreateSlotOptions {
            temporary: true,
            snapshot: SnapshotAction::NoExport,
            two_phase: false,
            failover: false,
        };
        let created = repl.create_slot("cmd_temp", temporary).await.unwrap();
        assert_eq!(created.snapshot_name, None);

        let report = check(
            &config,
            PreflightOptions {
                slot_must_exist: true,
                own_pid: None,
            },
        )
        .await;
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let slot = report.slot.unwrap();
        assert_eq!(slot.plugin.as_deref(), Some("pgoutput"));
        assert_eq!(slot.confirmed_flush_lsn, Some(first.consistent_point));

        repl.drop_slot("cmd_slot", true).await.unwrap();
        let err = repl.drop_slot("cmd_slot", false).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("42704"));
        // The session stays usable after an error; the temporary slot goes with it.
        repl.identify_system().await.unwrap();
        repl.close().await;
        assert_eq!(
            confirmed_flush(&cluster, "cmd_temp").await,
            None,
            "closed: the temporary slot is gone"
        );
    }

    #[tokio::test]
    async fn flush_position_is_only_what_the_owner_set() {
        let cluster = cluster().await;
        let config = source(&cluster, "stream_pub", &["public.stream_t"])
            .with_slot("flush_slot")
            .unwrap();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = repl
            .create_slot(
                "flush_slot",
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let options = {
            let mut options = StreamOptions::default();
            options.status_interval = Duration::from_millis(100);
            options
        };
        let mut stream = repl
            .start_replication(
                "flush_slot",
                created.consistent_point,
                &PgOutputOptions::new(["stream_pub"]),
                options,
            )
            .await
            .unwrap();
        // Two transactions (statements of one simple query share a transaction).
        cluster
            .execute("INSERT INTO public.stream_t VALUES (1)")
            .await
            .unwrap();
        cluster
            .execute("INSERT INTO public.stream_t VALUES (2)")
            .await
            .unwrap();
        let (commits, tags) = read_commits(&mut stream, 2, Duration::from_secs(30)).await;
        assert!(tags.starts_with(b"BRIC"), "{tags:?}");
        assert!(stream.received() > Lsn(0));

        // Received, but not acknowledged: status updates go out, the slot stays put.
        let sent = stream.status_updates_sent();
        wait_for("more status updates", Duration::from_secs(10), || async {
            (stream.status_updates_sent() >= sent + 3).then_some(())
        })
        .await;
        assert_eq!(
            confirmed_flush(&cluster, "flush_slot").await,
            Some(created.consistent_point)
        );

        // Acknowledge the first transaction only.
        stream.set_flushed(commits[0]);
        stream.send_status_now();
        wait_for(
            "the slot to follow set_flushed",
            Duration::from_secs(10),
            || async {
                (confirmed_flush(&cluster, "flush_slot").await == Some(commits[0])).then_some(())
            },
        )
        .await;
        // Never backwards.
        stream.set_flushed(Lsn(1));
        assert_eq!(stream.flushed(), commits[0]);
        stream.flush_handle().set_flushed(commits[1]);
        stream.close().await.unwrap();
        assert_eq!(
            confirmed_flush(&cluster, "flush_slot").await,
            Some(commits[1])
        );
        cluster
            .execute("SELECT pg_drop_replication_slot('flush_slot')")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_stream_resumes_on_the_same_slot_after_the_password_is_rotated() {
        let cluster = cluster().await;
        cluster
            .execute("GRANT SELECT ON public.rotate_t TO rotating; ALTER ROLE rotating REPLICATION")
            .await
            .unwrap();
        let before = source_as(&cluster, "rotating", "old-secret");
        let slot = before.slot_name();
        assert!(slot.starts_with("pgcdc_"));

        let mut repl = ReplicationConnection::connect(&before.connection)
            .await
            .unwrap();
        let system = repl.identify_system().await.unwrap();
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
        let mut stream = repl
            .start_replication(
                &slot,
                created.consistent_point,
                &PgOutputOptions::new(["rotate_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap();
        cluster
            .execute("INSERT INTO public.rotate_t VALUES (1)")
            .await
            .unwrap();
        let (commits, _) = read_commits(&mut stream, 1, Duration::from_secs(30)).await;
        stream.set_flushed(commits[0]);
        stream.close().await.unwrap();
        let token = ResumeToken::new(system.identity(&before.connection.dbname, &slot), None);

        cluster
            .execute("ALTER ROLE rotating PASSWORD 'new-secret'")
            .await
            .unwrap();
        let stale = ReplicationConnection::connect(&before.connection)
            .await
            .unwrap_err();
        assert_eq!(stale.kind(), ErrorKind::Config);

        let after = source_as(&cluster, "rotating", "new-secret");
        assert_eq!(after.slot_name(), slot);
        assert_eq!(after.source_id(), before.source_id());
        let report = check(
            &after,
            PreflightOptions {
                slot_must_exist: true,
                own_pid: None,
            },
        )
        .await;
        assert!(report.is_ok(), "{:?}", report.problems);
        let mut repl = ReplicationConnection::connect(&after.connection)
            .await
            .unwrap();
        let current = repl
            .identify_system()
            .await
            .unwrap()
            .identity(&after.connection.dbname, &after.slot_name());
        check_resume(&token.source, &current).unwrap();

        cluster
            .execute("INSERT INTO public.rotate_t VALUES (2)")
            .await
            .unwrap();
        let mut stream = repl
            .start_replication(
                &slot,
                commits[0],
                &PgOutputOptions::new(["rotate_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap();
        let (resumed, _) = read_commits(&mut stream, 1, Duration::from_secs(30)).await;
        assert!(
            resumed[0] > commits[0],
            "the acknowledged transaction is not sent again"
        );
        stream.close().await.unwrap();
    }

    fn source_as(cluster: &Cluster, user: &str, password: &str) -> SourceConfig {
        SourceConfig::new(
            &uri(
                cluster,
                user,
                Some(password),
                "postgres",
                "application_name=rotation",
            ),
            "rotate_pub",
        )
        .unwrap()
        .with_tables(["public.rotate_t"])
        .unwrap()
    }

    #[tokio::test]
    async fn a_dropped_slot_is_a_resync() {
        let cluster = cluster().await;
        let config = source(&cluster, "stream_pub", &["public.stream_t"])
            .with_slot("dropped_slot")
            .unwrap();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = repl
            .create_slot(
                "dropped_slot",
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        cluster
            .execute("SELECT pg_drop_replication_slot('dropped_slot')")
            .await
            .unwrap();

        let report = check(
            &config,
            PreflightOptions {
                slot_must_exist: true,
                own_pid: None,
            },
        )
        .await;
        assert_eq!(
            kinds(&report),
            vec![ProblemKind::Slot(SlotProblem::Missing {
                slot: "dropped_slot".into()
            })]
        );
        assert_eq!(
            report.into_result().unwrap_err().kind(),
            ErrorKind::ResyncRequired
        );
        // Without a token expecting it, a missing slot is fine (it will be created).
        assert!(check(&config, PreflightOptions::default()).await.is_ok());

        let err = repl
            .start_replication(
                "dropped_slot",
                created.consistent_point,
                &PgOutputOptions::new(["stream_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ResyncRequired, "{err}");
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("42704"));
        assert!(err.message().contains("does not exist"), "{err}");
    }

    #[tokio::test]
    async fn a_slot_held_by_another_connection_is_reported() {
        let cluster = cluster().await;
        let config = source(&cluster, "stream_pub", &["public.stream_t"])
            .with_slot("held_slot")
            .unwrap();
        let mut first = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = first
            .create_slot(
                "held_slot",
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let holder_pid = first.backend_pid();
        let stream = first
            .start_replication(
                "held_slot",
                created.consistent_point,
                &PgOutputOptions::new(["stream_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap();

        let report = check(
            &config,
            PreflightOptions {
                slot_must_exist: true,
                own_pid: None,
            },
        )
        .await;
        assert_eq!(
            kinds(&report),
            vec![ProblemKind::Slot(SlotProblem::Active {
                slot: "held_slot".into(),
                pid: holder_pid
            })]
        );
        assert_eq!(
            report.into_result().unwrap_err().kind(),
            ErrorKind::Transient
        );
        // The holder checking the slot again after START_REPLICATION sees no problem.
        let own = check(
            &config,
            PreflightOptions {
                slot_must_exist: true,
                own_pid: Some(holder_pid),
            },
        )
        .await;
        assert!(own.problems.is_empty(), "{:?}", own.problems);

        let second = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let err = second
            .start_replication(
                "held_slot",
                created.consistent_point,
                &PgOutputOptions::new(["stream_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("55006"));
        assert!(err.message().contains("another connection"), "{err}");
        stream.close().await.unwrap();
        cluster
            .execute("SELECT pg_drop_replication_slot('held_slot')")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_dropped_publication_fails_the_stream_as_a_config_error() {
        let cluster = cluster().await;
        cluster
            .execute("CREATE TABLE public.gone_t (id int PRIMARY KEY); CREATE PUBLICATION gone_pub FOR TABLE public.gone_t;")
            .await
            .unwrap();
        let config = source(&cluster, "gone_pub", &["public.gone_t"])
            .with_slot("gone_slot")
            .unwrap();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = repl
            .create_slot(
                "gone_slot",
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        cluster
            .execute("DROP PUBLICATION gone_pub; INSERT INTO public.gone_t VALUES (1);")
            .await
            .unwrap();
        let mut stream = repl
            .start_replication(
                "gone_slot",
                created.consistent_point,
                &PgOutputOptions::new(["gone_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap();
        let err = loop {
            match tokio::time::timeout(Duration::from_secs(30), stream.next_message())
                .await
                .unwrap()
            {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("stream ended without an error"),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("42704"));
        assert!(
            err.message().contains("publication does not exist"),
            "{err}"
        );
        drop(stream);
        wait_for(
            "the slot to be released",
            Duration::from_secs(10),
            || async {
                let admin = cluster.connect("postgres").await.unwrap();
                let row = admin
                    .query_one(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = 'gone_slot'",
                        &[],
                    )
                    .await
                    .unwrap();
                (!row.get::<_, bool>(0)).then_some(())
            },
        )
        .await;
        cluster
            .execute("SELECT pg_drop_replication_slot('gone_slot')")
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_terminated_walsender_is_a_transient_error() {
        let cluster = cluster().await;
        let config = source(&cluster, "stream_pub", &["public.stream_t"])
            .with_slot("terminated_slot")
            .unwrap();
        let mut repl = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap();
        let created = repl
            .create_slot(
                "terminated_slot",
                CreateSlotOptions {
                    snapshot: SnapshotAction::NoExport,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let pid = repl.backend_pid();
        let mut stream = repl
            .start_replication(
                "terminated_slot",
                created.consistent_point,
                &PgOutputOptions::new(["stream_pub"]),
                StreamOptions::default(),
            )
            .await
            .unwrap();
        let admin = cluster.connect("postgres").await.unwrap();
        admin
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        let err = loop {
            match tokio::time::timeout(Duration::from_secs(30), stream.next_message())
                .await
                .unwrap()
            {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("stream ended without an error"),
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
        // The FATAL ErrorResponse (57P01) usually arrives; when the server's reset overtakes it,
        // the connection error is just as transient.
        let code = err.server_error().map(|s| s.code.clone());
        assert!(matches!(code.as_deref(), None | Some("57P01")), "{err}");
        drop(stream);
        wait_for(
            "the slot to be released",
            Duration::from_secs(10),
            || async {
                let row = admin
                    .query_one(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = 'terminated_slot'",
                        &[],
                    )
                    .await
                    .unwrap();
                (!row.get::<_, bool>(0)).then_some(())
            },
        )
        .await;
        admin
            .execute("SELECT pg_drop_replication_slot('terminated_slot')", &[])
            .await
            .unwrap();
    }
}
