//! A server certificate issued by the right CA for the wrong name: `verify-full` must
//! refuse it, `verify-ca` and `require` accept it. One issued by another CA: `verify-ca`
//! and `verify-full` refuse it, whatever its name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{
    ConnectionConfig, ReplicationConnection, SourceConfig, SslMode, connect_sql,
};
use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder};
use conn_support::{backend_uses_tls, enc, sql_uses_tls};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    #[tokio::test]
    async fn only_verify_full_checks_the_host_name() {
        let cluster = ClusterBuilder::new()
            .auth(AuthMethod::ScramSha256)
            .tls_server_names(["wrong.example"])
            .user("tls_user", "tls-secret")
            .build()
            .await
            .unwrap();
        let ca = cluster
            .tls()
            .unwrap()
            .ca_cert_path()
            .to_string_lossy()
            .into_owned();
        let config = |mode: &str| {
            ConnectionConfig::parse(&format!(
                "postgres://tls_user:tls-secret@localhost:{}/postgres?sslmode={mode}&sslrootcert={}",
                cluster.port(),
                enc(&ca)
            ))
            .unwrap()
        };

        let full = config("verify-full");
        let err = ReplicationConnection::connect(&full).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("verify-full") && text.contains("not valid for name \"localhost\""),
            "{text}"
        );
        let err = connect_sql(&full).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");

        for mode in ["verify-ca", "require"] {
            let config = config(mode);
            let repl = ReplicationConnection::connect(&config)
                .await
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(
                backend_uses_tls(&cluster, repl.backend_pid()).await,
                "{mode}"
            );
            repl.close().await;
            let sql = connect_sql(&config)
                .await
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(sql_uses_tls(&sql).await, "{mode}");
        }

        // Feldera's verify_hostname = false means verify-ca.
        let json = serde_json::json!({
            "uri": format!("postgres://tls_user:tls-secret@localhost:{}/postgres", cluster.port()),
            "publication": "unused_pub",
            "source_table": "public.t",
            "ssl_ca_pem": cluster.tls().unwrap().ca_cert_pem(),
            "verify_hostname": false,
        });
        let source = SourceConfig::from_json(&json.to_string()).unwrap();
        assert_eq!(source.connection.tls.mode, SslMode::VerifyCa);
        let repl = ReplicationConnection::connect(&source.connection)
            .await
            .unwrap();
        assert!(repl.is_tls());
        repl.close().await;
        let mut hostname_checked = source.clone();
        hostname_checked.connection.tls.mode = SslMode::VerifyFull;
        assert!(
            ReplicationConnection::connect(&hostname_checked.connection)
                .await
                .is_err()
        );
    }

    /// Every connection with `mode` to the cluster (as `localhost`) fails with a Config
    /// error naming the TLS failure `reason`.
    async fn refused(cluster: &Cluster, ca: &str, mode: &str, reason: &str) {
        let config = ConnectionConfig::parse(&format!(
            "postgres://tls_user:tls-secret@localhost:{}/postgres?sslmode={mode}&sslrootcert={}",
            cluster.port(),
            enc(ca)
        ))
        .unwrap();
        let err = ReplicationConnection::connect(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
        assert!(err.to_string().contains(reason), "{mode}: {err}");
        let err = connect_sql(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
        assert!(err.to_string().contains(reason), "{mode}: {err}");
    }

    #[tokio::test]
    async fn chain_verification_refuses_another_ca_whatever_the_name() {
        let cluster = ClusterBuilder::new()
            .auth(AuthMethod::ScramSha256)
            .tls()
            .user("tls_user", "tls-secret")
            .build()
            .await
            .unwrap();
        let tls = cluster.tls().unwrap();
        let ca = tls.ca_cert_path().to_string_lossy().into_owned();
        let connects = |mode: &str| {
            let config = ConnectionConfig::parse(&format!(
                "postgres://tls_user:tls-secret@localhost:{}/postgres?sslmode={mode}&sslrootcert={}",
                cluster.port(),
                enc(&ca)
            ))
            .unwrap();
            async move {
                let repl = ReplicationConnection::connect(&config)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", config.tls.mode));
                assert!(repl.is_tls());
                repl.close().await;
                let sql = connect_sql(&config)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", config.tls.mode));
                assert!(sql_uses_tls(&sql).await);
            }
        };

        // Another CA and the wrong name: a chain-only check must not be satisfied by
        // looking past the name.
        let foreign = tls
            .issue_server_cert_from_unknown_ca(&["wrong.example"])
            .unwrap();
        cluster.replace_server_cert(&foreign).await.unwrap();
        for mode in ["verify-ca", "verify-full"] {
            refused(&cluster, &ca, mode, "not signed by a CA in sslrootcert").await;
        }

        // Another CA with the right name: refused by both as well.
        let foreign = tls
            .issue_server_cert_from_unknown_ca(&["localhost", "127.0.0.1"])
            .unwrap();
        cluster.replace_server_cert(&foreign).await.unwrap();
        for mode in ["verify-ca", "verify-full"] {
            refused(&cluster, &ca, mode, "not signed by a CA in sslrootcert").await;
        }

        // The right CA and the wrong name: only verify-full refuses.
        let wrong_name = tls.issue_server_cert(&["wrong.example"]).unwrap();
        cluster.replace_server_cert(&wrong_name).await.unwrap();
        connects("verify-ca").await;
        refused(&cluster, &ca, "verify-full", "not valid for this host name").await;

        // The right CA and the right name: both accept.
        let good = tls.issue_server_cert(&["localhost"]).unwrap();
        cluster.replace_server_cert(&good).await.unwrap();
        connects("verify-ca").await;
        connects("verify-full").await;
    }
}
