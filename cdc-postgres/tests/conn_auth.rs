//! Authentication, connection strings and plaintext `sslmode`s against a real cluster
//! without TLS, for both the replication and the SQL connection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::sync::Arc;
use std::time::Duration;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{ConnectionConfig, ReplicationConnection, connect_sql};
use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder};
use conn_support::{SharedCluster, backend_uses_tls, enc, sql_uses_tls, uri};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    static CLUSTER: SharedCluster = SharedCluster::new();

    const SPECIAL_USER: &str = "spécial";
    const SPECIAL_PASSWORD: &str = "p@ss:w/rd%20é€?&#'\" x";

    /// Users per method: `trust_user` (trust), `password_user` (cleartext), `md5_user` (md5,
    /// with a genuine md5 secret), `scram_user` and everyone else (SCRAM-SHA-256).
    async fn cluster() -> Arc<Cluster> {
        CLUSTER
            .get(
                || {
                    ClusterBuilder::new()
                        .auth(AuthMethod::ScramSha256)
                        .hba_line("host all trust_user 127.0.0.1/32 trust")
                        .hba_line("host all password_user 127.0.0.1/32 password")
                        .hba_line("host all md5_user 127.0.0.1/32 md5")
                        .user("trust_user", "unused")
                        .user("password_user", "pw-secret")
                        .user("scram_user", "scram-secret")
                        .user(SPECIAL_USER, SPECIAL_PASSWORD)
                },
                "SET password_encryption = 'md5'; CREATE ROLE md5_user LOGIN REPLICATION PASSWORD 'md5-secret';",
            )
            .await
    }

    async fn check_both(config: &ConnectionConfig, user: &str) {
        let mut repl = ReplicationConnection::connect(config)
            .await
            .unwrap_or_else(|e| panic!("replication connection as {user}: {e}"));
        let system = repl.identify_system().await.unwrap();
        assert_eq!(system.dbname.as_deref(), Some("postgres"));
        assert!(!repl.is_tls());
        repl.close().await;
        let sql = connect_sql(config)
            .await
            .unwrap_or_else(|e| panic!("SQL connection as {user}: {e}"));
        let current: String = sql
            .query_one("SELECT current_user::text", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(current, user);
    }

    #[tokio::test]
    async fn every_auth_method_accepts_the_right_password() {
        let cluster = cluster().await;
        for (user, password) in [
            ("trust_user", None),
            ("password_user", Some("pw-secret")),
            ("md5_user", Some("md5-secret")),
            ("scram_user", Some("scram-secret")),
        ] {
            let config = ConnectionConfig::parse(&uri(
                &cluster,
                user,
                password,
                "postgres",
                "sslmode=disable",
            ))
            .unwrap();
            check_both(&config, user).await;
        }
    }

    #[tokio::test]
    async fn a_wrong_password_fails_clearly_for_every_method() {
        let cluster = cluster().await;
        for user in ["password_user", "md5_user", "scram_user"] {
            let config =
                ConnectionConfig::parse(&uri(&cluster, user, Some("wrong"), "postgres", ""))
                    .unwrap();
            let err = ReplicationConnection::connect(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{user}: {err}");
            assert_eq!(
                err.server_error().map(|s| s.code.as_str()),
                Some("28P01"),
                "{user}: {err}"
            );
            assert!(err.to_string().contains("password"), "{user}: {err}");
            let err = connect_sql(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{user}: {err}");
            assert_eq!(
                err.server_error().map(|s| s.code.as_str()),
                Some("28P01"),
                "{user}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_password_is_a_config_error_naming_the_method() {
        let cluster = cluster().await;
        let config = ConnectionConfig::parse(&uri(
            &cluster,
            "scram_user",
            None,
            "postgres",
            "sslmode=disable",
        ))
        .unwrap();
        let err = ReplicationConnection::connect(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.message().contains("no password is configured")
                && err.message().contains("scram-sha-256"),
            "{err}"
        );
        assert_eq!(
            connect_sql(&config).await.unwrap_err().kind(),
            ErrorKind::Config
        );
    }

    #[tokio::test]
    async fn a_password_with_reserved_and_non_ascii_characters_works_from_a_uri() {
        let cluster = cluster().await;
        let uri = uri(
            &cluster,
            SPECIAL_USER,
            Some(SPECIAL_PASSWORD),
            "postgres",
            "application_name=caf%C3%A9",
        );
        assert!(
            uri.contains("%40")
                && uri.contains("%3A")
                && uri.contains("%2F")
                && uri.contains("%25")
        );
        let config = ConnectionConfig::parse(&uri).unwrap();
        assert_eq!(config.password.as_deref(), Some(SPECIAL_PASSWORD));
        check_both(&config, SPECIAL_USER).await;
    }

    #[tokio::test]
    async fn unix_socket_hosts_work_in_both_forms() {
        let cluster = cluster().await;
        let dir = cluster.socket_dir().to_string_lossy().into_owned();
        let key_value =
            cluster.socket_connection_string("postgres", "scram_user", Some("scram-secret"));
        let uri_form = format!(
            "postgres://scram_user:scram-secret@{}:{}/postgres?sslmode=require",
            enc(&dir),
            cluster.port()
        );
        let query_form = format!(
            "postgres://scram_user:scram-secret@/postgres?host={}&port={}",
            enc(&dir),
            cluster.port()
        );
        for conninfo in [key_value, uri_form, query_form] {
            let config = ConnectionConfig::parse(&conninfo).unwrap();
            assert!(config.is_unix_socket(), "{conninfo}");
            // As in libpq, sslmode does not apply to Unix sockets.
            check_both(&config, "scram_user").await;
        }
    }

    #[tokio::test]
    async fn plaintext_sslmodes_against_a_server_without_tls() {
        let cluster = cluster().await;
        for mode in ["disable", "allow", "prefer"] {
            let config = ConnectionConfig::parse(&uri(
                &cluster,
                "scram_user",
                Some("scram-secret"),
                "postgres",
                &format!("sslmode={mode}"),
            ))
            .unwrap();
            let repl = ReplicationConnection::connect(&config)
                .await
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(!repl.is_tls(), "{mode}");
            assert!(
                !backend_uses_tls(&cluster, repl.backend_pid()).await,
                "{mode}"
            );
            repl.close().await;
            let sql = connect_sql(&config)
                .await
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert!(!sql_uses_tls(&sql).await, "{mode}");
        }
        for mode in ["require", "verify-ca", "verify-full"] {
            let mut query = format!("sslmode={mode}");
            if mode.starts_with("verify") {
                query.push_str("&sslrootcert=/nonexistent/ca.pem");
            }
            let config = ConnectionConfig::parse(&uri(
                &cluster,
                "scram_user",
                Some("scram-secret"),
                "postgres",
                &query,
            ))
            .unwrap();
            let err = ReplicationConnection::connect(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
            assert!(
                err.message().contains("does not support TLS"),
                "{mode}: {err}"
            );
            let err = connect_sql(&config).await.unwrap_err();
            assert!(
                err.message().contains("does not support TLS"),
                "{mode}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn channel_binding_against_a_server_without_tls() {
        let cluster = cluster().await;
        // prefer (the default) and disable connect without TLS, so without binding.
        for query in ["channel_binding=prefer", "channel_binding=disable", ""] {
            let config = ConnectionConfig::parse(&uri(
                &cluster,
                "scram_user",
                Some("scram-secret"),
                "postgres",
                query,
            ))
            .unwrap();
            check_both(&config, "scram_user").await;
        }
        // require cannot be met without TLS: a clear error, whatever sslmode fell back.
        for mode in ["prefer", "allow", "disable"] {
            let config = ConnectionConfig::parse(&uri(
                &cluster,
                "scram_user",
                Some("scram-secret"),
                "postgres",
                &format!("sslmode={mode}&channel_binding=require"),
            ))
            .unwrap();
            let err = ReplicationConnection::connect(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
            assert!(
                err.message().contains("channel_binding=require") && err.message().contains("TLS"),
                "{mode}: {err}"
            );
            let err = connect_sql(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
            assert!(
                err.message().contains("channel_binding=require"),
                "{mode}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn an_unknown_database_is_a_config_error() {
        let cluster = cluster().await;
        let config = ConnectionConfig::parse(&uri(
            &cluster,
            "scram_user",
            Some("scram-secret"),
            "no_such_db",
            "",
        ))
        .unwrap();
        let err = ReplicationConnection::connect(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("3D000"));
    }

    #[tokio::test]
    async fn connect_timeout_bounds_a_server_that_never_answers() {
        // A listener that accepts and then says nothing.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let config = ConnectionConfig::parse(&format!(
            "host=127.0.0.1 port={port} user=u password=p connect_timeout=2 sslmode=disable"
        ))
        .unwrap();
        let err = ReplicationConnection::connect(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
        assert!(err.message().contains("timed out after 2s"), "{err}");
        let err = tokio::time::timeout(Duration::from_secs(30), connect_sql(&config))
            .await
            .expect("connect_timeout applies to the SQL connection too")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
        hold.abort();
    }

    #[tokio::test]
    async fn a_refused_connection_is_transient() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let config =
            ConnectionConfig::parse(&format!("host=127.0.0.1 port={port} user=u")).unwrap();
        let err = ReplicationConnection::connect(&config).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    }
}
