//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use cdc_testkit::{Cluster, IssuedCert};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A rustls connector trusting only `ca_pem`, optionally presenting a client certificate.
pub fn tls_connector(ca_pem: &str, client: Option<&IssuedCert>) -> MakeRustlsConnect {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(c) => {
            let certs = rustls_pemfile::certs(&mut c.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = rustls_pemfile::private_key(&mut c.key_pem.as_bytes())
                .unwrap()
                .unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    MakeRustlsConnect::new(config)
}

/// Config for a TLS connection to the cluster, verifying the server name `localhost` while
/// connecting to 127.0.0.1.
pub fn tls_config(cluster: &Cluster, user: &str, password: Option<&str>) -> tokio_postgres::Config {
    let mut config = tokio_postgres::Config::new();
    config
        .host("localhost")
        .hostaddr(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .port(cluster.port())
        .dbname("postgres")
        .user(user)
        .ssl_mode(SslMode::Require);
    if let Some(p) = password {
        config.password(p);
    }
    config
}

/// Connect with `tls`, spawning the connection task.
pub async fn connect_tls(
    config: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(tls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Connect without TLS, spawning the connection task.
pub async fn connect_plain(
    config: &tokio_postgres::Config,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Direct children of `pid`, from /proc.
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s[s.rfind(')')? + 1..].to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next())
                .unwrap_or("X");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}
