//! The tuning of a replication stream: status updates, buffering, read batching and how
//! long a silent server is trusted.

use std::time::Duration;

use super::read_batching::LocalBatching;

/// Tuning of a [`ReplicationStream`](super::ReplicationStream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// How often a standby status update is sent, whether or not anything changed
    /// (counted from the last update sent, whatever made it go out). Default 1 s.
    pub status_interval: Duration,
    /// Lower `status_interval` to a third of the server's `wal_sender_timeout` when
    /// starting (default true), so the server never disconnects a consumer that does not
    /// read. Turning it off leaves only the timer above and the answers to keepalives
    /// that request a reply.
    pub follow_wal_sender_timeout: bool,
    /// How many chunks (one socket read's worth of messages each) may wait for the
    /// consumer before the task stops reading. Memory held is about this times
    /// `read_buffer_size`. Default 8.
    pub channel_capacity: usize,
    /// Size of one socket read. Default 256 KiB.
    pub read_buffer_size: usize,
    /// On a plain TCP connection while traffic is heavy, wake the reader only once this
    /// many bytes are queued (`SO_RCVLOWAT`): fewer, larger reads, and much less work for
    /// the walsender, which otherwise wakes the reader for every message. Turned off again
    /// as soon as the stream goes idle. 0 turns it off; TLS and Unix sockets never use it.
    /// Default 256 KiB (the kernel grows the receive buffer to hold it).
    pub receive_low_water: usize,
    /// How long bytes below `receive_low_water` may wait before they are read anyway: the
    /// most latency batching adds. Default 2 ms.
    pub batch_wait: Duration,
    /// A busy connection to a server on this host (loopback TCP) is read on a timer with a
    /// capped receive buffer instead, so that the walsender's messages queue on its side
    /// and cross in large segments: far less work for the walsender, which a local drain
    /// waits for (see [`LocalBatching`]; `wait` replaces `batch_wait` there, the most
    /// latency it adds while traffic is heavy). Only while the stream runs at more than
    /// `receive_low_water` per 10 ms; a quiet stream is read as each message arrives.
    /// `None` reads local connections like remote ones. Default
    /// `Some(LocalBatching::default())`: 64 KiB, 4 ms.
    pub local_batching: Option<LocalBatching>,
    /// How long the server may send nothing at all before the connection is presumed dead
    /// and the stream ends with a Transient error (the message says for how long; the
    /// owner reconnects, as `PgSource` does for any transient failure). After a third of
    /// it in silence, and again after two thirds, the task sends a status update that
    /// requests a reply, which a live walsender answers at once. Silence while the task
    /// does not read (backpressure) does not count. With
    /// [`Self::follow_wal_sender_timeout`] it is raised to twice the server's
    /// `wal_sender_timeout`, so the default gives max(30 s, 2 × `wal_sender_timeout`):
    /// 2 minutes with the server's default of 60 s. `None` never presumes the server dead
    /// (TCP keepalive and `TCP_USER_TIMEOUT` still end a connection whose peer host is
    /// gone). Default 30 s.
    pub receive_timeout: Option<Duration>,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            status_interval: Duration::from_secs(1),
            follow_wal_sender_timeout: true,
            channel_capacity: 8,
            read_buffer_size: 256 * 1024,
            receive_low_water: 256 * 1024,
            batch_wait: Duration::from_millis(2),
            local_batching: Some(LocalBatching::default()),
            receive_timeout: Some(Duration::from_secs(30)),
        }
    }
}
