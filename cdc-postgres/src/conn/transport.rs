//! The byte stream to the server: TCP or Unix socket, with TLS negotiated per `sslmode`
//! exactly as libpq does, including `allow`'s and `prefer`'s second attempt. Both the
//! replication and the SQL connection are established here, so they share every setting.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use cdc_core::{Error, Result};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::config::{ConnectionConfig, Host, SslMode};
use super::error::{io_error, is_server_rejection};
use super::tls;

/// A connected socket, plain or TLS.
pub(crate) enum Socket {
    /// Plaintext TCP.
    Tcp(TcpStream),
    /// Unix socket (never TLS).
    Unix(UnixStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl fmt::Debug for Socket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Socket::Tcp(_) => "Socket::Tcp",
            Socket::Unix(_) => "Socket::Unix",
            Socket::Tls(_) => "Socket::Tls",
        })
    }
}

impl Socket {
    /// Whether the bytes are encrypted.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Socket::Tls(_))
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Socket::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Socket::Tcp(s) => s.is_write_vectored(),
            Socket::Unix(s) => s.is_write_vectored(),
            Socket::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_flush(cx),
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// `host:port`, or the socket file, for messages.
pub(crate) fn describe_target(config: &ConnectionConfig) -> String {
    match &config.host {
        Host::Tcp(name) if name.contains(':') => format!("[{name}]:{}", config.port),
        Host::Tcp(name) => format!("{name}:{}", config.port),
        Host::Unix(dir) => format!(
            "{}",
            dir.join(format!(".s.PGSQL.{}", config.port)).display()
        ),
    }
}

/// Establishes the transport and runs `startup` (protocol startup and authentication) on
/// it, retrying with the other transport where `sslmode` says so, all within
/// `connect_timeout`.
///
/// - Unix socket or `disable`: plaintext only.
/// - `allow`: plaintext; if the server rejects the connection (an ErrorResponse during
///   startup), a new connection with TLS.
/// - `prefer`: TLS if the server accepts the SSLRequest, else plaintext on the same socket;
///   if the TLS handshake fails or the server rejects the TLS connection, a new plaintext
///   connection.
/// - `require`, `verify-ca`, `verify-full`: TLS or an error.
pub(crate) async fn connect<T, F, Fut>(config: &ConnectionConfig, startup: F) -> Result<T>
where
    F: FnMut(Socket) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let attempt = connect_with_fallback(config, startup);
    match config.connect_timeout {
        None => attempt.await,
        Some(limit) => tokio::time::timeout(limit, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(Error::transient(format!(
                    "connecting to {} timed out after {}s (connect_timeout)",
                    describe_target(config),
                    limit.as_secs()
                )))
            }),
    }
}

async fn connect_with_fallback<T, F, Fut>(config: &ConnectionConfig, mut startup: F) -> Result<T>
where
    F: FnMut(Socket) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if let Host::Unix(dir) = &config.host {
        // As libpq: TLS is never requested over a Unix socket.
        let path = dir.join(format!(".s.PGSQL.{}", config.port));
        let socket = UnixStream::connect(&path).await.map_err(|e| {
            io_error(
                e,
                &format!("cannot connect to the Unix socket {}", path.display()),
            )
        })?;
        return startup(Socket::Unix(socket)).await;
    }
    let mode = config.tls.mode;
    match mode {
        SslMode::Disable => startup(Socket::Tcp(open_tcp(config).await?)).await,
        SslMode::Allow => {
            let first = startup(Socket::Tcp(open_tcp(config).await?)).await;
            match first {
                Err(rejected) if is_server_rejection(&rejected) => {
                    tracing::debug!(error = %rejected, "plaintext connection rejected; retrying with TLS (sslmode=allow)");
                    let retry = match negotiate_tls(open_tcp(config).await?, config).await? {
                        Negotiated::Tls(socket) => startup(socket).await,
                        Negotiated::Refused(_) => Err(Error::config(
                            "the server rejected the plaintext connection and does not support TLS",
                        )),
                        Negotiated::HandshakeFailed(e) => Err(e),
                    };
                    retry.map_err(|e| second_attempt_failed(e, &rejected, "with TLS"))
                }
                other => other,
            }
        }
        SslMode::Prefer => match negotiate_tls(open_tcp(config).await?, config).await? {
            Negotiated::Refused(tcp) => startup(Socket::Tcp(tcp)).await,
            Negotiated::Tls(socket) => match startup(socket).await {
                Err(rejected) if is_server_rejection(&rejected) => {
                    tracing::debug!(error = %rejected, "TLS connection rejected; retrying without TLS (sslmode=prefer)");
                    startup(Socket::Tcp(open_tcp(config).await?))
                        .await
                        .map_err(|e| second_attempt_failed(e, &rejected, "without TLS"))
                }
                other => other,
            },
            Negotiated::HandshakeFailed(failed) => {
                tracing::debug!(error = %failed, "TLS handshake failed; retrying without TLS (sslmode=prefer)");
                startup(Socket::Tcp(open_tcp(config).await?))
                    .await
                    .map_err(|e| second_attempt_failed(e, &failed, "without TLS"))
            }
        },
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            match negotiate_tls(open_tcp(config).await?, config).await? {
                Negotiated::Tls(socket) => startup(socket).await,
                Negotiated::Refused(_) => Err(Error::config(format!(
                    "the server at {} does not support TLS, but sslmode={mode} requires it",
                    describe_target(config)
                ))),
                Negotiated::HandshakeFailed(e) => Err(e),
            }
        }
    }
}

/// The error of a retry, mentioning why the first attempt was abandoned; keeps the
/// retry's cause (and so its SQLSTATE).
fn second_attempt_failed(second: Error, first: &Error, how: &str) -> Error {
    let message = format!(
        "{} (after a first attempt failed and the connection was retried {how}: {first})",
        second.message()
    );
    Error::new(second.kind(), message).with_source(second)
}

/// Connects over TCP to `hostaddr`, or to each address `host` resolves to in turn.
async fn open_tcp(config: &ConnectionConfig) -> Result<TcpStream> {
    let target = describe_target(config);
    let addrs: Vec<SocketAddr> = match (config.hostaddr, &config.host) {
        (Some(ip), _) => vec![SocketAddr::new(ip, config.port)],
        (None, Host::Tcp(name)) => tokio::net::lookup_host((name.as_str(), config.port))
            .await
            .map_err(|e| io_error(e, &format!("cannot resolve host name of {target}")))?
            .collect(),
        (None, Host::Unix(_)) => {
            return Err(Error::config(
                "a Unix socket host cannot be reached over TCP",
            ));
        }
    };
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                // Small protocol messages (status updates) must not wait for Nagle.
                let _ = stream.set_nodelay(true);
                // A vanished peer host ends the connection in about a minute (see
                // `tcp_keepalive`); without it the connection still works.
                if let Err(e) = super::tcp_keepalive::configure(&stream) {
                    tracing::debug!(error = %e, "cannot set TCP keepalive options");
                }
                return Ok(stream);
            }
            Err(e) => last = Some((addr, e)),
        }
    }
    Err(match last {
        Some((addr, e)) => io_error(e, &format!("cannot connect to {target} (address {addr})")),
        None => Error::transient(format!("host name of {target} resolved to no address")),
    })
}

/// What came of an SSLRequest.
enum Negotiated {
    /// TLS is up.
    Tls(Socket),
    /// The server answered `N`: the socket is still usable for plaintext.
    Refused(TcpStream),
    /// The server agreed, but the handshake failed (e.g. certificate verification); the
    /// socket is gone.
    HandshakeFailed(Error),
}

/// Sends an SSLRequest and, if the server agrees, performs the TLS handshake.
async fn negotiate_tls(mut tcp: TcpStream, config: &ConnectionConfig) -> Result<Negotiated> {
    let target = describe_target(config);
    let mut request = BytesMut::with_capacity(8);
    frontend::ssl_request(&mut request);
    tcp.write_all(&request)
        .await
        .map_err(|e| io_error(e, &format!("sending SSLRequest to {target}")))?;
    // Read exactly one byte: anything the server sent after 'S' must come through TLS
    // (CVE-2021-23222).
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.map_err(|e| {
        io_error(
            e,
            &format!("reading the answer to SSLRequest from {target}"),
        )
    })?;
    match answer[0] {
        b'S' => {}
        b'N' => return Ok(Negotiated::Refused(tcp)),
        b'E' => {
            return Err(Error::protocol(format!(
                "{target} answered the SSLRequest with an error (a server older than PostgreSQL 7.0?)"
            )));
        }
        other => {
            return Err(Error::protocol(format!(
                "{target} answered the SSLRequest with unexpected byte {other:#04x}"
            )));
        }
    }
    let client_config = tls::client_config(&config.tls)?;
    let peer = tcp
        .peer_addr()
        .map_err(|e| io_error(e, &format!("reading the peer address of {target}")))?;
    let host_name = match &config.host {
        Host::Tcp(name) => name.as_str(),
        Host::Unix(_) => "localhost",
    };
    let server_name = tls::server_name(host_name, &config.tls, peer.ip())?;
    match TlsConnector::from(client_config)
        .connect(server_name, tcp)
        .await
    {
        Ok(stream) => Ok(Negotiated::Tls(Socket::Tls(Box::new(stream)))),
        Err(e) => Ok(Negotiated::HandshakeFailed(io_error(
            e,
            &format!(
                "TLS handshake with {target} failed (sslmode={})",
                config.tls.mode
            ),
        ))),
    }
}
