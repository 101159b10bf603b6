//! `--metrics-addr`: a small HTTP/1.1 endpoint serving `GET /metrics` (the OpenMetrics
//! text format Prometheus scrapes) and `GET /health` (200 while streaming, backfilling or
//! copying; 503 with the reason while reconnecting past the grace period or after a fatal
//! error). One request per connection; requests are read with a size cap and a deadline,
//! so a slow or hostile client costs one task for a few seconds at most.

use std::net::SocketAddr;
use std::time::Duration;

use cdc_postgres::metrics::StreamMetrics;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head read (a scrape's is a few hundred bytes).
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request and read the answer.
const CLIENT_DEADLINE: Duration = Duration::from_secs(5);

/// The running endpoint; stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port) and serves `metrics` there.
    pub async fn start(
        addr: SocketAddr,
        metrics: StreamMetrics,
        health_grace: Duration,
    ) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    // Out of file descriptors and the like: wait, do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        CLIENT_DEADLINE,
                        answer(socket, &metrics, health_grace),
                    )
                    .await;
                });
            }
        });
        Ok(MetricsServer { local_addr, task })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

async fn answer(
    mut socket: TcpStream,
    metrics: &StreamMetrics,
    health_grace: Duration,
) -> std::io::Result<()> {
    let mut request = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(buf.get(..n).unwrap_or_default());
        if request.len() > MAX_REQUEST {
            return respond(&mut socket, 431, "text/plain", "request too large\n").await;
        }
    }
    let head = String::from_utf8_lossy(&request);
    let mut words = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" {
        return respond(&mut socket, 405, "text/plain", "only GET\n").await;
    }
    match path.split('?').next().unwrap_or("") {
        "/metrics" => {
            let body = metrics.encode_text();
            respond(
                &mut socket,
                200,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &body,
            )
            .await
        }
        "/health" => {
            let health = metrics.health(health_grace);
            let status = if health.healthy { 200 } else { 503 };
            respond(
                &mut socket,
                status,
                "text/plain; charset=utf-8",
                &format!("{}\n", health.reason),
            )
            .await
        }
        _ => respond(&mut socket, 404, "text/plain", "try /metrics or /health\n").await,
    }
}

async fn respond(
    socket: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.shutdown().await
}
