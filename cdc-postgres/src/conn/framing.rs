//! Frame-level steps shared by our two kinds of server session — the simple-query session
//! (`wire.rs`) and the CopyBoth replication stream (`stream.rs`) — so neither reaches into
//! the other: decoding a split frame with `postgres-protocol`, logging NoticeResponses
//! (with a cap on how many may come in a row), and waiting for the server to hang up after
//! Terminate. Splitting frames off the read buffer is `frame.rs`.

use std::time::Duration;

use bytes::BytesMut;
use cdc_core::{Error, Result};
use postgres_protocol::message::backend::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::server_error_from_fields;
use super::frame::{Frame, message_name};
use super::transport::Socket;

/// How many NoticeResponses a session accepts in a row, with no other message between
/// them. A notice is logged and dropped, so a flood costs no memory, but a server that
/// sends nothing else would keep the session busy forever; no command we run makes the
/// server send anywhere near this many.
pub(super) const MAX_CONSECUTIVE_NOTICES: u32 = 1000;

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
fn log_notice(fields: postgres_protocol::message::backend::ErrorFields<'_>) {
    let notice = server_error_from_fields(fields);
    tracing::info!(code = %notice.code, detail = ?notice.detail, "server notice: {}", notice.message);
}

/// Decodes a frame split off by `frame::split_frame` with `postgres-protocol` (which parses
/// from a `BytesMut` holding the whole message; the conversion copies only when the frame
/// still shares its memory with the read buffer, and this path never carries
/// replication data). An error names the message type.
pub(super) fn decode(frame: &Frame) -> Result<Message> {
    let mut raw = BytesMut::from(frame.raw().clone());
    let name = message_name(frame.tag());
    match Message::parse(&mut raw) {
        Ok(Some(message)) => Ok(message),
        // The frame is complete by construction; `None` would mean a parser disagreement.
        Ok(None) => Err(Error::protocol(format!("incomplete {name} message"))),
        Err(e) => Err(Error::protocol(format!("malformed {name} message: {e}"))),
    }
}

/// Counts NoticeResponses in a row (see [`MAX_CONSECUTIVE_NOTICES`]).
#[derive(Debug, Default)]
pub(super) struct NoticeRun {
    count: u32,
}

impl NoticeRun {
    /// Logs a NoticeResponse; a protocol error once more than [`MAX_CONSECUTIVE_NOTICES`]
    /// came in a row from the server at `target`.
    pub(super) fn on_notice(
        &mut self,
        fields: postgres_protocol::message::backend::ErrorFields<'_>,
        target: &str,
    ) -> Result<()> {
        self.count = self.count.saturating_add(1);
        if self.count > MAX_CONSECUTIVE_NOTICES {
            return Err(Error::protocol(format!(
                "the server at {target} sent more than {MAX_CONSECUTIVE_NOTICES} NoticeResponses in a row and nothing else; giving up on a misbehaving server"
            )));
        }
        log_notice(fields);
        Ok(())
    }

    /// Any other message ends the run.
    pub(super) fn reset(&mut self) {
        self.count = 0;
    }
}
