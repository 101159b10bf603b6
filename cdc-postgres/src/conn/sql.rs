//! Ordinary SQL (catalog queries, COPY) through `tokio-postgres`, over the same transport
//! and TLS negotiation as the replication session.
//!
//! The socket (TCP or Unix, TLS per `sslmode` including `allow`'s and `prefer`'s second
//! attempt) is established by our transport code and handed to
//! [`tokio_postgres::Config::connect_raw`], so both connections always agree on every
//! setting; `tokio-postgres` then only runs startup and authentication on it — with SCRAM
//! channel binding per `channel_binding`, from the binding data of our TLS connection
//! (see `AlreadyNegotiated`).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use cdc_core::{Error, Result};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Client;
use tokio_postgres::config::{
    ChannelBinding as PgChannelBinding, SslMode as PgSslMode, SslNegotiation,
};
use tokio_postgres::tls::{ChannelBinding as TlsChannelBinding, TlsConnect, TlsStream};

use super::channel_binding;
use super::config::{ChannelBinding, ConnectionConfig, TargetSessionAttrs};
use super::error::{Activity, from_tokio_postgres};
use super::servers::ServerRole;
use super::transport::{self, Socket, describe_target};

/// The `tokio_postgres::Config` for `config`'s user, password, database,
/// `application_name`, `options` (followed by the pinned session settings, see
/// [`super::session`]), `connect_timeout` and `channel_binding`, for use with a socket
/// from our transport (so `ssl_mode` is `Disable`: TLS, when used, is already set up below
/// it; [`connect_sql`] hands a TLS socket over as described on `AlreadyNegotiated`).
pub fn tokio_postgres_config(config: &ConnectionConfig) -> tokio_postgres::Config {
    let mut pg = tokio_postgres::Config::new();
    pg.user(&config.user)
        .dbname(&config.dbname)
        .port(config.port)
        .ssl_mode(PgSslMode::Disable)
        .channel_binding(match config.tls.channel_binding {
            ChannelBinding::Disable => PgChannelBinding::Disable,
            ChannelBinding::Prefer => PgChannelBinding::Prefer,
            ChannelBinding::Require => PgChannelBinding::Require,
        });
    if let Some(password) = &config.password {
        pg.password(password);
    }
    if let Some(app) = &config.application_name {
        pg.application_name(app);
    }
    // The settings every session pins (text output, timeouts) follow the user's options.
    pg.options(super::session::startup_options(config.options.as_deref()));
    if let Some(timeout) = config.connect_timeout {
        pg.connect_timeout(timeout);
    }
    pg
}

/// Connects an ordinary SQL session with exactly the settings of `config` (the same
/// `sslmode` semantics, certificates and timeouts as
/// [`super::ReplicationConnection::connect`]) and spawns its connection task on the
/// current tokio runtime. The task ends when the client is dropped or the server goes
/// away (logged at debug level).
///
/// Errors are classified like the replication session's: authentication failures are
/// Config, an unreachable server is Transient, and so on; `channel_binding` failures are
/// Config errors that say so, as on the replication connection.
///
/// With several servers (`host=a,b`), each is tried in order and the first that
/// `target_session_attrs` accepts is used ([`crate::conn::TargetSessionAttrs`]).
pub async fn connect_sql(config: &ConnectionConfig) -> Result<Client> {
    super::servers::connect_first(config, |one| async move {
        let client = connect_one_server(&one).await?;
        if one.target_session_attrs != TargetSessionAttrs::Any {
            let asked = |e| {
                from_tokio_postgres(e, Activity::Command, "cannot ask the server whether it is a standby")
            };
            let row = client
                .query_one(
                    "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only') = 'on'",
                    &[],
                )
                .await
                .map_err(asked)?;
            let role = ServerRole {
                in_recovery: row.try_get(0).map_err(asked)?,
                read_only: row.try_get(1).map_err(asked)?,
            };
            super::servers::require(&one, role)?;
        }
        Ok(client)
    })
    .await
}

/// [`connect_sql`] to the one server `config` names first.
async fn connect_one_server(config: &ConnectionConfig) -> Result<Client> {
    let pg = tokio_postgres_config(config);
    let target = describe_target(config);
    transport::connect(config, |socket| {
        let pg = &pg;
        let target = &target;
        async move {
            // Same checks as the replication session, before anything is sent.
            let end_point = channel_binding::end_point(config, &socket)?;
            let binding_possible = end_point.is_some();
            let mut pg = pg.clone();
            if socket.is_tls() {
                pg.ssl_mode(PgSslMode::Require)
                    .ssl_negotiation(SslNegotiation::Direct);
            }
            let scram = Arc::new(AtomicBool::new(false));
            let tls = AlreadyNegotiated {
                end_point,
                scram: scram.clone(),
            };
            let connected = pg.connect_raw(socket, tls).await;
            let (client, connection) = connected.map_err(|e| {
                let scram = scram.load(Ordering::Relaxed);
                connect_error(e, config, target, binding_possible && scram, scram)
            })?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "SQL connection ended");
                }
            });
            client
                .batch_execute(&super::session::late_settings_query())
                .await
                .map_err(|e| {
                    from_tokio_postgres(e, Activity::Command, "cannot pin the session's timeouts")
                })?;
            Ok::<_, Error>(client)
        }
    })
    .await
}

/// A failure of tokio-postgres' startup and authentication as a [`cdc_core::Error`],
/// with the channel binding failures worded like the replication session's. `bound`: a
/// SCRAM exchange started in which tokio-postgres bound or said it could have (it had
/// binding data); `scram`: a SCRAM exchange started.
fn connect_error(
    e: tokio_postgres::Error,
    config: &ConnectionConfig,
    target: &str,
    bound: bool,
    scram: bool,
) -> Error {
    // tokio-postgres reports a login that channel_binding=require does not allow as an
    // authentication error (before sending a password) whose cause says "channel
    // binding"; no other error it makes without the server's word mentions it.
    let unmet_require = config.tls.channel_binding == ChannelBinding::Require
        && e.as_db_error().is_none()
        && std::error::Error::source(&e).is_some_and(|c| c.to_string().contains("channel binding"));
    let err = from_tokio_postgres(
        e,
        Activity::Connect,
        &format!(
            "the server at {target} rejected the connection of user {:?} to database {:?}",
            config.user, config.dbname
        ),
    );
    if unmet_require {
        return channel_binding::require_unmet(target, scram, err);
    }
    if bound {
        // The server's own words are the cause; the generic advice for a rejected login
        // (check the password) would mislead.
        if let Some(server) = err
            .server_error()
            .filter(|s| channel_binding::is_refusal(s))
        {
            return channel_binding::refused(target, server.clone());
        }
    }
    err
}

/// Hands tokio-postgres a socket on which our transport already negotiated TLS, together
/// with that connection's `tls-server-end-point` data (or `None`: no TLS, or
/// `channel_binding=disable`).
///
/// tokio-postgres takes channel binding data only from the stream a [`TlsConnect`]
/// returns. So a TLS socket goes in with `ssl_mode = Require` and `ssl_negotiation =
/// Direct` — no SSLRequest of its own; ours was answered before the handshake — and
/// `connect` returns it unchanged. A plaintext socket goes in with `ssl_mode = Disable`,
/// and `connect` is never called.
///
/// `scram` is set when tokio-postgres asks for the binding data, which it does exactly
/// when the server asked for SASL: that tells its errors apart.
#[derive(Debug)]
struct AlreadyNegotiated {
    end_point: Option<Vec<u8>>,
    scram: Arc<AtomicBool>,
}

impl TlsConnect<Socket> for AlreadyNegotiated {
    type Stream = NegotiatedSocket;
    type Error = Infallible;
    type Future = Ready<std::result::Result<NegotiatedSocket, Infallible>>;

    fn connect(self, socket: Socket) -> Self::Future {
        ready(Ok(NegotiatedSocket {
            socket,
            end_point: self.end_point,
            scram: self.scram,
        }))
    }
}

/// Our TLS socket as tokio-postgres' [`TlsStream`]: the bytes pass through; the channel
/// binding data is what [`channel_binding::end_point`] computed.
#[derive(Debug)]
struct NegotiatedSocket {
    socket: Socket,
    end_point: Option<Vec<u8>>,
    scram: Arc<AtomicBool>,
}

impl TlsStream for NegotiatedSocket {
    fn channel_binding(&self) -> TlsChannelBinding {
        self.scram.store(true, Ordering::Relaxed);
        match &self.end_point {
            Some(end_point) => TlsChannelBinding::tls_server_end_point(end_point.clone()),
            None => TlsChannelBinding::none(),
        }
    }
}

impl AsyncRead for NegotiatedSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_read(cx, buf)
    }
}

impl AsyncWrite for NegotiatedSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}
