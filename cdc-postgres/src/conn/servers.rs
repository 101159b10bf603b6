//! Several servers in one connection string (`host=a,b`, as libpq allows): each
//! connection tries them in order and takes the first that accepts it and qualifies under
//! `target_session_attrs` — after a failover, `read-write` finds the promoted standby.
//!
//! A server that does not qualify is skipped like one that is down. When none is left,
//! the error names every server with why it was skipped; it is transient when any of them
//! might qualify later (down, restarting, or a standby not yet promoted), so the source's
//! reconnect loop retries while a promotion is under way.

use std::future::Future;

use cdc_core::{Error, ErrorKind, Result};

use super::config::{ConnectionConfig, TargetSessionAttrs};
use super::transport::describe_target;

/// What `target_session_attrs` looks at on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerRole {
    /// `in_hot_standby` / `pg_is_in_recovery()`.
    pub in_recovery: bool,
    /// `default_transaction_read_only`.
    pub read_only: bool,
}

/// The error for a server `config` that does not qualify as `role`, or Ok.
pub(crate) fn require(config: &ConnectionConfig, role: ServerRole) -> Result<()> {
    let attrs = config.target_session_attrs;
    if attrs.accepts(role.in_recovery, role.read_only) {
        return Ok(());
    }
    let what = if role.in_recovery {
        "a standby (in recovery)"
    } else if role.read_only {
        "read-only (default_transaction_read_only = on)"
    } else {
        "a primary"
    };
    Err(Error::transient(format!(
        "the server at {} is {what}, which target_session_attrs={attrs} does not accept",
        describe_target(config)
    )))
}

/// Connects with `connect_one` to each server of `config` in turn (each given a
/// configuration naming that server alone, [`ConnectionConfig::per_server`]) and returns
/// the first success. `connect_one` checks the role itself ([`require`]), as how it asks
/// differs between session kinds; with [`TargetSessionAttrs::Any`] it need not ask.
pub(crate) async fn connect_first<T, F, Fut>(
    config: &ConnectionConfig,
    mut connect_one: F,
) -> Result<T>
where
    F: FnMut(ConnectionConfig) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut servers = config.per_server();
    if servers.len() == 1
        && let Some(single) = servers.pop()
    {
        // One server: its own error, as it was before several were possible.
        return connect_one(single).await;
    }
    let mut failures: Vec<(String, Error)> = Vec::new();
    for server in servers {
        let target = describe_target(&server);
        match connect_one(server).await {
            Ok(session) => return Ok(session),
            Err(e) => {
                tracing::debug!(server = %target, error = %e, "server skipped");
                failures.push((target, e));
            }
        }
    }
    Err(none_qualified(config.target_session_attrs, failures))
}

fn none_qualified(attrs: TargetSessionAttrs, failures: Vec<(String, Error)>) -> Error {
    // Transient if any server may qualify on a later attempt; otherwise the first
    // server's own kind (an authentication failure everywhere is a Config error).
    let kind = if failures.iter().any(|(_, e)| e.is_transient()) {
        ErrorKind::Transient
    } else {
        failures
            .first()
            .map_or(ErrorKind::Transient, |(_, e)| e.kind())
    };
    let listed: Vec<String> = failures
        .iter()
        .map(|(target, e)| format!("{target}: {}", e.message()))
        .collect();
    let message = format!(
        "none of the {} servers in the connection string accepted the connection (target_session_attrs={attrs}): {}",
        failures.len(),
        listed.join("; ")
    );
    let error = Error::new(kind, message);
    match failures.into_iter().next() {
        Some((_, first)) => error.with_source(first),
        None => error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(conninfo: &str) -> ConnectionConfig {
        ConnectionConfig::parse(conninfo).unwrap()
    }

    #[test]
    fn each_attribute_accepts_its_servers() {
        let roles = [(false, false), (false, true), (true, true)];
        let accepted = |attrs: TargetSessionAttrs| -> Vec<bool> {
            roles.iter().map(|&(r, ro)| attrs.accepts(r, ro)).collect()
        };
        assert_eq!(accepted(TargetSessionAttrs::Any), [true, true, true]);
        assert_eq!(
            accepted(TargetSessionAttrs::ReadWrite),
            [true, false, false]
        );
        assert_eq!(accepted(TargetSessionAttrs::Primary), [true, true, false]);
        assert_eq!(accepted(TargetSessionAttrs::Standby), [false, false, true]);
    }

    #[test]
    fn a_standby_is_refused_for_read_write_with_its_address() {
        let c = config("host=db1 port=5433 user=u target_session_attrs=read-write");
        let standby = ServerRole {
            in_recovery: true,
            read_only: true,
        };
        let err = require(&c, standby).unwrap_err();
        assert!(err.is_transient());
        assert!(
            err.message().contains("db1:5433") && err.message().contains("a standby"),
            "{err}"
        );
        assert!(
            require(
                &c,
                ServerRole {
                    in_recovery: false,
                    read_only: false
                }
            )
            .is_ok()
        );
    }

    #[tokio::test]
    async fn servers_are_tried_in_order_until_one_connects() {
        let c = config("host=a,b,c port=1,2,3 user=u target_session_attrs=read-write");
        let mut tried = Vec::new();
        let got = connect_first(&c, |one| {
            tried.push(describe_target(&one));
            let port = one.port;
            async move {
                if port == 2 {
                    Ok(port)
                } else {
                    Err(Error::transient("down"))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(got, 2);
        assert_eq!(tried, ["a:1", "b:2"]);
    }

    #[tokio::test]
    async fn when_none_qualifies_every_server_is_named() {
        let c = config("host=a,b port=1 user=u");
        let err = connect_first(&c, |one| {
            let port = one.port;
            let host = one.host.to_string();
            async move {
                Err::<(), _>(if host == "a" {
                    Error::config(format!("password authentication failed on {port}"))
                } else {
                    Error::transient("connection refused")
                })
            }
        })
        .await
        .unwrap_err();
        assert!(err.is_transient(), "one server may come back: {err}");
        let message = err.message();
        assert!(
            message.contains("a:1: password authentication failed")
                && message.contains("b:1: connection refused"),
            "{message}"
        );

        let everywhere = connect_first(&c, |_| async {
            Err::<(), _>(Error::config("password authentication failed"))
        })
        .await
        .unwrap_err();
        assert_eq!(everywhere.kind(), ErrorKind::Config);
    }
}
