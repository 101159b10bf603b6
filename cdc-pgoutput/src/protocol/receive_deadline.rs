//! When a replication client presumes its server dead: the receive side of a
//! `START_REPLICATION` stream's timing, as a sans-IO state machine beside
//! [`super::status_schedule`].
//!
//! A network partition, or a server host that froze, is silent: no FIN, no RST, and the
//! client's own small status updates are acknowledged by nobody, so TCP notices only after
//! many minutes of retransmissions (and not at all while the server's kernel still
//! acknowledges but the walsender is stopped). The walsender, however, answers a standby
//! status update that requests a reply with a keepalive at once, whatever its
//! `wal_sender_timeout`. So a client that has heard nothing for a while asks: after a
//! third of its receive timeout in silence it sends an update requesting a reply, after
//! two thirds another, and after the whole timeout it presumes the connection dead (the
//! caller ends the stream with a transient error and reconnects).
//!
//! Silence only counts while the client reads: under backpressure it does not read the
//! socket, and what the server did meanwhile is unknown, so the count starts again when
//! reading resumes.
//!
//! [`ReceiveDeadline`] never reads a clock: `now` is an argument of every method that
//! depends on time, and tests drive it with a fake clock.

use std::time::{Duration, Instant};

/// The receive timeout to use when the client asked for `requested` (`None`: never presume
/// the server dead) and the server's `wal_sender_timeout` is `wal_sender_timeout` (`None`:
/// not known or not followed).
///
/// At least twice the server's timeout: a walsender that is busy (decoding a large
/// transaction, waiting on its disk) may not read our requests for a while, but one that
/// stays away for twice its own timeout would have given up on us by its own rules. A
/// timeout of zero (the server's check is off) leaves `requested` alone. Applying the
/// function to its own result changes nothing.
pub fn effective_receive_timeout(
    requested: Option<Duration>,
    wal_sender_timeout: Option<Duration>,
) -> Option<Duration> {
    let requested = requested?;
    Some(match wal_sender_timeout {
        Some(timeout) => requested.max(timeout.saturating_mul(2)),
        None => requested,
    })
}

/// How many probes (updates that request a reply) a silent period gets before the
/// deadline: one at each third of the timeout.
const PROBES: u32 = 3;

/// When to probe a silent server and when to give up on it, for one replication stream.
///
/// Driving it:
/// 1. [`Self::on_received`] whenever bytes arrive (any bytes: a large message that trickles
///    in is a live server), [`Self::set_reading`] whenever the driver starts or stops
///    reading the socket;
/// 2. when [`Self::poll_timeout`] has passed: if [`Self::poll_expired`] returns the
///    silence, end the connection; else if [`Self::poll_probe`] says so, send a status
///    update that requests a reply;
/// 3. go back to 1.
///
/// ```
/// use std::time::{Duration, Instant};
/// use cdc_pgoutput::protocol::ReceiveDeadline;
///
/// let t0 = Instant::now();
/// let mut deadline = ReceiveDeadline::new(Some(Duration::from_secs(30)), t0);
/// assert_eq!(deadline.poll_timeout(), Some(t0 + Duration::from_secs(10)));
/// assert!(deadline.poll_probe(t0 + Duration::from_secs(10)));
/// assert_eq!(deadline.poll_expired(t0 + Duration::from_secs(29)), None);
/// assert_eq!(
///     deadline.poll_expired(t0 + Duration::from_secs(30)),
///     Some(Duration::from_secs(30))
/// );
/// ```
#[derive(Clone, Debug)]
pub struct ReceiveDeadline {
    /// Silence after which the server is presumed dead; `None`: never.
    timeout: Option<Duration>,
    /// When bytes last arrived, or reading last resumed.
    last_heard: Instant,
    /// Probes sent in the current silence.
    probes: u32,
    /// Whether the driver reads the socket.
    reading: bool,
}

impl ReceiveDeadline {
    /// A deadline starting at `now` (which counts as having heard from the server), with
    /// the driver reading.
    pub fn new(timeout: Option<Duration>, now: Instant) -> Self {
        ReceiveDeadline {
            timeout: timeout.filter(|t| !t.is_zero()),
            last_heard: now,
            probes: 0,
            reading: true,
        }
    }

    /// The silence after which the server is presumed dead (`None`: never).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Bytes arrived at `now`: the silence ends.
    pub fn on_received(&mut self, now: Instant) {
        self.last_heard = self.last_heard.max(now);
        self.probes = 0;
    }

    /// The driver starts (`true`) or stops reading the socket at `now`. Silence counts
    /// from when reading resumed: while not reading there is no deadline.
    pub fn set_reading(&mut self, reading: bool, now: Instant) {
        if reading && !self.reading {
            self.on_received(now);
        }
        self.reading = reading;
    }

    /// Whether to send a status update requesting a reply at `now`: true once per third
    /// of the timeout of silence (the first after a third). Returning true counts the
    /// probe as sent.
    pub fn poll_probe(&mut self, now: Instant) -> bool {
        let Some(due) = self.next_probe() else {
            return false;
        };
        if now < due {
            return false;
        }
        self.probes += 1;
        true
    }

    /// How long the server has been silent, if that is the whole timeout or more at `now`
    /// (the connection is presumed dead); `None` otherwise, when there is no timeout, or
    /// while the driver does not read.
    pub fn poll_expired(&self, now: Instant) -> Option<Duration> {
        let timeout = self.timeout.filter(|_| self.reading)?;
        let silence = now.saturating_duration_since(self.last_heard);
        (silence >= timeout).then_some(silence)
    }

    /// When [`Self::poll_probe`] or [`Self::poll_expired`] next needs to be asked if
    /// nothing arrives; `None` when there is no timeout or the driver does not read.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timeout = self.timeout.filter(|_| self.reading)?;
        let expiry = self.at(timeout);
        Some(self.next_probe().map_or(expiry, |probe| probe.min(expiry)))
    }

    /// When the next probe of the current silence is due; `None` once all were sent,
    /// without a timeout, or while not reading.
    fn next_probe(&self) -> Option<Instant> {
        let timeout = self.timeout.filter(|_| self.reading)?;
        if self.probes + 1 >= PROBES {
            return None;
        }
        Some(self.at(timeout / PROBES * (self.probes + 1)))
    }

    /// `last_heard + after`, or far in the future if that is not representable.
    fn at(&self, after: Duration) -> Instant {
        self.last_heard
            .checked_add(after)
            .or_else(|| {
                self.last_heard
                    .checked_add(Duration::from_secs(86_400 * 365 * 30))
            })
            .unwrap_or(self.last_heard)
    }
}

#[cfg(test)]
#[path = "receive_deadline_tests.rs"]
mod tests;
