//! Frame-level steps shared by our two kinds of server session — the simple-query session
//! (`wire.rs`) and the CopyBoth replication stream (`stream.rs`) — so neither reaches into
//! the other: logging a NoticeResponse, and waiting for the server to hang up after
//! Terminate.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::server_error_from_fields;
use super::transport::Socket;

/// How long a closing session waits for the server to hang up.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// After Terminate: reads (and discards) until the server closes the connection, so that
/// when this returns the walsender has exited and released the slot; gives up after
/// [`CLOSE_WAIT`].
pub(super) async fn drain_until_closed(socket: &mut Socket, buf: &mut BytesMut) {
    let drain = async {
        loop {
            buf.clear();
            buf.reserve(64 * 1024);
            match socket.read_buf(buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_WAIT, drain).await;
    let _ = socket.shutdown().await;
}

/// Logs a NoticeResponse.
pub(super) fn log_notice(fields: postgres_protocol::message::backend::ErrorFields<'_>) {
    let notice = server_error_from_fields(fields);
    tracing::info!(code = %notice.code, detail = ?notice.detail, "server notice: {}", notice.message);
}
