//! Tests of the stream task against a scripted server on a socket pair: replies,
//! backpressure, coalescing, errors, end of stream, close.

use super::*;
use crate::conn::LocalBatching;
use bytes::Bytes;
use cdc_pgoutput::protocol::replication::{PrimaryKeepalive, XLogData};
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

/// The server side of a scripted stream.
struct FakeServer {
    socket: UnixStream,
    buf: BytesMut,
}

/// Appends one backend message (`tag`, length, `body`) to `out`.
fn push_frame(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
}

/// `message` as the CopyData frame a walsender sends.
fn copy_data_frame(message: &ServerMessage) -> Vec<u8> {
    let mut body = BytesMut::new();
    message.encode(&mut body);
    let mut frame = Vec::with_capacity(body.len() + 5);
    push_frame(&mut frame, b'd', &body);
    frame
}

impl FakeServer {
    async fn send(&mut self, message: ServerMessage) {
        self.socket
            .write_all(&copy_data_frame(&message))
            .await
            .unwrap();
    }

    async fn send_frame(&mut self, tag: u8, body: &[u8]) {
        let mut frame = Vec::new();
        push_frame(&mut frame, tag, body);
        self.socket.write_all(&frame).await.unwrap();
    }

    /// The next status update the client sent.
    async fn status(&mut self) -> StandbyStatusUpdate {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]])
                    as usize;
                if self.buf.len() > len {
                    let frame = self.buf.split_to(len + 1).freeze();
                    assert_eq!(frame[0], b'd', "unexpected frame {frame:?}");
                    match ClientMessage::decode(frame.slice(5..)).unwrap() {
                        ClientMessage::StandbyStatusUpdate(update) => return update,
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            let n = self.socket.read_buf(&mut self.buf).await.unwrap();
            assert!(n > 0, "client hung up");
        }
    }
}

fn keepalive(wal_end: u64, reply_requested: bool) -> ServerMessage {
    ServerMessage::PrimaryKeepalive(PrimaryKeepalive {
        wal_end: Lsn(wal_end),
        server_clock: 0,
        reply_requested,
    })
}

fn xlog(start: u64, payload: &[u8]) -> ServerMessage {
    ServerMessage::XLogData(XLogData {
        wal_start: Lsn(start),
        wal_end: Lsn(start),
        server_clock: 0,
        data: Bytes::copy_from_slice(payload),
    })
}

fn pair(options: StreamOptions) -> (ReplicationStream, FakeServer) {
    let (client, server) = UnixStream::pair().unwrap();
    let stream = ReplicationStream::spawn(
        Socket::Unix(client),
        BytesMut::new(),
        "test".into(),
        options,
    );
    (
        stream,
        FakeServer {
            socket: server,
            buf: BytesMut::new(),
        },
    )
}

fn quiet() -> StreamOptions {
    StreamOptions {
        status_interval: Duration::from_secs(3600),
        ..StreamOptions::default()
    }
}

#[tokio::test]
async fn a_reply_request_is_answered_with_the_owners_flush_position() {
    let (mut stream, mut server) = pair(quiet());
    // The timer's first tick: nothing acknowledged yet.
    let first = server.status().await;
    assert_eq!((first.flush, first.apply), (Lsn(0), Lsn(0)));
    server.send(xlog(500, b"B")).await;
    assert!(matches!(
        stream.next_message().await.unwrap(),
        Some(ServerMessage::XLogData(_))
    ));
    stream.set_flushed(Lsn(100));
    server.send(keepalive(900, true)).await;
    let reply = server.status().await;
    assert_eq!(
        reply.flush,
        Lsn(100),
        "flush is what the owner set, not what was received"
    );
    assert_eq!(reply.apply, Lsn(100));
    assert_eq!(reply.write, Lsn(500));
    assert!(!reply.reply_requested);
    assert_eq!(
        stream.next_message().await.unwrap(),
        Some(keepalive(900, true))
    );
}

#[tokio::test]
async fn status_updates_continue_while_the_consumer_does_not_read() {
    let options = StreamOptions {
        status_interval: Duration::from_millis(20),
        channel_capacity: 1,
        read_buffer_size: 8192,
        ..StreamOptions::default()
    };
    let (mut stream, mut server) = pair(options);
    let payload = vec![b'I'; 1000];
    let writer = tokio::spawn(async move {
        for i in 0..2000u64 {
            server.send(xlog(i + 1, &payload)).await;
        }
        server
    });
    // Nobody reads; the writer fills the socket and blocks, updates keep coming.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "backpressure reached the server");
    assert!(stream.received() < Lsn(2000));
    let before = stream.status_updates_sent();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(stream.status_updates_sent() >= before + 3);
    stream.set_flushed(Lsn(7));
    let mut seen = 0u64;
    while seen < 2000 {
        match stream.next_message().await.unwrap() {
            Some(ServerMessage::XLogData(x)) => {
                seen += 1;
                assert_eq!(x.wal_start, Lsn(seen), "in order, nothing lost");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let mut server = writer.await.unwrap();
    loop {
        if server.status().await.flush == Lsn(7) {
            break;
        }
    }
}

#[tokio::test]
async fn keepalives_do_not_fill_the_channel_of_an_idle_stream() {
    let options = StreamOptions {
        channel_capacity: 1,
        ..quiet()
    };
    let (mut stream, mut server) = pair(options);
    server.status().await;
    for i in 1..=50 {
        server.send(keepalive(i, false)).await;
    }
    server.send(keepalive(51, true)).await;
    // Still reading although nobody consumed: the request is answered.
    server.status().await;
    let mut received = Vec::new();
    while let Ok(Ok(Some(m))) =
        tokio::time::timeout(Duration::from_millis(100), stream.next_message()).await
    {
        received.push(m);
    }
    assert!(
        received.len() < 51,
        "keepalives were coalesced: {}",
        received.len()
    );
    assert_eq!(received.last(), Some(&keepalive(51, true)));
}

#[tokio::test]
async fn a_server_error_ends_the_stream_with_its_sqlstate() {
    let (mut stream, mut server) = pair(quiet());
    server.send(xlog(1, b"B")).await;
    server
        .send_frame(
            b'E',
            b"SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0",
        )
        .await;
    assert!(stream.next_message().await.unwrap().is_some());
    let err = stream.next_message().await.unwrap_err();
    assert_eq!(err.kind(), cdc_core::ErrorKind::Transient);
    assert_eq!(err.server_error().map(|s| s.code.as_str()), Some("57P01"));
    assert_eq!(stream.next_message().await.unwrap(), None);
}

#[tokio::test]
async fn copy_done_ends_the_stream_after_the_messages_before_it() {
    let (mut stream, mut server) = pair(quiet());
    server.send(xlog(1, b"B")).await;
    server.send(xlog(2, b"C")).await;
    server.send_frame(b'c', b"").await;
    // A real server hangs up after the client's Terminate; the closing task waits
    // for that (at most CLOSE_WAIT).
    drop(server);
    let chunk = stream.next_chunk().await.unwrap().unwrap();
    assert_eq!(chunk.len(), 2);
    assert_eq!(stream.next_message().await.unwrap(), None);
}

#[tokio::test]
async fn a_message_split_across_reads_is_reassembled() {
    let (mut stream, mut server) = pair(quiet());
    let frame = copy_data_frame(&xlog(42, &vec![7u8; 300_000]));
    let (head, tail) = frame.split_at(3);
    server.socket.write_all(head).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    server.socket.write_all(tail).await.unwrap();
    match stream.next_message().await.unwrap() {
        Some(ServerMessage::XLogData(x)) => {
            assert_eq!(x.wal_start, Lsn(42));
            assert_eq!(x.data.len(), 300_000);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn garbage_is_a_protocol_error_and_a_hangup_is_transient() {
    let (mut stream, mut server) = pair(quiet());
    server.send_frame(b'd', b"zzz").await;
    assert_eq!(
        stream.next_message().await.unwrap_err().kind(),
        cdc_core::ErrorKind::Protocol
    );
    let (mut stream, server) = pair(quiet());
    drop(server);
    assert_eq!(
        stream.next_message().await.unwrap_err().kind(),
        cdc_core::ErrorKind::Transient
    );
}

#[tokio::test]
async fn close_sends_a_final_status_update_and_terminate() {
    let (stream, mut server) = pair(quiet());
    server.status().await;
    stream.flush_handle().set_flushed(Lsn(77));
    let closing = tokio::spawn(stream.close());
    assert_eq!(server.status().await.flush, Lsn(77));
    let mut rest = server.buf.to_vec();
    while rest.len() < 5 {
        let mut more = [0u8; 64];
        let n = server.socket.read(&mut more).await.unwrap();
        assert!(n > 0, "closed before Terminate");
        rest.extend_from_slice(&more[..n]);
    }
    assert_eq!(rest[..5], [b'X', 0, 0, 0, 4], "Terminate");
    drop(server);
    closing.await.unwrap().unwrap();
}

#[test]
fn merging_coalesces_trailing_keepalives_only() {
    let mut pending = None;
    merge(&mut pending, vec![keepalive(1, false)]);
    merge(&mut pending, vec![keepalive(2, true)]);
    assert_eq!(pending.as_deref(), Some(&[keepalive(2, true)][..]));
    merge(
        &mut pending,
        vec![xlog(3, b"B"), keepalive(4, false), keepalive(5, false)],
    );
    let queued = pending.unwrap();
    assert_eq!(
        queued,
        vec![keepalive(2, true), xlog(3, b"B"), keepalive(5, false)]
    );
    assert!(has_data(&queued));
    assert!(!has_data(&vec![keepalive(1, false)]));
}

#[tokio::test]
async fn a_silent_server_is_probed_then_presumed_dead() {
    let options = StreamOptions {
        receive_timeout: Some(Duration::from_millis(600)),
        ..quiet()
    };
    let started = std::time::Instant::now();
    let (mut stream, mut server) = pair(options);
    let first = server.status().await;
    assert!(!first.reply_requested, "the periodic update asks nothing");
    let probe = server.status().await;
    assert!(probe.reply_requested, "silence is answered with a probe");
    let error = tokio::time::timeout(Duration::from_secs(10), stream.next_message())
        .await
        .expect("the stream gives up on a silent server")
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert!(error.to_string().contains("presumed dead"), "{error}");
    assert!(started.elapsed() >= Duration::from_millis(600));
}

#[tokio::test]
async fn a_server_that_answers_probes_stays_connected() {
    let options = StreamOptions {
        receive_timeout: Some(Duration::from_millis(600)),
        ..quiet()
    };
    let (mut stream, mut server) = pair(options);
    let answering = tokio::spawn(async move {
        let until = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < until {
            if server.status().await.reply_requested {
                server.send(keepalive(1, false)).await;
            }
        }
        server
    });
    let read = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            stream.next_message().await.unwrap();
        }
    })
    .await;
    assert!(read.is_err(), "no error while the server answers");
    drop(answering);
}

/// A busy loopback connection is read on the batch timer with a capped receive buffer
/// (see `read_batching`): a burst far larger than that buffer still arrives whole and in
/// order, and a lone message after it (the stream idle again) is still delivered.
#[tokio::test]
async fn a_busy_loopback_stream_read_on_the_timer_loses_and_reorders_nothing() {
    const MESSAGES: u64 = 200_000;
    const PER_WRITE: u64 = 500;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
    let options = StreamOptions {
        receive_low_water: 64 * 1024,
        local_batching: Some(LocalBatching {
            receive_buffer: 64 * 1024,
            wait: Duration::from_millis(4),
        }),
        ..quiet()
    };
    let mut stream = ReplicationStream::spawn(
        Socket::Tcp(client.unwrap()),
        BytesMut::new(),
        "test".into(),
        options,
    );
    let mut server = accepted.unwrap().0;
    let writer = tokio::spawn(async move {
        let payload = [9u8; 100];
        let mut frames = Vec::new();
        for first in (0..MESSAGES).step_by(PER_WRITE as usize) {
            frames.clear();
            for lsn in first..first + PER_WRITE {
                frames.extend_from_slice(&copy_data_frame(&xlog(lsn + 1, &payload)));
            }
            server.write_all(&frames).await.unwrap();
        }
        server
    });
    let mut next = 1;
    while next <= MESSAGES {
        match stream.next_message().await.unwrap() {
            Some(ServerMessage::XLogData(x)) => {
                assert_eq!(x.wal_start, Lsn(next), "messages out of order or lost");
                assert_eq!(x.data.len(), 100);
                next += 1;
            }
            Some(ServerMessage::PrimaryKeepalive(_)) => {}
            None => panic!("the stream ended after {next} messages"),
        }
    }
    let mut server = writer.await.unwrap();
    // Idle for several waits, then one message: it must not wait for a burst to follow.
    tokio::time::sleep(Duration::from_millis(50)).await;
    server
        .write_all(&copy_data_frame(&xlog(MESSAGES + 1, b"last")))
        .await
        .unwrap();
    let last = tokio::time::timeout(Duration::from_secs(10), stream.next_message())
        .await
        .expect("the lone message after the burst is delivered")
        .unwrap();
    match last {
        Some(ServerMessage::XLogData(x)) => assert_eq!(x.wal_start, Lsn(MESSAGES + 1)),
        other => panic!("unexpected {other:?}"),
    }
}
