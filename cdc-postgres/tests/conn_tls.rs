//! TLS per `sslmode` against a cluster with TLS (certificate for `localhost` and
//! `127.0.0.1`), for both the replication and the SQL connection, checked on the server
//! side with `pg_stat_ssl`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::sync::Arc;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{ConnectionConfig, ReplicationConnection, SourceConfig, connect_sql};
use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder};
use conn_support::{SharedCluster, backend_uses_tls, enc, sql_uses_tls};

/// A CA that signed nothing the cluster presents.
const UNRELATED_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBrDCCAVGgAwIBAgIURHy+6CES6C4vpbfXR0Z3RROnURcwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXcGdjZGMgdW5yZWxhdGVkIHRlc3QgQ0EwIBcNMjYxMjAyMTUw
NTA5WhgPMjEyNjExMDgxNTA1MDlaMCIxIDAeBgNVBAMMF3BnY2RjIHVucmVsYXRl
ZCB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE1yK77NlmEIO2JkxX
E3TE20MNxKkkUXt+F8PrZ3w1vlMrMEtLr4LR3zPAPP16jA6JQbTPHFmJPpeSvsB1
vojJCaNjMGEwHQYDVR0OBBYEFGHaoMyKrip9OIdCXZixR6KSDFD7MB8GA1UdIwQY
MBaAFGHaoMyKrip9OIdCXZixR6KSDFD7MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P
AQH/BAQDAgEGMAoGCCqGSM49BAMCA0kAMEYCIQC+Q5STP0pP+vYVwmcEICmBVavc
X14de98VG/cs5GSyEAIhAI2p2y7fAflnQFL3OzVrUOYXm4GEosb4bvvtacw4+u2X
-----END CERTIFICATE-----
";

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    static CLUSTER: SharedCluster = SharedCluster::new();

    /// `tls_user` may connect either way; `ssl_only_user` only with TLS; `plain_only_user`
    /// only without; `cert_user` only with a client certificate.
    async fn cluster() -> Arc<Cluster> {
        CLUSTER
            .get(
                || {
                    ClusterBuilder::new()
                        .auth(AuthMethod::ScramSha256)
                        .tls()
                        .hba_line("hostnossl all ssl_only_user 127.0.0.1/32 reject")
                        .hba_line("hostssl all plain_only_user 127.0.0.1/32 reject")
                        .hba_line("hostssl all cert_user 127.0.0.1/32 cert")
                        .user("tls_user", "tls-secret")
                        .user("ssl_only_user", "ssl-secret")
                        .user("plain_only_user", "plain-secret")
                        .user("cert_user", "unused")
                },
                "",
            )
            .await
    }

    fn ca_path(cluster: &Cluster) -> String {
        cluster
            .tls()
            .unwrap()
            .ca_cert_path()
            .to_string_lossy()
            .into_owned()
    }

    fn config(
        cluster: &Cluster,
        host: &str,
        user: &str,
        password: &str,
        query: &str,
    ) -> ConnectionConfig {
        ConnectionConfig::parse(&format!(
            "postgres://{user}:{}@{host}:{}/postgres?{query}",
            enc(password),
            cluster.port()
        ))
        .unwrap()
    }

    /// Connects both ways and returns whether each uses TLS, per `pg_stat_ssl`.
    async fn tls_of_both(cluster: &Cluster, config: &ConnectionConfig) -> (bool, bool) {
        let repl = ReplicationConnection::connect(config)
            .await
            .unwrap_or_else(|e| panic!("replication connection: {e}"));
        let replication = backend_uses_tls(cluster, repl.backend_pid()).await;
        assert_eq!(repl.is_tls(), replication);
        repl.close().await;
        let sql = connect_sql(config)
            .await
            .unwrap_or_else(|e| panic!("SQL connection: {e}"));
        (replication, sql_uses_tls(&sql).await)
    }

    #[tokio::test]
    async fn verify_full_accepts_the_cluster_ca_and_reaches_both_connections() {
        let cluster = cluster().await;
        let query = format!(
            "sslmode=verify-full&sslrootcert={}",
            enc(&ca_path(&cluster))
        );
        for host in ["localhost", "127.0.0.1"] {
            let config = config(&cluster, host, "tls_user", "tls-secret", &query);
            assert_eq!(tls_of_both(&cluster, &config).await, (true, true), "{host}");
        }
    }

    #[tokio::test]
    async fn verify_full_and_verify_ca_reject_an_unknown_ca() {
        let cluster = cluster().await;
        let dir = tempfile_dir();
        let other_ca = dir.join("other-ca.pem");
        std::fs::write(&other_ca, UNRELATED_CA).unwrap();
        for mode in ["verify-full", "verify-ca", "require"] {
            let query = format!(
                "sslmode={mode}&sslrootcert={}",
                enc(&other_ca.to_string_lossy())
            );
            let config = config(&cluster, "localhost", "tls_user", "tls-secret", &query);
            let err = ReplicationConnection::connect(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
            let text = err.to_string();
            assert!(
                text.contains("TLS") && text.contains("UnknownIssuer"),
                "{mode}: {text}"
            );
            let err = connect_sql(&config).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{mode}: {err}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pgcdc-conn-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn require_and_verify_ca_accept_without_checking_more_than_asked() {
        let cluster = cluster().await;
        let require = config(
            &cluster,
            "127.0.0.1",
            "tls_user",
            "tls-secret",
            "sslmode=require",
        );
        assert_eq!(tls_of_both(&cluster, &require).await, (true, true));
        let query = format!("sslmode=verify-ca&sslrootcert={}", enc(&ca_path(&cluster)));
        let verify_ca = config(&cluster, "localhost", "tls_user", "tls-secret", &query);
        assert_eq!(tls_of_both(&cluster, &verify_ca).await, (true, true));
    }

    #[tokio::test]
    async fn disable_never_negotiates_tls() {
        let cluster = cluster().await;
        let disable = config(
            &cluster,
            "127.0.0.1",
            "tls_user",
            "tls-secret",
            "sslmode=disable",
        );
        assert_eq!(tls_of_both(&cluster, &disable).await, (false, false));
        // A server that insists on TLS for the user rejects it rather than getting TLS.
        let strict = config(
            &cluster,
            "127.0.0.1",
            "ssl_only_user",
            "ssl-secret",
            "sslmode=disable",
        );
        let err = ReplicationConnection::connect(&strict).await.unwrap_err();
        assert_eq!(
            err.server_error().map(|s| s.code.as_str()),
            Some("28000"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn allow_tries_plaintext_first_and_tls_when_rejected() {
        let cluster = cluster().await;
        let plain = config(
            &cluster,
            "127.0.0.1",
            "tls_user",
            "tls-secret",
            "sslmode=allow",
        );
        assert_eq!(tls_of_both(&cluster, &plain).await, (false, false));
        let retried = config(
            &cluster,
            "127.0.0.1",
            "ssl_only_user",
            "ssl-secret",
            "sslmode=allow",
        );
        assert_eq!(tls_of_both(&cluster, &retried).await, (true, true));
    }

    #[tokio::test]
    async fn prefer_uses_tls_and_falls_back_when_tls_is_rejected() {
        let cluster = cluster().await;
        let tls = config(
            &cluster,
            "127.0.0.1",
            "tls_user",
            "tls-secret",
            "sslmode=prefer",
        );
        assert_eq!(tls_of_both(&cluster, &tls).await, (true, true));
        let fallback = config(
            &cluster,
            "127.0.0.1",
            "plain_only_user",
            "plain-secret",
            "sslmode=prefer",
        );
        assert_eq!(tls_of_both(&cluster, &fallback).await, (false, false));
        // The default sslmode is prefer.
        let default = config(&cluster, "127.0.0.1", "tls_user", "tls-secret", "");
        assert_eq!(tls_of_both(&cluster, &default).await, (true, true));
    }

    #[tokio::test]
    async fn a_client_certificate_authenticates_from_files_and_from_feldera_json() {
        let cluster = cluster().await;
        let tls = cluster.tls().unwrap();
        let cert = tls.issue_client_cert("cert_user").unwrap();
        let query = format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            enc(&ca_path(&cluster)),
            enc(&cert.cert_path.to_string_lossy()),
            enc(&cert.key_path.to_string_lossy()),
        );
        let files = config(&cluster, "localhost", "cert_user", "", &query);
        assert_eq!(tls_of_both(&cluster, &files).await, (true, true));

        // Without the certificate the server refuses.
        let query = format!(
            "sslmode=verify-full&sslrootcert={}",
            enc(&ca_path(&cluster))
        );
        let without = config(&cluster, "localhost", "cert_user", "", &query);
        let err = ReplicationConnection::connect(&without).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");

        // Feldera's connector configuration, PEM inline, handed over unchanged.
        let json = serde_json::json!({
            "uri": format!("postgres://cert_user@localhost:{}/postgres", cluster.port()),
            "publication": "unused_pub",
            "source_table": "public.t",
            "ssl_ca_pem": tls.ca_cert_pem(),
            "ssl_client_pem": cert.cert_pem,
            "ssl_client_key": cert.key_pem,
            "streaming_ack_hold_ms": 2000,
        });
        let source = SourceConfig::from_json(&json.to_string()).unwrap();
        assert_eq!(
            tls_of_both(&cluster, &source.connection).await,
            (true, true)
        );
    }

    #[tokio::test]
    async fn feldera_ca_location_with_uri_sslmode_is_honoured() {
        let cluster = cluster().await;
        let json = serde_json::json!({
            "uri": format!("postgres://tls_user:tls-secret@127.0.0.1:{}/postgres?sslmode=disable", cluster.port()),
            "publication": "unused_pub",
            "source_table": "public.t",
            "ssl_ca_location": ca_path(&cluster),
        });
        let source = SourceConfig::from_json(&json.to_string()).unwrap();
        assert_eq!(
            tls_of_both(&cluster, &source.connection).await,
            (false, false)
        );
        let json = serde_json::json!({
            "uri": format!("postgres://tls_user:tls-secret@localhost:{}/postgres", cluster.port()),
            "publication": "unused_pub",
            "source_table": "public.t",
            "ssl_ca_location": ca_path(&cluster),
        });
        let source = SourceConfig::from_json(&json.to_string()).unwrap();
        assert_eq!(
            tls_of_both(&cluster, &source.connection).await,
            (true, true)
        );
    }
}
