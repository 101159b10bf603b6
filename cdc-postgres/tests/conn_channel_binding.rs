//! SCRAM channel binding (`channel_binding=disable|prefer|require`, SCRAM-SHA-256-PLUS with
//! `tls-server-end-point`) against a cluster with TLS, for both the replication and the SQL
//! connection — including a man in the middle that relays the exchange with a certificate
//! of its own, which only channel binding detects when `sslmode` verifies nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod conn_support;

use std::sync::Arc;

use cdc_core::ErrorKind;
use cdc_postgres::conn::{ConnectionConfig, ReplicationConnection, connect_sql};
use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder, IssuedCert};
use conn_support::{SharedCluster, backend_uses_tls, enc, sql_uses_tls, uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    static CLUSTER: SharedCluster = SharedCluster::new();

    /// `scram_user` (SCRAM-SHA-256, the cluster's method), `md5_user` (md5 with a genuine
    /// md5 secret), `password_user` (cleartext) and `trust_user` (trust), all over TLS or not.
    async fn cluster() -> Arc<Cluster> {
        CLUSTER
            .get(
                || {
                    ClusterBuilder::new()
                        .auth(AuthMethod::ScramSha256)
                        .tls()
                        .hba_line("host all trust_user 127.0.0.1/32 trust")
                        .hba_line("host all password_user 127.0.0.1/32 password")
                        .hba_line("host all md5_user 127.0.0.1/32 md5")
                        .user("scram_user", "scram-secret")
                        .user("trust_user", "unused")
                        .user("password_user", "pw-secret")
                },
                "SET password_encryption = 'md5'; CREATE ROLE md5_user LOGIN REPLICATION PASSWORD 'md5-secret';",
            )
            .await
    }

    fn config(
        cluster: &Cluster,
        user: &str,
        password: Option<&str>,
        query: &str,
    ) -> ConnectionConfig {
        ConnectionConfig::parse(&uri(cluster, user, password, "postgres", query)).unwrap()
    }

    /// Connects both ways, checks each session with a query and `pg_stat_ssl`, and returns
    /// whether each uses TLS.
    async fn connect_both(cluster: &Cluster, config: &ConnectionConfig) -> (bool, bool) {
        let mut repl = ReplicationConnection::connect(config)
            .await
            .unwrap_or_else(|e| panic!("replication connection: {e}"));
        let system = repl.identify_system().await.unwrap();
        assert_eq!(system.dbname.as_deref(), Some("postgres"));
        let replication = backend_uses_tls(cluster, repl.backend_pid()).await;
        assert_eq!(repl.is_tls(), replication);
        repl.close().await;
        let sql = connect_sql(config)
            .await
            .unwrap_or_else(|e| panic!("SQL connection: {e}"));
        let user: String = sql
            .query_one("SELECT current_user::text", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(user, config.user);
        (replication, sql_uses_tls(&sql).await)
    }

    /// Both connections fail with a Config error whose message contains every one of
    /// `needles`; returns the replication connection's message.
    async fn both_fail(config: &ConnectionConfig, needles: &[&str]) -> String {
        let err = ReplicationConnection::connect(config)
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "replication: {err}");
        let text = err.to_string();
        for needle in needles {
            assert!(
                text.contains(needle),
                "replication: {needle:?} not in {text}"
            );
        }
        let err = connect_sql(config).await.map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "SQL: {err}");
        let sql_text = err.to_string();
        for needle in needles {
            assert!(
                sql_text.contains(needle),
                "SQL: {needle:?} not in {sql_text}"
            );
        }
        text
    }

    #[tokio::test]
    async fn require_succeeds_over_tls_with_scram() {
        let cluster = cluster().await;
        let ca = cluster
            .tls()
            .unwrap()
            .ca_cert_path()
            .to_string_lossy()
            .into_owned();
        for query in [
            "sslmode=require&channel_binding=require".to_owned(),
            "channel_binding=require".to_owned(),
            format!(
                "sslmode=verify-full&sslrootcert={}&channel_binding=require",
                enc(&ca)
            ),
        ] {
            let config = config(&cluster, "scram_user", Some("scram-secret"), &query);
            assert_eq!(
                connect_both(&cluster, &config).await,
                (true, true),
                "{query}"
            );
        }
        // The default (prefer) and disable connect too.
        for query in ["sslmode=require", "sslmode=require&channel_binding=disable"] {
            let config = config(&cluster, "scram_user", Some("scram-secret"), query);
            assert_eq!(
                connect_both(&cluster, &config).await,
                (true, true),
                "{query}"
            );
        }
    }

    #[tokio::test]
    async fn require_refuses_a_connection_without_tls() {
        let cluster = cluster().await;
        let plaintext = config(
            &cluster,
            "scram_user",
            Some("scram-secret"),
            "sslmode=disable&channel_binding=require",
        );
        both_fail(
            &plaintext,
            &["channel_binding=require", "TLS", "sslmode=disable"],
        )
        .await;
        // Unix sockets never use TLS.
        let socket = ConnectionConfig::parse(&format!(
            "host={} port={} user=scram_user password=scram-secret dbname=postgres channel_binding=require",
            cluster.socket_dir().display(),
            cluster.port()
        ))
        .unwrap();
        both_fail(&socket, &["channel_binding=require", "Unix socket"]).await;
        // Without channel_binding=require the same plaintext connection works.
        let prefer = config(
            &cluster,
            "scram_user",
            Some("scram-secret"),
            "sslmode=disable&channel_binding=prefer",
        );
        assert_eq!(connect_both(&cluster, &prefer).await, (false, false));
    }

    #[tokio::test]
    async fn require_refuses_authentication_without_scram() {
        let cluster = cluster().await;
        for (user, password, method) in [
            ("md5_user", Some("md5-secret"), "md5"),
            ("password_user", Some("pw-secret"), "password"),
            ("trust_user", None, "trust"),
        ] {
            let required = config(
                &cluster,
                user,
                password,
                "sslmode=require&channel_binding=require",
            );
            let text = both_fail(&required, &["channel_binding=require"]).await;
            assert!(text.contains(method), "{user}: {text}");
            // Never echo a password.
            if let Some(p) = password {
                assert!(!text.contains(p), "{text}");
            }
            // Without require the same user connects over TLS.
            let prefer = config(&cluster, user, password, "sslmode=require");
            assert_eq!(
                connect_both(&cluster, &prefer).await,
                (true, true),
                "{user}"
            );
        }
    }

    /// A man in the middle with a certificate of its own (clients with `sslmode=require`
    /// and no CA accept any), relaying the whole conversation to the real server.
    #[tokio::test]
    async fn channel_binding_defeats_a_relaying_man_in_the_middle() {
        let cluster = cluster().await;
        let relay = Relay::start(&cluster, false).await;
        let relayed = |query: &str| {
            ConnectionConfig::parse(&format!(
                "postgres://scram_user:scram-secret@127.0.0.1:{}/postgres?{query}",
                relay.port
            ))
            .unwrap()
        };
        // Without channel binding the relay logs in as the user: the attack works.
        let disabled = relayed("sslmode=require&channel_binding=disable");
        assert_eq!(connect_both(&cluster, &disabled).await, (true, true));
        // With it (prefer is the default) the server sees the binding does not match its
        // certificate and refuses.
        for query in [
            "sslmode=require",
            "sslmode=require&channel_binding=prefer",
            "sslmode=require&channel_binding=require",
        ] {
            let config = relayed(query);
            let err = ReplicationConnection::connect(&config)
                .await
                .map(|_| ())
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{query}: {err}");
            assert!(
                err.to_string().contains("refused SCRAM channel binding"),
                "{query}: {err}"
            );
            let err = connect_sql(&config).await.map(|_| ()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{query}: {err}");
            assert!(
                err.to_string().contains("refused SCRAM channel binding"),
                "{query}: {err}"
            );
        }
        relay.stop();
    }

    /// The man in the middle removes SCRAM-SHA-256-PLUS from the server's offer, so that
    /// the client does not bind. The client says it could have ('y'), which the server
    /// (that did offer it) refuses; with require the client refuses itself.
    #[tokio::test]
    async fn a_stripped_channel_binding_offer_is_detected() {
        let cluster = cluster().await;
        let relay = Relay::start(&cluster, true).await;
        let relayed = |query: &str| {
            ConnectionConfig::parse(&format!(
                "postgres://scram_user:scram-secret@127.0.0.1:{}/postgres?{query}",
                relay.port
            ))
            .unwrap()
        };
        let disabled = relayed("sslmode=require&channel_binding=disable");
        assert_eq!(connect_both(&cluster, &disabled).await, (true, true));
        let prefer = relayed("sslmode=require");
        let err = ReplicationConnection::connect(&prefer)
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(
            err.to_string().contains("refused SCRAM channel binding"),
            "{err}"
        );
        let err = connect_sql(&prefer).await.map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(
            err.to_string().contains("refused SCRAM channel binding"),
            "{err}"
        );
        let require = relayed("sslmode=require&channel_binding=require");
        both_fail(&require, &["channel_binding=require", "SCRAM-SHA-256-PLUS"]).await;
        relay.stop();
    }
}

/// A TLS-terminating relay in front of the cluster: it answers the client's SSLRequest,
/// completes the handshake with a certificate from a CA nobody trusts, opens its own TLS
/// connection to the cluster, and copies bytes both ways — optionally rewriting the
/// server's SASL offer to plain SCRAM-SHA-256.
struct Relay {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(cluster: &Cluster, strip_plus: bool) -> Relay {
        let tls = cluster.tls().unwrap();
        let impostor = tls
            .issue_server_cert_from_unknown_ca(&["localhost", "127.0.0.1"])
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&impostor));
        let connector = tokio_rustls::TlsConnector::from(client_config(tls.ca_cert_pem()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = cluster.port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let connector = connector.clone();
                tokio::spawn(async move {
                    // Errors end this relayed connection only.
                    let _ = relay_one(client, acceptor, connector, upstream, strip_plus).await;
                });
            }
        });
        Relay { port, task }
    }

    fn stop(self) {
        self.task.abort();
    }
}

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

async fn relay_one(
    mut client: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
    upstream: u16,
    strip_plus: bool,
) -> std::io::Result<()> {
    let mut request = [0u8; 8];
    client.read_exact(&mut request).await?;
    if request != SSL_REQUEST {
        return Ok(());
    }
    client.write_all(b"S").await?;
    let mut client = acceptor.accept(client).await?;

    let mut server = TcpStream::connect(("127.0.0.1", upstream)).await?;
    server.write_all(&SSL_REQUEST).await?;
    let mut answer = [0u8; 1];
    server.read_exact(&mut answer).await?;
    if answer[0] != b'S' {
        return Ok(());
    }
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut server = connector.connect(name, server).await?;

    if strip_plus {
        // Startup message: length (including itself), then the body.
        let startup = read_untagged(&mut client).await?;
        server.write_all(&startup).await?;
        // The server's first message: the authentication request.
        let (tag, body) = read_tagged(&mut server).await?;
        let body = if tag == b'R' && body.starts_with(&10i32.to_be_bytes()) {
            let mut sasl = 10i32.to_be_bytes().to_vec();
            sasl.extend_from_slice(b"SCRAM-SHA-256\0\0");
            sasl
        } else {
            body
        };
        let mut message = vec![tag];
        message.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        message.extend_from_slice(&body);
        client.write_all(&message).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}

async fn read_untagged<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let mut message = len.to_vec();
    message.resize(i32::from_be_bytes(len) as usize, 0);
    stream.read_exact(&mut message[4..]).await?;
    Ok(message)
}

async fn read_tagged<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
) -> std::io::Result<(u8, Vec<u8>)> {
    let tag = stream.read_u8().await?;
    let len = stream.read_i32().await?;
    let mut body = vec![0u8; len as usize - 4];
    stream.read_exact(&mut body).await?;
    Ok((tag, body))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(cert: &IssuedCert) -> Arc<rustls::ServerConfig> {
    let certs = rustls_pemfile::certs(&mut cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pemfile::private_key(&mut cert.key_pem.as_bytes())
        .unwrap()
        .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Arc::new(config)
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Arc::new(config)
}
