//! A server certificate issued by the right CA for the wrong name: `verify-full` must
//! refuse it, `verify-ca` and `require` accept it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{
    ConnectionConfig, ReplicationConnection, SourceConfig, SslMode, connect_sql,
};
use cdc_testkit::{AuthMethod, ClusterBuilder};
use conn_support::{backend_uses_tls, enc, sql_uses_tls};

/// Named `conn` so that `cargo test -p cdc-pgoutput conn` selects these tests.
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
}
