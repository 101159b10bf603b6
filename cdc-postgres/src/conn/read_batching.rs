//! Reading a busy TCP replication socket in large gulps.
//!
//! The walsender sends every pgoutput message as soon as it is decoded. A reader that
//! wakes for each arrival reads a few hundred bytes at a time, and every wakeup also costs
//! the walsender (over loopback the receiver's wakeup runs in the sender's `send`). With
//! `SO_RCVLOWAT` the kernel signals readability only once `low_water` bytes are queued, so
//! while traffic is heavy the reader wakes about once per `low_water` bytes. Bytes below
//! the mark must not wait forever: a timer (`wait`, a few milliseconds) reads whatever is
//! queued with a non-blocking `recv`, and when it finds nothing the stream is idle again,
//! the mark goes back to 1 and the next byte wakes the reader at once.
//!
//! When the server is on this host (a loopback connection) the walsender pays for more
//! than wakeups: each `send` also runs the loopback delivery into the reader's socket, one
//! segment per message. While traffic is heavy the reader there caps its receive buffer
//! (`SO_RCVBUF`, [`LocalBatching::receive_buffer`]) and reads only when its timer fires
//! ([`LocalBatching::wait`]): between two reads the receive window closes, the walsender's
//! `send`s only append to its own socket's queue (coalesced into large segments), and the
//! reader's reads pull those across, the delivery running in the reader's `recv` and
//! acknowledgements. Measured (benches/README.md): the walsender's system time fell from
//! 3.0–4.4 s to 1.1–2.0 s for a drain of 1.3 M changes, and the drain from 0.71× to 0.54×
//! of `pg_recvlogical`'s time. A timer read must then go on reading until nothing is
//! queued: one `recv` returns at most the capped buffer, while the walsender has
//! megabytes queued behind the closed window, and each read reopens it. Reading one
//! buffer per timer left the walsender blocked on its full send buffer a third of the
//! time (its socket held 3–4 MB); reading until empty keeps it busy (the drain's wall
//! time fell from 1.5× to 1.1× the walsender's CPU). This only works where the link is the kernel itself: over
//! a network a small window would cap the throughput, so remote connections keep the
//! readiness-driven reads.
//!
//! Only plain TCP: TLS records must go through the TLS layer (no raw `recv`), and Unix
//! sockets ignore `SO_RCVLOWAT` for readiness.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::transport::Socket;

/// How long eager reads are summed up to decide that traffic is heavy.
const RATE_WINDOW: Duration = Duration::from_millis(10);

/// What a timer-driven read found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Polled {
    /// This many bytes were appended.
    Read(usize),
    /// Nothing was queued: batching is now off until traffic is heavy again.
    Idle,
    /// The server closed the connection.
    Closed,
}

/// How a busy connection to a server on this host is read (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalBatching {
    /// The receive buffer (`SO_RCVBUF`) set once traffic is first heavy. It must be
    /// smaller than what arrives in one `wait` for the window to close, and not so small
    /// that it holds less than two loopback segments (64 KiB each), or the window stalls.
    /// The kernel doubles the value for its own accounting.
    pub receive_buffer: usize,
    /// How long bytes may wait while traffic is heavy: the socket is read only when this
    /// timer fires (and again at once while each read fills the read buffer).
    pub wait: Duration,
}

impl Default for LocalBatching {
    /// 64 KiB and 4 ms, measured on a drain at about 30 MB/s: 64 KiB with 2 ms, or 128 KiB
    /// with 4 ms, leave the window open and gain nothing; 64 KiB with 6 or 8 ms fills the
    /// walsender's own send buffer between reads and stalls it (benches/README.md).
    fn default() -> Self {
        LocalBatching {
            receive_buffer: 64 * 1024,
            wait: Duration::from_millis(4),
        }
    }
}

/// The low-water state of one replication socket.
#[derive(Debug)]
pub(crate) struct ReadBatching {
    low_water: usize,
    wait: Duration,
    active: bool,
    window_start: Instant,
    window_bytes: usize,
    /// Set for a loopback connection: reads only on the timer while active.
    local: Option<LocalBatching>,
    /// Whether the receive buffer was capped already (it stays capped).
    buffer_capped: bool,
}

impl ReadBatching {
    /// Batching for `socket`, or `None` when it does not apply (TLS, Unix socket,
    /// `low_water` 0). `local` applies when the socket connects two addresses of this
    /// host; `None` (or a zero receive buffer) reads such a connection like a remote one.
    pub(crate) fn for_socket(
        socket: &Socket,
        low_water: usize,
        wait: Duration,
        local: Option<LocalBatching>,
    ) -> Option<Self> {
        let Socket::Tcp(tcp) = socket else {
            return None;
        };
        if low_water <= 1 {
            return None;
        }
        let local = local.filter(|l| l.receive_buffer > 0).filter(|_| {
            matches!((tcp.local_addr(), tcp.peer_addr()), (Ok(ours), Ok(theirs)) if is_same_host(ours, theirs))
        });
        let wait = local.map_or(wait, |l| l.wait);
        Some(ReadBatching {
            low_water,
            wait: wait.max(Duration::from_micros(100)),
            active: false,
            window_start: Instant::now(),
            window_bytes: 0,
            local,
            buffer_capped: false,
        })
    }

    /// Whether the low-water mark is set, so the timer must look for bytes below it.
    pub(crate) fn active(&self) -> bool {
        self.active
    }

    /// Whether the socket is read only when the timer fires (a busy loopback connection),
    /// not when it becomes readable.
    pub(crate) fn reads_on_timer_only(&self) -> bool {
        self.active && self.local.is_some()
    }

    /// How long bytes below the mark may wait.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// Notes `bytes` read after a readiness wakeup; once a window's reads add up to the
    /// mark, traffic is heavy and the mark is set.
    pub(crate) fn after_read(&mut self, socket: &Socket, bytes: usize) {
        if self.active {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.window_start) > RATE_WINDOW {
            self.window_start = now;
            self.window_bytes = 0;
        }
        self.window_bytes += bytes;
        if self.window_bytes >= self.low_water {
            if let Some(local) = self.local
                && !self.buffer_capped
            {
                // If the buffer cannot be capped the window stays open: reads are only
                // less frequent, the walsender's sends as costly as before.
                self.buffer_capped = true;
                if let Err(e) = set_socket_option(socket, libc::SO_RCVBUF, local.receive_buffer) {
                    tracing::debug!(error = %e, "could not cap the receive buffer");
                }
            }
            // If the option cannot be set the socket simply keeps waking per arrival.
            self.active = set_low_water(socket, self.low_water).is_ok();
            self.window_bytes = 0;
        }
    }

    /// Reads whatever is queued without waiting, up to `buf`'s spare capacity: again and
    /// again while reads find bytes, since each read lets more of the sender's queue in.
    pub(crate) fn poll(&mut self, socket: &Socket, buf: &mut BytesMut) -> io::Result<Polled> {
        let Some(fd) = raw_fd(socket) else {
            self.active = false;
            return Ok(Polled::Idle);
        };
        match recv_nonblocking(fd, buf)? {
            Some(0) => Ok(Polled::Closed),
            Some(n) => {
                // Each read reopens the window and pulls more of what the walsender
                // queued across at once: read again until nothing is queued or the
                // buffer is full.
                let mut total = n;
                while buf.len() < buf.capacity() {
                    match recv_nonblocking(fd, buf)? {
                        Some(0) | None => break,
                        Some(n) => total += n,
                    }
                }
                Ok(Polled::Read(total))
            }
            None => {
                // Failing to lower the mark would leave bytes below it unread until the
                // next timer; stay active then, the timer keeps covering them.
                self.active = set_low_water(socket, 1).is_err();
                self.window_start = Instant::now();
                self.window_bytes = 0;
                Ok(Polled::Idle)
            }
        }
    }
}

fn raw_fd(socket: &Socket) -> Option<RawFd> {
    match socket {
        Socket::Tcp(tcp) => Some(tcp.as_raw_fd()),
        Socket::Unix(_) | Socket::Tls(_) => None,
    }
}

/// Whether a connection from `ours` to `theirs` stays on this host: a loopback address, or
/// the peer is one of our own addresses (routed through the loopback device too).
fn is_same_host(ours: SocketAddr, theirs: SocketAddr) -> bool {
    theirs.ip().is_loopback() || theirs.ip() == ours.ip()
}

fn set_low_water(socket: &Socket, bytes: usize) -> io::Result<()> {
    set_socket_option(socket, libc::SO_RCVLOWAT, bytes)
}

/// Sets an integer `SOL_SOCKET` option (values past `c_int` are clamped).
fn set_socket_option(socket: &Socket, option: libc::c_int, bytes: usize) -> io::Result<()> {
    let fd = raw_fd(socket).ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))?;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `fd` is the open socket `socket` owns for the duration of the call; the
    // option value is a c_int on the stack and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One non-blocking `recv` into `buf`'s spare capacity: `Some(n)` bytes appended (0 at
/// end of stream), `None` if nothing is queued. A non-blocking `recv` returns what is
/// queued even below the low-water mark.
fn recv_nonblocking(fd: RawFd, buf: &mut BytesMut) -> io::Result<Option<usize>> {
    if buf.capacity() == buf.len() {
        buf.reserve(64 * 1024);
    }
    let spare = buf.spare_capacity_mut();
    loop {
        // SAFETY: `fd` is an open socket (see `set_low_water`); the pointer and length
        // describe `spare`, writable memory owned by `buf`, and `recv` writes at most
        // that many bytes.
        let n = unsafe {
            libc::recv(
                fd,
                spare.as_mut_ptr().cast(),
                spare.len(),
                libc::MSG_DONTWAIT,
            )
        };
        match usize::try_from(n) {
            Ok(n) => {
                let n = n.min(spare.len());
                // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
                unsafe { buf.set_len(buf.len() + n) };
                return Ok(Some(n));
            }
            Err(_) => {
                let err = io::Error::last_os_error();
                match err.kind() {
                    io::ErrorKind::WouldBlock => return Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(err),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (Socket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (Socket::Tcp(client.unwrap()), server.unwrap().0)
    }

    #[tokio::test]
    async fn heavy_traffic_sets_the_mark_and_an_empty_poll_clears_it() {
        let (socket, mut server) = pair().await;
        let mut batching = ReadBatching::for_socket(&socket, 4096, Duration::from_millis(2), None)
            .expect("plain TCP batches");
        batching.after_read(&socket, 1000);
        assert!(!batching.active(), "below the mark within the window");
        batching.after_read(&socket, 3096);
        assert!(batching.active());

        // Bytes below the mark are still read by a poll.
        server.write_all(b"hello").await.unwrap();
        let mut buf = BytesMut::new();
        let mut polled = Polled::Idle;
        for _ in 0..100 {
            polled = batching.poll(&socket, &mut buf).unwrap();
            if polled != Polled::Idle {
                break;
            }
            // The poll found nothing yet (bytes in flight): it turned batching off.
            assert!(!batching.active());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(polled, Polled::Read(5));
        assert_eq!(&buf[..], b"hello");

        // Nothing queued: idle, mark cleared.
        batching.after_read(&socket, 4096);
        assert!(batching.active());
        assert_eq!(batching.poll(&socket, &mut buf).unwrap(), Polled::Idle);
        assert!(!batching.active());

        drop(server);
        let mut closed = Polled::Idle;
        for _ in 0..100 {
            closed = batching.poll(&socket, &mut buf).unwrap();
            if closed != Polled::Idle {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(closed, Polled::Closed);
    }

    #[tokio::test]
    async fn only_plain_tcp_batches() {
        let (socket, _server) = pair().await;
        assert!(ReadBatching::for_socket(&socket, 0, Duration::from_millis(2), None).is_none());
        let (unix, _other) = tokio::net::UnixStream::pair().unwrap();
        assert!(
            ReadBatching::for_socket(
                &Socket::Unix(unix),
                65536,
                Duration::from_millis(2),
                Some(LocalBatching::default())
            )
            .is_none()
        );
    }

    fn receive_buffer(socket: &Socket) -> usize {
        let fd = raw_fd(socket).unwrap();
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `fd` is open; `value` and `len` are valid for writes of their sizes.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw mut value).cast(),
                &raw mut len,
            )
        };
        assert_eq!(rc, 0);
        usize::try_from(value).unwrap()
    }

    #[tokio::test]
    async fn a_busy_loopback_connection_caps_its_buffer_and_reads_on_the_timer() {
        let (socket, _server) = pair().await;
        let local = LocalBatching {
            receive_buffer: 20_000,
            wait: Duration::from_millis(7),
        };
        let mut batching =
            ReadBatching::for_socket(&socket, 4096, Duration::from_millis(2), Some(local))
                .expect("plain TCP batches");
        assert_eq!(
            batching.wait(),
            Duration::from_millis(7),
            "the local wait applies"
        );
        let before = receive_buffer(&socket);
        assert!(before > 40_000, "the default buffer is larger ({before})");
        batching.after_read(&socket, 4096);
        assert!(batching.reads_on_timer_only());
        // The kernel doubles the value for its bookkeeping.
        assert!(receive_buffer(&socket) <= 40_000, "capped once heavy");
        // Idle again: readiness reads, the buffer stays capped.
        assert_eq!(
            batching.poll(&socket, &mut BytesMut::new()).unwrap(),
            Polled::Idle
        );
        assert!(!batching.reads_on_timer_only());
        assert!(receive_buffer(&socket) <= 40_000);
    }

    #[tokio::test]
    async fn a_poll_reads_past_a_full_receive_buffer_what_the_sender_queued() {
        let (socket, mut server) = pair().await;
        // A capped receive buffer, as a busy local stream has: the window closes at a
        // fraction of what the sender has queued.
        set_socket_option(&socket, libc::SO_RCVBUF, 64 * 1024).unwrap();
        let queued = 2 * 1024 * 1024;
        let writer = tokio::spawn(async move {
            server.write_all(&vec![7u8; queued]).await.unwrap();
            server
        });
        let capped = receive_buffer(&socket);
        let mut batching =
            ReadBatching::for_socket(&socket, 4096, Duration::from_millis(2), None).unwrap();
        let mut buf = BytesMut::with_capacity(queued);
        let mut first = 0;
        for _ in 0..200 {
            // Let the writer queue all it can on its side, past the closed window.
            tokio::time::sleep(Duration::from_millis(5)).await;
            if let Polled::Read(n) = batching.poll(&socket, &mut buf).unwrap() {
                first = n;
                break;
            }
        }
        // One `recv` returns at most what the receive buffer held; every read reopens the
        // window and the sender's queue crosses at once, so one poll takes far more.
        assert!(
            first > 2 * capped,
            "one poll read {first} bytes, the receive buffer holds {capped}"
        );
        while buf.len() < queued {
            tokio::time::sleep(Duration::from_millis(1)).await;
            batching.poll(&socket, &mut buf).unwrap();
        }
        assert!(buf.iter().all(|&b| b == 7));
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn without_local_batching_a_loopback_connection_reads_on_readiness() {
        let (socket, _server) = pair().await;
        let before = receive_buffer(&socket);
        let mut batching =
            ReadBatching::for_socket(&socket, 4096, Duration::from_millis(2), None).unwrap();
        assert_eq!(batching.wait(), Duration::from_millis(2));
        batching.after_read(&socket, 4096);
        assert!(batching.active() && !batching.reads_on_timer_only());
        assert_eq!(receive_buffer(&socket), before, "the buffer is left alone");
    }

    #[test]
    fn only_loopback_and_own_addresses_are_the_same_host() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(is_same_host(
            addr("127.0.0.1:40000"),
            addr("127.0.0.1:5432")
        ));
        assert!(is_same_host(
            addr("127.0.0.1:40000"),
            addr("127.0.0.2:5432")
        ));
        assert!(is_same_host(addr("[::1]:40000"), addr("[::1]:5432")));
        assert!(is_same_host(addr("10.0.0.5:40000"), addr("10.0.0.5:5432")));
        assert!(!is_same_host(addr("10.0.0.5:40000"), addr("10.0.0.6:5432")));
        assert!(!is_same_host(
            addr("[2001:db8::1]:40000"),
            addr("[2001:db8::2]:5432")
        ));
    }
}
