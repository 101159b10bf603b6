//! Connecting to NATS: credentials, TLS, and server lists in errors without secrets.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, ServerAddr};
use cdc_core::Error;

use super::options::{JetStreamOptions, NatsAuth};

/// Connects with the options' servers, credentials and TLS. The client reconnects on its
/// own (to any server of the cluster) for as long as it lives.
pub(crate) async fn connect(options: &JetStreamOptions) -> Result<Client, Error> {
    if options.servers.is_empty() {
        return Err(Error::config(
            "no NATS server given (example: nats://127.0.0.1:4222)",
        ));
    }
    let mut addrs = Vec::with_capacity(options.servers.len());
    for server in &options.servers {
        let addr: ServerAddr = server.parse().map_err(|e| {
            Error::config(format!(
                "NATS server {:?} is not a valid address ({e}); write it as nats://host:port or tls://host:port",
                redact(server)
            ))
        })?;
        addrs.push(addr);
    }
    let mut connect = ConnectOptions::new()
        .name("pgcdc")
        .connection_timeout(options.request_timeout.max(Duration::from_secs(1)))
        .request_timeout(Some(options.request_timeout))
        .event_callback(|event| async move {
            match event {
                async_nats::Event::Connected => tracing::info!("NATS connection (re)established"),
                async_nats::Event::Disconnected => {
                    tracing::warn!("NATS connection lost; reconnecting")
                }
                // Closing is the sink's own doing; draining precedes it.
                async_nats::Event::Closed | async_nats::Event::Draining => {
                    tracing::debug!(event = %event, "NATS connection event")
                }
                other => tracing::warn!(event = %other, "NATS connection event"),
            }
        });
    connect = match &options.auth {
        NatsAuth::None => connect,
        NatsAuth::CredentialsFile(path) => connect.credentials_file(path).await.map_err(|e| {
            Error::config(format!(
                "cannot read the NATS credentials file {}: {e}",
                path.display()
            ))
        })?,
        NatsAuth::NKeySeed(seed) => connect.nkey(seed.trim().to_owned()),
        NatsAuth::Token(token) => connect.token(token.trim().to_owned()),
        NatsAuth::UserPassword(user, password) => {
            connect.user_and_password(user.clone(), password.clone())
        }
    };
    if options.tls.require {
        connect = connect.require_tls(true);
    }
    if let Some(ca) = &options.tls.ca_file {
        connect = connect.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &options.tls.client_cert {
        connect = connect.add_client_certificate(cert.clone(), key.clone());
    }
    connect.connect(addrs).await.map_err(|e| {
        Error::sink(format!(
            "cannot connect to NATS at {}: {e}; check that the server runs with JetStream (-js), the address, the credentials and TLS settings",
            servers_for_display(&options.servers)
        ))
    })
}

/// The servers, comma-separated, with any `user:password@` removed.
pub(crate) fn servers_for_display(servers: &[String]) -> String {
    servers
        .iter()
        .map(|s| redact(s))
        .collect::<Vec<_>>()
        .join(",")
}

/// A server URL without its user information (`nats://u:p@h:4222` → `nats://h:4222`).
pub(crate) fn redact(server: &str) -> String {
    let (scheme, rest) = match server.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, server),
    };
    let host = match rest.rsplit_once('@') {
        Some((_, host)) => host,
        None => rest,
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{host}"),
        None => host.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lists_never_show_user_information() {
        assert_eq!(redact("nats://u:secret@h:4222"), "nats://h:4222");
        assert_eq!(redact("u:p@w@h:1"), "h:1");
        assert_eq!(redact("tls://h:4222"), "tls://h:4222");
        assert_eq!(
            servers_for_display(&["nats://a:b@x:1".into(), "y:2".into()]),
            "nats://x:1,y:2"
        );
    }
}
