//! Authentication methods and TLS, against real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use cdc_testkit::{ADMIN_PASSWORD, ADMIN_USER, AuthMethod, Cluster, ClusterBuilder};
use tokio_postgres::error::SqlState;

const ALICE_PASSWORD: &str = "p@ss:/%é 'q' \\x";

/// Right password works (key=value and URI forms, TCP and socket), wrong password fails
/// with 28P01; returns the stored secret of `alice`.
async fn check_password_auth(method: AuthMethod) -> String {
    let cluster = ClusterBuilder::new()
        .auth(method)
        .user("alice", ALICE_PASSWORD)
        .build()
        .await
        .unwrap();
    assert_eq!(cluster.auth_method(), method);

    let client = cluster
        .connect_as("postgres", "alice", Some(ALICE_PASSWORD))
        .await
        .unwrap();
    let who: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "alice");

    for conninfo in [
        cluster.connection_string("postgres", "alice", Some(ALICE_PASSWORD)),
        cluster.socket_connection_string("postgres", "alice", Some(ALICE_PASSWORD)),
        cluster.uri("postgres", "alice", Some(ALICE_PASSWORD)),
    ] {
        let config: tokio_postgres::Config = conninfo.parse().unwrap();
        common::connect_plain(&config)
            .await
            .unwrap_or_else(|e| panic!("{conninfo}: {e}"));
    }

    let err = cluster
        .connect_as("postgres", "alice", Some("wrong"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD), "{err}");
    let wrong_uri: tokio_postgres::Config = cluster
        .uri("postgres", "alice", Some("wrong"))
        .parse()
        .unwrap();
    let err = common::connect_plain(&wrong_uri).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD), "{err}");

    // The admin works over TCP with its password, and over the socket without one.
    cluster
        .connect_as("postgres", ADMIN_USER, Some(ADMIN_PASSWORD))
        .await
        .unwrap();
    let admin = cluster.connect("postgres").await.unwrap();
    admin
        .query_one(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn scram_sha_256_auth() {
    let secret = check_password_auth(AuthMethod::ScramSha256).await;
    assert!(secret.starts_with("SCRAM-SHA-256$"), "{secret}");
}

#[tokio::test]
async fn md5_auth() {
    let secret = check_password_auth(AuthMethod::Md5).await;
    assert!(secret.starts_with("md5"), "{secret}");
}

#[tokio::test]
async fn cleartext_password_auth() {
    check_password_auth(AuthMethod::Password).await;
}

#[tokio::test]
async fn users_created_later_and_replication_role() {
    let cluster = ClusterBuilder::new()
        .auth(AuthMethod::ScramSha256)
        .build()
        .await
        .unwrap();
    cluster.create_user("bob", "b0b").await.unwrap();
    let client = cluster
        .connect_as("postgres", "bob", Some("b0b"))
        .await
        .unwrap();
    let repl: bool = client
        .query_one(
            "SELECT rolreplication FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(repl);
}

#[tokio::test]
async fn tls_with_verified_certificate() {
    let cluster = ClusterBuilder::new().tls().build().await.unwrap();
    let tls = cluster.tls().unwrap();
    assert!(tls.ca_cert_path().exists());
    assert_eq!(
        std::fs::read_to_string(tls.ca_cert_path()).unwrap(),
        tls.ca_cert_pem()
    );
    assert!(!tls.ca_cert_der().is_empty());
    {
        use std::os::unix::fs::MetadataExt;
        let mode = std::fs::metadata(&tls.server_cert().key_path)
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let config = common::tls_config(&cluster, ADMIN_USER, Some(ADMIN_PASSWORD));
    let client = common::connect_tls(&config, common::tls_connector(tls.ca_cert_pem(), None))
        .await
        .unwrap();
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl);

    // Verification is real: a connector trusting another CA is refused.
    let other = ClusterBuilder::new().tls().build().await.unwrap();
    let foreign = common::tls_connector(other.tls().unwrap().ca_cert_pem(), None);
    assert!(common::connect_tls(&config, foreign).await.is_err());
}

#[tokio::test]
async fn wrong_name_certificate_fails_hostname_verification() {
    let cluster = ClusterBuilder::new()
        .tls_server_names(["wrong.example"])
        .build()
        .await
        .unwrap();
    let tls = cluster.tls().unwrap();
    assert_eq!(tls.server_names(), ["wrong.example"]);
    let config = common::tls_config(&cluster, ADMIN_USER, None);
    let err = common::connect_tls(&config, common::tls_connector(tls.ca_cert_pem(), None))
        .await
        .unwrap_err();
    let chain = format!("{err:?}");
    assert!(chain.contains("NotValidForName"), "{chain}");

    // Swapping in a certificate for localhost at runtime fixes it.
    let good = tls.issue_server_cert(&["localhost"]).unwrap();
    cluster.replace_server_cert(&good).await.unwrap();
    common::connect_tls(&config, common::tls_connector(tls.ca_cert_pem(), None))
        .await
        .unwrap();

    // And back to a wrong one.
    let bad = tls.issue_server_cert(&["wrong.example"]).unwrap();
    cluster.replace_server_cert(&bad).await.unwrap();
    assert!(
        common::connect_tls(&config, common::tls_connector(tls.ca_cert_pem(), None))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn certificate_from_an_unknown_ca_fails_chain_verification() {
    let cluster = ClusterBuilder::new().tls().build().await.unwrap();
    let tls = cluster.tls().unwrap();
    let config = common::tls_config(&cluster, ADMIN_USER, None);
    let foreign = tls
        .issue_server_cert_from_unknown_ca(&["localhost", "127.0.0.1"])
        .unwrap();
    assert_ne!(foreign.cert_pem, tls.server_cert().cert_pem);
    cluster.replace_server_cert(&foreign).await.unwrap();
    let err = common::connect_tls(&config, common::tls_connector(tls.ca_cert_pem(), None))
        .await
        .unwrap_err();
    let chain = format!("{err:?}");
    assert!(chain.contains("UnknownIssuer"), "{chain}");
}

#[tokio::test]
async fn ssl_only_rejects_plaintext() {
    let cluster = ClusterBuilder::new()
        .ssl_only()
        .auth(AuthMethod::ScramSha256)
        .user("alice", "pw")
        .build()
        .await
        .unwrap();
    let err = cluster
        .connect_as("postgres", "alice", Some("pw"))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
        "{err}"
    );
    let config = common::tls_config(&cluster, "alice", Some("pw"));
    let ca = cluster.tls().unwrap().ca_cert_pem();
    common::connect_tls(&config, common::tls_connector(ca, None))
        .await
        .unwrap();
}

#[tokio::test]
async fn client_certificate_auth() {
    let cluster = ClusterBuilder::new()
        .auth(AuthMethod::Cert)
        .user("alice", "unused")
        .build()
        .await
        .unwrap();
    let tls = cluster.tls().unwrap();
    let alice = tls.issue_client_cert("alice").unwrap();
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&alice.key_path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        // SAFETY: geteuid cannot fail.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });
    }
    let config = common::tls_config(&cluster, "alice", None);

    let client = common::connect_tls(
        &config,
        common::tls_connector(tls.ca_cert_pem(), Some(&alice)),
    )
    .await
    .unwrap();
    let who: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(who, "alice");

    // No client certificate, or one for someone else: refused.
    assert!(
        common::connect_tls(&config, common::tls_connector(tls.ca_cert_pem(), None))
            .await
            .is_err()
    );
    let mallory = tls.issue_client_cert("mallory").unwrap();
    assert!(
        common::connect_tls(
            &config,
            common::tls_connector(tls.ca_cert_pem(), Some(&mallory))
        )
        .await
        .is_err()
    );
    // The kit's admin connection still works.
    cluster.execute("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn builder_default_cluster_is_trust() {
    let cluster = Cluster::new().await.unwrap();
    assert_eq!(cluster.auth_method(), AuthMethod::Trust);
    assert!(cluster.tls().is_none());
    cluster
        .connect_as("postgres", ADMIN_USER, Some("anything"))
        .await
        .unwrap();
}
