//! Preflight (what `pgcdc check` reports) against a real cluster: tables named with or
//! without their schema, publications and tables that are missing or empty, replica
//! identity without a key, and missing privileges.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::sync::Arc;

use cdc_core::{ErrorKind, TableName};
use cdc_postgres::conn::{
    PreflightOptions, ProblemKind, ReplicationConnection, Severity, SourceConfig,
};
use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder};
use conn_support::{SharedCluster, check, kinds, source, uri};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    static CLUSTER: SharedCluster = SharedCluster::new();

    const SETUP: &str = "
    CREATE SCHEMA audit;
    CREATE TABLE public.orders (id int PRIMARY KEY, note text);
    CREATE TABLE audit.orders (id int PRIMARY KEY, note text);
    CREATE TABLE public.no_key (v int);
    CREATE TABLE public.nothing (id int PRIMARY KEY);
    ALTER TABLE public.nothing REPLICA IDENTITY NOTHING;
    CREATE TABLE public.unpublished (id int PRIMARY KEY);
    CREATE TABLE public.secret (id int PRIMARY KEY);
    CREATE PUBLICATION both_orders FOR TABLE public.orders, audit.orders;
    CREATE PUBLICATION identity_pub FOR TABLE public.no_key, public.nothing;
    CREATE PUBLICATION secret_pub FOR TABLE public.secret;
    CREATE PUBLICATION empty_pub;
    GRANT USAGE ON SCHEMA audit TO cdc;
    GRANT SELECT ON public.orders, audit.orders, public.no_key, public.nothing, public.unpublished TO cdc;
    CREATE ROLE plain LOGIN PASSWORD 'plain-secret';
    ";

    async fn cluster() -> Arc<Cluster> {
        CLUSTER
            .get(
                || {
                    ClusterBuilder::new()
                        .auth(AuthMethod::ScramSha256)
                        .user("cdc", "cdc-secret")
                },
                SETUP,
            )
            .await
    }

    #[tokio::test]
    async fn an_unqualified_table_is_rejected_with_the_candidates_from_the_publication() {
        let cluster = cluster().await;
        let report = check(
            &source(&cluster, "both_orders", &["orders"]),
            PreflightOptions::default(),
        )
        .await;
        assert_eq!(
            kinds(&report),
            vec![ProblemKind::UnqualifiedTable {
                name: "orders".into(),
                candidates: vec![
                    TableName::new("audit", "orders"),
                    TableName::new("public", "orders")
                ],
            }]
        );
        let err = report.into_result().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message().contains("audit.orders, public.orders"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_qualified_table_selects_only_that_table() {
        let cluster = cluster().await;
        let report = check(
            &source(&cluster, "both_orders", &["public.orders"]),
            PreflightOptions::default(),
        )
        .await;
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!(
            report.table_names(),
            vec![TableName::new("public", "orders")]
        );
        assert_eq!(report.wal_level, "logical");
        assert!(report.tables[0].has_primary_key && report.tables[0].can_select);
        let report = check(
            &source(&cluster, "both_orders", &["audit.orders"]),
            PreflightOptions::default(),
        )
        .await;
        assert_eq!(
            report.table_names(),
            vec![TableName::new("audit", "orders")]
        );
        // No table list: every table of the publication.
        let report = check(
            &source(&cluster, "both_orders", &[]),
            PreflightOptions::default(),
        )
        .await;
        assert_eq!(report.table_names().len(), 2);
        assert!(report.into_result().is_ok());
    }

    #[tokio::test]
    async fn publication_and_table_problems_are_reported_with_fixes() {
        let cluster = cluster().await;
        let report = check(
            &source(&cluster, "no_such_pub", &["public.orders"]),
            PreflightOptions::default(),
        )
        .await;
        assert!(kinds(&report).contains(&ProblemKind::PublicationMissing {
            publication: "no_such_pub".into()
        }));
        let report = check(
            &source(
                &cluster,
                "both_orders",
                &["public.unpublished", "public.missing"],
            ),
            PreflightOptions::default(),
        )
        .await;
        let found = kinds(&report);
        assert!(found.contains(&ProblemKind::TableNotInPublication {
            table: TableName::new("public", "unpublished"),
            publication: "both_orders".into()
        }));
        assert!(found.contains(&ProblemKind::TableMissing {
            table: TableName::new("public", "missing")
        }));
        let text = report
            .problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains("ALTER PUBLICATION both_orders ADD TABLE public.unpublished;"),
            "{text}"
        );

        let report = check(
            &source(&cluster, "empty_pub", &[]),
            PreflightOptions::default(),
        )
        .await;
        assert_eq!(
            kinds(&report),
            vec![ProblemKind::EmptyPublication {
                publication: "empty_pub".into()
            }]
        );

        let report = check(
            &source(&cluster, "secret_pub", &[]),
            PreflightOptions::default(),
        )
        .await;
        assert!(kinds(&report).contains(&ProblemKind::NoSelectPrivilege {
            table: TableName::new("public", "secret"),
            role: "cdc".into()
        }));
    }

    #[tokio::test]
    async fn replica_identity_without_a_key_is_a_warning() {
        let cluster = cluster().await;
        let report = check(
            &source(&cluster, "identity_pub", &[]),
            PreflightOptions::default(),
        )
        .await;
        assert!(report.is_ok(), "{:?}", report.problems);
        let warnings: Vec<_> = report
            .problems_of(Severity::Warning)
            .map(|p| p.kind.clone())
            .collect();
        assert!(warnings.contains(&ProblemKind::NoReplicaIdentityKey {
            table: TableName::new("public", "no_key")
        }));
        assert!(warnings.contains(&ProblemKind::ReplicaIdentityNothing {
            table: TableName::new("public", "nothing")
        }));
        // The online snapshot (the default) copies a table without a key whole: said.
        assert!(warnings.contains(&ProblemKind::ReadWholeOnline {
            table: TableName::new("public", "no_key")
        }));
        assert!(!warnings.contains(&ProblemKind::ReadWholeOnline {
            table: TableName::new("public", "nothing")
        }));
    }

    #[tokio::test]
    async fn a_role_without_replication_is_reported() {
        let cluster = cluster().await;
        let config = SourceConfig::new(
            &uri(&cluster, "plain", Some("plain-secret"), "postgres", ""),
            "both_orders",
        )
        .unwrap();
        let report = check(&config, PreflightOptions::default()).await;
        assert!(
            kinds(&report).contains(&ProblemKind::NoReplicationPrivilege {
                role: "plain".into()
            })
        );
        // And the replication connection itself is refused as a configuration problem.
        let err = ReplicationConnection::connect(&config.connection)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert_eq!(
            err.server_error().map(|s| s.code.as_str()),
            Some("42501"),
            "{err}"
        );
    }
}
