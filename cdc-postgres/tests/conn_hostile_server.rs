//! Our replication connection against a deliberately hostile server: a small in-test
//! server on a TCP socket that speaks the protocol just far enough (startup packet,
//! AuthenticationOk, ReadyForQuery, answers to the few commands the client runs) and then
//! misbehaves. Every case must end in a clear error within a bounded time — never a
//! panic, a hang, or memory allocated on the strength of an announced length.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use cdc_core::{Error, ErrorKind, Lsn};
use cdc_postgres::conn::{
    ConnectionConfig, PgOutputOptions, ReplicationConnection, ReplicationStream, StreamOptions,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous: every case ends in well under a second when it works.
const BOUND: Duration = Duration::from_secs(20);

/// Encodes one backend message.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&(u32::try_from(body.len()).unwrap() + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn auth_ok() -> Vec<u8> {
    message(b'R', &0i32.to_be_bytes())
}

fn parameter(name: &str, value: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    body.extend_from_slice(value.as_bytes());
    body.push(0);
    message(b'S', &body)
}

fn ready() -> Vec<u8> {
    message(b'Z', b"I")
}

fn command_complete(tag: &str) -> Vec<u8> {
    let mut body = tag.as_bytes().to_vec();
    body.push(0);
    message(b'C', &body)
}

fn notice() -> Vec<u8> {
    message(b'N', b"SNOTICE\0C00000\0Mhello again\0\0")
}

/// A one-column text result, as `SHOW` answers.
fn show_result(name: &str, value: &str) -> Vec<u8> {
    let mut row_description = BytesMut::new();
    row_description.put_i16(1);
    row_description.put_slice(name.as_bytes());
    row_description.put_u8(0);
    row_description.put_i32(0); // table oid
    row_description.put_i16(0); // column number
    row_description.put_i32(25); // text
    row_description.put_i16(-1);
    row_description.put_i32(-1);
    row_description.put_i16(0); // text format
    let mut data_row = BytesMut::new();
    data_row.put_i16(1);
    data_row.put_i32(i32::try_from(value.len()).unwrap());
    data_row.put_slice(value.as_bytes());
    let mut out = message(b'T', &row_description);
    out.extend(message(b'D', &data_row));
    out.extend(command_complete("SHOW"));
    out
}

/// Deterministic pseudo-random bytes (xorshift64*), so that a failure can be replayed.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.max(1);
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// The server side of one connection.
struct Peer {
    socket: TcpStream,
    buf: BytesMut,
}

impl Peer {
    /// Reads the startup packet (answering an SSLRequest with `N` first).
    async fn startup(&mut self) {
        loop {
            let len = self.read_exact_len(4).await;
            let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
            let body = self.read_exact_len(len - 4).await;
            let code = u32::from_be_bytes(body[..4].try_into().unwrap());
            if code == 80_877_103 {
                self.socket.write_all(b"N").await.unwrap();
                continue;
            }
            assert_eq!(code, 196_608, "protocol 3.0 startup");
            return;
        }
    }

    /// Reads one frontend message; `None` once the client hung up.
    async fn frontend(&mut self) -> Option<(u8, Vec<u8>)> {
        let header = self.try_read_exact_len(5).await?;
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let body = self.try_read_exact_len(len - 4).await?;
        Some((header[0], body))
    }

    /// Answers the client's queries the way a server would, until `START_REPLICATION`
    /// (answered with CopyBothResponse) or the first query for which `hostile` returns
    /// `true` (it then owns the connection).
    async fn serve_queries(&mut self, mut hostile: impl FnMut(&str) -> bool) -> String {
        while let Some((tag, body)) = self.frontend().await {
            if tag != b'Q' {
                continue;
            }
            let sql = String::from_utf8_lossy(&body)
                .trim_end_matches('\0')
                .to_owned();
            if hostile(&sql) {
                return sql;
            }
            if sql.starts_with("START_REPLICATION") {
                let mut body = vec![0u8];
                body.extend_from_slice(&0i16.to_be_bytes());
                self.send(&message(b'W', &body)).await;
                return sql;
            }
            let mut answer = if let Some(name) = sql.strip_prefix("SHOW ") {
                let name = name.trim_matches('"');
                let value = if name == "wal_sender_timeout" {
                    "60s"
                } else {
                    "x"
                };
                show_result(name, value)
            } else {
                command_complete("SET")
            };
            answer.extend(ready());
            self.send(&answer).await;
        }
        panic!("the client hung up before the hostile part");
    }

    /// A normal start: AuthenticationOk, parameters, key data, ReadyForQuery.
    async fn accept_login(&mut self) {
        let mut out = auth_ok();
        out.extend(parameter("server_version", "16.4"));
        out.extend(parameter("server_encoding", "UTF8"));
        out.extend(message(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]));
        out.extend(ready());
        self.send(&out).await;
    }

    async fn send(&mut self, bytes: &[u8]) {
        // The client may have given up already; that is fine.
        let _ = self.socket.write_all(bytes).await;
    }

    /// Keeps the connection open (and drains what the client sends) until it hangs up.
    async fn linger(&mut self) {
        let mut sink = [0u8; 4096];
        while matches!(self.socket.read(&mut sink).await, Ok(n) if n > 0) {}
    }

    async fn read_exact_len(&mut self, len: usize) -> Vec<u8> {
        self.try_read_exact_len(len)
            .await
            .expect("client hung up early")
    }

    async fn try_read_exact_len(&mut self, len: usize) -> Option<Vec<u8>> {
        while self.buf.len() < len {
            match self.socket.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
        Some(self.buf.split_to(len).to_vec())
    }
}

/// Starts a one-connection server running `script`; returns the client's config.
async fn hostile<F, Fut>(script: F) -> ConnectionConfig
where
    F: FnOnce(Peer) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        script(Peer {
            socket,
            buf: BytesMut::new(),
        })
        .await;
    });
    ConnectionConfig::parse(&format!(
        "host=127.0.0.1 port={port} user=cdc dbname=postgres sslmode=disable"
    ))
    .unwrap()
}

/// Connects, bounded by [`BOUND`]; returns the client's error.
async fn connect_error(config: &ConnectionConfig) -> Error {
    match tokio::time::timeout(BOUND, ReplicationConnection::connect(config)).await {
        Err(_) => panic!("the client hung (no error within {BOUND:?})"),
        Ok(Ok(_)) => panic!("the client accepted a hostile server"),
        Ok(Err(e)) => e,
    }
}

/// Connects and starts a stream on a server that behaves until START_REPLICATION.
async fn start_stream(config: &ConnectionConfig, options: StreamOptions) -> ReplicationStream {
    let start = async {
        let repl = ReplicationConnection::connect(config).await.unwrap();
        repl.start_replication("s", Lsn(0), &PgOutputOptions::new(["p"]), options)
            .await
            .unwrap()
    };
    tokio::time::timeout(BOUND, start)
        .await
        .expect("the stream starts")
}

/// Reads the stream until it fails, bounded by [`BOUND`]; returns the error.
async fn stream_error(mut stream: ReplicationStream) -> Error {
    let read = async {
        loop {
            match stream.next_message().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the stream ended cleanly on garbage"),
                Err(e) => return e,
            }
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .unwrap_or_else(|_| panic!("the stream hung (no error within {BOUND:?})"))
}

/// Named `conn` so that `cargo test -p cdc-postgres conn` selects these tests.
mod conn {
    use super::*;

    #[tokio::test]
    async fn an_oversized_length_before_authentication_is_a_protocol_error() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            // An "authentication request" of 2 GiB, then nothing more.
            peer.send(&[b'R', 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]).await;
            peer.linger().await;
        })
        .await;
        let error = connect_error(&config).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        let text = error.to_string();
        assert!(text.contains("Authentication"), "names the type: {text}");
        assert!(text.contains("2147483647"), "names the length: {text}");
        assert!(text.contains("before authentication"), "{text}");
    }

    #[tokio::test]
    async fn an_error_response_before_authentication_is_capped_too() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            // 40 kB "error": libpq's limit before authentication is 30000.
            let mut body = b"SFATAL\0C28000\0M".to_vec();
            body.extend(std::iter::repeat_n(b'x', 40_000));
            body.extend_from_slice(b"\0\0");
            peer.send(&message(b'E', &body)).await;
            peer.linger().await;
        })
        .await;
        let error = connect_error(&config).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        assert!(error.to_string().contains("ErrorResponse"), "{error}");
    }

    #[tokio::test]
    async fn a_truncated_message_then_eof_is_a_transient_error() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            let mut out = auth_ok();
            let status = parameter("server_version", "16.4");
            out.extend_from_slice(&status[..status.len() - 3]);
            peer.send(&out).await;
            // Dropping the socket: EOF in the middle of a message.
        })
        .await;
        let error = connect_error(&config).await;
        assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
        assert!(
            error.to_string().contains("closed the connection"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn garbage_after_authentication_is_a_protocol_error() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            peer.accept_login().await;
            peer.serve_queries(|_| true).await;
            // 0xff tag, length 0xffffffff: nothing the client should wait for.
            peer.send(&[0xff; 64]).await;
            peer.linger().await;
        })
        .await;
        let error = connect_error(&config).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        assert!(error.to_string().contains("4294967295"), "{error}");
    }

    #[tokio::test]
    async fn an_oversized_short_message_after_authentication_is_a_protocol_error() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            peer.accept_login().await;
            peer.serve_queries(|_| true).await;
            // A CommandComplete of 100 kB (only the long types may exceed 30000 bytes).
            let mut body = vec![b'x'; 100_000];
            body.push(0);
            peer.send(&message(b'C', &body)).await;
            peer.linger().await;
        })
        .await;
        let error = connect_error(&config).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        let text = error.to_string();
        assert!(text.contains("CommandComplete"), "{text}");
        assert!(text.contains("100005"), "{text}");
    }

    #[tokio::test]
    async fn never_ending_notices_during_a_command_end_the_session() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            peer.accept_login().await;
            peer.serve_queries(|_| true).await;
            let batch: Vec<u8> = std::iter::repeat_n(notice(), 100).flatten().collect();
            loop {
                if peer.socket.write_all(&batch).await.is_err() {
                    return;
                }
            }
        })
        .await;
        let error = connect_error(&config).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        assert!(
            error.to_string().contains("NoticeResponses in a row"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn never_ending_notices_in_the_stream_end_it() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            peer.accept_login().await;
            peer.serve_queries(|_| false).await;
            let batch: Vec<u8> = std::iter::repeat_n(notice(), 100).flatten().collect();
            loop {
                if peer.socket.write_all(&batch).await.is_err() {
                    return;
                }
            }
        })
        .await;
        let stream = start_stream(&config, StreamOptions::default()).await;
        let error = stream_error(stream).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        assert!(
            error.to_string().contains("NoticeResponses in a row"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_oversized_copy_data_in_the_stream_is_a_protocol_error() {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            peer.accept_login().await;
            peer.serve_queries(|_| false).await;
            // 4 GiB of CopyData announced, a few bytes sent.
            peer.send(&[b'd', 0xff, 0xff, 0xff, 0xff, b'w', 0, 0]).await;
            peer.linger().await;
        })
        .await;
        let stream = start_stream(&config, StreamOptions::default()).await;
        let error = stream_error(stream).await;
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        let text = error.to_string();
        assert!(text.contains("CopyData"), "{text}");
        assert!(text.contains("4294967295"), "{text}");
    }

    #[tokio::test]
    async fn random_bytes_in_the_stream_end_it_with_an_error() {
        for seed in 1..=16u64 {
            let config = hostile(move |mut peer| async move {
                peer.startup().await;
                peer.accept_login().await;
                peer.serve_queries(|_| false).await;
                peer.send(&random_bytes(seed, 256 * 1024)).await;
                // Then silence with the connection open: whatever the garbage announced
                // never completes.
                peer.linger().await;
            })
            .await;
            let options = {
                let mut options = StreamOptions::default();
                options.receive_timeout = Some(Duration::from_secs(2));
                options.follow_wal_sender_timeout = false;
                options
            };
            let stream = start_stream(&config, options).await;
            let error = stream_error(stream).await;
            assert!(
                matches!(error.kind(), ErrorKind::Protocol | ErrorKind::Transient),
                "seed {seed}: {error}"
            );
        }
    }
}

/// The snapshot's COPY reads (our own protocol code, rows handed on straight off the read
/// buffer) against a server that splits, garbles or breaks off the COPY data.
mod copy {
    use std::sync::Arc;

    use cdc_core::{ColumnSchema, ColumnType, ReplicaIdentity, Row, TableName, TableSchema, Value};
    use cdc_postgres::catalog::CatalogTable;
    use cdc_postgres::pgoutput::types::TypeInfo;
    use cdc_postgres::snapshot::copy::{CopyMessage, WorkItem, spawn_workers};

    use super::*;

    /// `public.t (id int4)`.
    fn table() -> Arc<Vec<CatalogTable>> {
        let name = TableName::parse("public.t").unwrap();
        Arc::new(vec![CatalogTable {
            schema: Arc::new(TableSchema {
                name,
                relation_id: 1,
                columns: vec![ColumnSchema {
                    name: "id".into(),
                    column_type: ColumnType {
                        oid: 23,
                        modifier: -1,
                        name: Some("pg_catalog.int4".into()),
                        definition: Default::default(),
                    },
                    nullable: false,
                    part_of_key: true,
                    generated: false,
                }],
                replica_identity: ReplicaIdentity::Default,
                primary_key: vec!["id".into()],
            }),
            column_types: vec![TypeInfo::builtin(23)],
            estimated_rows: 0,
            pages: 0,
            partitions: Vec::new(),
            key_collations: Vec::new(),
            key_collation_names: Vec::new(),
        }])
    }

    /// Binary COPY data of `ids` (one int4 column), header and trailer included.
    fn copy_data(ids: &[i32]) -> Vec<u8> {
        let mut out = b"PGCOPY\n\xff\r\n\0".to_vec();
        out.extend_from_slice(&[0; 8]);
        for id in ids {
            out.extend_from_slice(&1i16.to_be_bytes());
            out.extend_from_slice(&4i32.to_be_bytes());
            out.extend_from_slice(&id.to_be_bytes());
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    /// CopyOutResponse: binary, one binary column.
    fn copy_out_response() -> Vec<u8> {
        message(b'H', &[1, 0, 1, 0, 1])
    }

    /// A whole COPY response: CopyOutResponse, `data` in one CopyData message, CopyDone,
    /// `COPY rows` and ReadyForQuery.
    fn whole_copy(data: &[u8], rows: usize) -> Vec<u8> {
        let mut out = copy_out_response();
        out.extend(message(b'd', data));
        out.extend(copy_end(rows));
        out
    }

    /// CopyDone, `COPY rows` and ReadyForQuery.
    fn copy_end(rows: usize) -> Vec<u8> {
        let mut out = message(b'c', &[]);
        out.extend(command_complete(&format!("COPY {rows}")));
        out.extend(ready());
        out
    }

    /// `decoders` for a copy whose rows go out undecoded, in blocks (as for a sink that
    /// takes row blocks); they are decoded here.
    const BLOCKS: usize = 0;

    /// Starts one copy worker of `public.t`, its rows decoded by `decoders` tasks (or left
    /// in blocks, [`BLOCKS`]) and reported through a channel of `capacity` messages,
    /// against a server running `script` once the COPY was asked for.
    async fn start_copy<F, Fut>(
        decoders: usize,
        capacity: usize,
        script: F,
    ) -> (
        tokio::sync::mpsc::Receiver<CopyMessage>,
        tokio::task::JoinSet<()>,
    )
    where
        F: FnOnce(Peer) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let config = hostile(|mut peer| async move {
            peer.startup().await;
            peer.accept_login().await;
            peer.serve_queries(|sql| sql.starts_with("COPY")).await;
            script(peer).await;
        })
        .await;
        let item = WorkItem {
            table: 0,
            relation: TableName::parse("public.t").unwrap(),
            pages: None,
            decoders: decoders.max(1),
        };
        spawn_workers(
            config,
            "00000003-1".into(),
            table(),
            vec![item],
            1,
            capacity,
            decoders == BLOCKS,
        )
    }

    /// Copies `public.t` with one worker from a server running `script` once the COPY
    /// was asked for, its rows decoded by `decoders` tasks; the rows, or the error the
    /// worker reported. Bounded by [`BOUND`].
    async fn copy_from<F, Fut>(decoders: usize, script: F) -> Result<Vec<Row>, Error>
    where
        F: FnOnce(Peer) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (mut rx, _workers) = start_copy(decoders, 4, script).await;
        let read = async {
            let mut rows = Vec::new();
            while let Some(message) = rx.recv().await {
                match message {
                    CopyMessage::Rows { rows: more, .. } => rows.extend(more),
                    CopyMessage::Block { rows: block, .. } => {
                        for row in 0..block.len() {
                            rows.push(block.decode_row(row)?);
                        }
                    }
                    CopyMessage::ItemDone { .. } => return Ok(rows),
                    CopyMessage::Failed(e) => return Err(e),
                }
            }
            panic!("the copy worker ended without a word");
        };
        tokio::time::timeout(BOUND, read)
            .await
            .unwrap_or_else(|_| panic!("the copy hung (nothing within {BOUND:?})"))
    }

    #[tokio::test]
    async fn copy_data_sent_a_byte_at_a_time_in_odd_messages_is_read_whole() {
        // Also decoded on two tasks, in segments of 512 rows, and left in blocks.
        for (decoders, count) in [(1, 50), (2, 1500), (BLOCKS, 1500)] {
            copy_read_whole_in_odd_messages(decoders, count).await;
        }
    }

    async fn copy_read_whole_in_odd_messages(decoders: usize, count: i32) {
        let ids: Vec<i32> = (1..=count).map(|i| i * 7 - 300).collect();
        let mut expected = ids.clone();
        expected.sort_unstable();
        let rows = copy_from(decoders, move |mut peer| async move {
            let data = copy_data(&ids);
            let mut out = copy_out_response();
            // Messages that cut rows (and the header) anywhere, of 1 to 13 bytes.
            let mut at = 0;
            for size in (1..=13).cycle() {
                if at >= data.len() {
                    break;
                }
                let end = (at + size).min(data.len());
                out.extend(message(b'd', &data[at..end]));
                at = end;
            }
            out.extend(copy_end(count as usize));
            // Every byte in a write of its own, a moment apart: the client's reads end
            // inside messages, at every offset (for the first few thousand bytes).
            for (at, byte) in out.iter().enumerate() {
                peer.send(&[*byte]).await;
                if at < 4000 {
                    tokio::time::sleep(Duration::from_micros(300)).await;
                }
            }
            peer.serve_queries(|_| false).await;
        })
        .await
        .unwrap();
        let mut got: Vec<i32> = rows
            .iter()
            .map(|row| match row.first() {
                Some(Value::Int4(v)) => *v,
                other => panic!("not an int4: {other:?}"),
            })
            .collect();
        // Decoder tasks hand their segments on in whatever order they finish.
        got.sort_unstable();
        assert_eq!(got, expected, "decoded by {decoders} task(s)");
    }

    #[tokio::test]
    async fn a_value_a_decoder_task_cannot_decode_fails_the_copy() {
        for decoders in [BLOCKS, 1, 2] {
            let error = copy_from(decoders, |mut peer| async move {
                let mut data = copy_data(&(1..=1000).collect::<Vec<_>>());
                // Row 700's int4 with a 2-byte value (and the row two bytes shorter):
                // well framed, but not an int4.
                let row = 19 + 699 * 10;
                data.splice(row + 2..row + 10, [0, 0, 0, 2, 0, 7]);
                peer.send(&whole_copy(&data, 1000)).await;
                peer.serve_queries(|_| false).await;
            })
            .await
            .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
            let text = error.to_string();
            assert!(text.contains("\"id\""), "names the column: {text}");
            assert!(text.contains("public.t"), "names the table: {text}");
        }
    }

    #[tokio::test]
    async fn a_copy_data_length_over_the_cap_is_a_protocol_error() {
        let error = copy_from(1, |mut peer| async move {
            let mut out = copy_out_response();
            // A 2 GiB CopyData announced, then silence with the connection open.
            out.extend([b'd', 0x7f, 0xff, 0xff, 0xff, 0, 0]);
            peer.send(&out).await;
            peer.linger().await;
        })
        .await
        .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
        let text = error.to_string();
        assert!(text.contains("CopyData"), "names the type: {text}");
        assert!(text.contains("2147483647"), "names the length: {text}");
    }

    #[tokio::test]
    async fn an_error_in_the_middle_of_the_copy_is_the_servers_error() {
        for decoders in [BLOCKS, 1, 2] {
            let error = copy_from(decoders, |mut peer| async move {
                let mut out = copy_out_response();
                let data = copy_data(&[1, 2, 3]);
                out.extend(message(b'd', &data[..30]));
                out.extend(message(
                    b'E',
                    b"SERROR\0C57014\0Mcanceling statement due to user request\0\0",
                ));
                out.extend(ready());
                peer.send(&out).await;
                peer.serve_queries(|_| false).await;
            })
            .await
            .unwrap_err();
            let server = error
                .server_error()
                .expect("the server's error is the source");
            assert_eq!(server.code, "57014", "{error}");
            assert!(error.to_string().contains("COPY of public.t"), "{error}");
        }
    }

    #[tokio::test]
    async fn copy_data_that_ends_without_its_trailer_is_an_error() {
        for decoders in [BLOCKS, 1, 2] {
            let error = copy_from(decoders, |mut peer| async move {
                let data = copy_data(&[1, 2, 3]);
                // The rows, but not the trailer, then a clean end of the COPY.
                peer.send(&whole_copy(&data[..data.len() - 2], 3)).await;
                peer.serve_queries(|_| false).await;
            })
            .await
            .unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Protocol, "{error}");
            assert!(error.to_string().contains("trailer"), "{error}");
        }
    }

    #[tokio::test]
    async fn a_consumer_that_stops_taking_rows_ends_the_copy_worker() {
        for decoders in [BLOCKS, 1, 2] {
            let (mut rx, mut workers) = start_copy(decoders, 1, |mut peer| async move {
                let data = copy_data(&(1..=20_000).collect::<Vec<_>>());
                peer.send(&whole_copy(&data, 20_000)).await;
                peer.linger().await;
            })
            .await;
            let first = tokio::time::timeout(BOUND, rx.recv()).await.unwrap();
            assert!(
                matches!(
                    first,
                    Some(CopyMessage::Rows { .. } | CopyMessage::Block { .. })
                ),
                "{first:?}"
            );
            // Nobody takes the rest: the worker (and its decoding tasks) must end, not
            // wait for room in the channel forever.
            drop(rx);
            let ended = tokio::time::timeout(BOUND, async {
                while workers.join_next().await.is_some() {}
            })
            .await;
            assert!(ended.is_ok(), "decoders {decoders}: the worker did not end");
        }
    }
}
