//! When a replication client sends standby status updates, and what they say: the timing
//! of a `START_REPLICATION` stream as a sans-IO state machine.
//!
//! The walsender ends a session whose client has said nothing for `wal_sender_timeout`,
//! and may ask for an answer at once with a keepalive. A client therefore has to send
//! status updates on time whatever its consumer is doing, answer those requests, and
//! report positions that never claim more than the sink has acknowledged (the flush
//! position advances the slot, and WAL behind it is gone for good). Such rules are easy to
//! get subtly wrong — a timer that every incoming message pushes back starves the server
//! of updates exactly while data flows; a flush position read from the wrong counter skips
//! a transaction — and a real clock makes them impractical to test: checking that a
//! consumer which stalls for minutes stays connected would take minutes.
//!
//! So, the way quinn-proto drives a QUIC connection, the rules live in [`StatusSchedule`],
//! a plain struct that never reads a clock and never touches a socket. It is told what
//! arrived ([`StatusSchedule::on_server_message`]) and what the sink confirmed
//! ([`StatusSchedule::confirm_flushed`]), with the current time passed in as an argument,
//! and answers two questions: what to send now ([`StatusSchedule::poll_transmit`]) and
//! when it next needs to be asked ([`StatusSchedule::poll_timeout`]). The connection's
//! task does the I/O around it: it reads the socket, feeds the schedule, sleeps until the
//! timeout or the next input, and writes what the schedule returns. Tests drive the same
//! struct with a fake clock (a base `Instant` plus durations) through hours of protocol
//! time in microseconds.
//!
//! What a driver gets without any care of its own:
//! - the flush (and apply) position of every update is the highest value ever confirmed:
//!   never more, and never less than in an earlier update;
//! - the write position is the highest of what was received and what was confirmed, so it
//!   is never below the flush position and never goes back either;
//! - a keepalive that requests a reply, or [`StatusSchedule::request_status`], makes an
//!   update due at once;
//! - a driver that calls [`StatusSchedule::poll_transmit`] whenever
//!   [`StatusSchedule::poll_timeout`] has passed never leaves more than the interval
//!   between two updates, however many messages arrive and whether or not anyone confirms
//!   anything.

use std::time::{Duration, Instant};

use cdc_core::Lsn;

use super::replication::{ServerMessage, StandbyStatusUpdate};

/// The shortest status interval a schedule uses: below it a client would spend its time
/// sending updates rather than reading.
pub const MIN_STATUS_INTERVAL: Duration = Duration::from_millis(10);

/// The shortest interval [`effective_status_interval`] derives from a server's
/// `wal_sender_timeout`: a timeout this short (below 150 ms) cannot be honoured by a
/// third anyway, and a client should not flood the server trying.
pub const MIN_TIMEOUT_DERIVED_INTERVAL: Duration = Duration::from_millis(50);

/// How far ahead a schedule puts a deadline that `now + interval` cannot represent (an
/// interval of `Duration::MAX` means "never" in practice): about 30 years.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// The status interval to use when the client asked for `requested` and the server's
/// `wal_sender_timeout` is `wal_sender_timeout` (`None`: not known or not followed).
///
/// A third of the timeout, if that is shorter than `requested`: the server pings a silent
/// client after half the timeout and gives up after all of it, so a third leaves room for
/// one late or lost update. A timeout of zero disables the server's check, so there is
/// nothing to stay under. The result is at least [`MIN_TIMEOUT_DERIVED_INTERVAL`] when it
/// came from the timeout and at least [`MIN_STATUS_INTERVAL`] in any case, and applying
/// the function to its own result changes nothing.
pub fn effective_status_interval(
    requested: Duration,
    wal_sender_timeout: Option<Duration>,
) -> Duration {
    let interval = match wal_sender_timeout {
        Some(timeout) if !timeout.is_zero() => {
            requested.min((timeout / 3).max(MIN_TIMEOUT_DERIVED_INTERVAL))
        }
        _ => requested,
    };
    interval.max(MIN_STATUS_INTERVAL)
}

/// What a [`StatusSchedule`] is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusConfig {
    /// How often an update is sent when nothing else asks for one.
    pub status_interval: Duration,
    /// The server's `wal_sender_timeout`, if the interval should stay under a third of it
    /// (see [`effective_status_interval`]); `None` leaves `status_interval` alone.
    pub wal_sender_timeout: Option<Duration>,
}

impl StatusConfig {
    /// Updates every `status_interval`, whatever the server's timeout.
    pub fn new(status_interval: Duration) -> Self {
        StatusConfig {
            status_interval,
            wal_sender_timeout: None,
        }
    }

    /// The interval a schedule built from this config keeps.
    pub fn interval(&self) -> Duration {
        effective_status_interval(self.status_interval, self.wal_sender_timeout)
    }
}

/// The positions of one standby status update a [`StatusSchedule`] decided to send.
///
/// Only a schedule makes these, so `write >= flush` and `apply == flush` hold for every
/// value there is. The client clock is not part of it: the I/O layer stamps the wall clock
/// when it encodes the message ([`Self::to_message`]), which keeps the schedule free of
/// clock reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusReport {
    write: Lsn,
    flush: Lsn,
}

impl StatusReport {
    /// Received or confirmed up to here: the highest of the two.
    pub fn write(&self) -> Lsn {
        self.write
    }

    /// Durably processed up to here: the highest position ever confirmed (`0/0`, which the
    /// server ignores, until something is). This is what advances the slot.
    pub fn flush(&self) -> Lsn {
        self.flush
    }

    /// Applied up to here; the same as [`Self::flush`] (a logical consumer applies what it
    /// flushes).
    pub fn apply(&self) -> Lsn {
        self.flush
    }

    /// The wire message, with `client_clock` (microseconds since 2000-01-01, see
    /// [`super::timestamp::pg_timestamp_now`]) as the client's clock. It never asks the
    /// server for a reply.
    pub fn to_message(&self, client_clock: i64) -> StandbyStatusUpdate {
        StandbyStatusUpdate {
            write: self.write(),
            flush: self.flush(),
            apply: self.apply(),
            client_clock,
            reply_requested: false,
        }
    }
}

/// When to send standby status updates and what they report, for one replication stream.
///
/// Every method that depends on time takes `now` as an argument; the schedule never reads
/// a clock. `now` is expected not to go backwards (as [`Instant`] does not); an earlier
/// value than before never makes an update late, only possibly early.
///
/// Driving it:
/// 1. feed it what happens: [`Self::on_server_message`] for every message read,
///    [`Self::confirm_flushed`] with what the sink acknowledged, [`Self::request_status`]
///    when the owner wants an update sent now;
/// 2. call [`Self::poll_transmit`] and send what it returns (at most one update per call;
///    a second call with the same `now` returns `None`);
/// 3. wait until [`Self::poll_timeout`] or the next input, whichever comes first, and go
///    back to 1.
///
/// ```
/// use std::time::{Duration, Instant};
/// use cdc_core::Lsn;
/// use cdc_pgoutput::protocol::{StatusConfig, StatusSchedule};
///
/// let t0 = Instant::now(); // any instant: the schedule only compares them
/// let mut schedule = StatusSchedule::new(StatusConfig::new(Duration::from_secs(10)), t0);
/// assert!(schedule.poll_transmit(t0).is_some()); // the first update is due at once
/// schedule.confirm_flushed(Lsn(100));
/// assert_eq!(schedule.poll_transmit(t0 + Duration::from_secs(9)), None);
/// assert_eq!(schedule.poll_timeout(), t0 + Duration::from_secs(10));
/// let update = schedule.poll_transmit(t0 + Duration::from_secs(10)).unwrap();
/// assert_eq!(update.flush(), Lsn(100));
/// ```
#[derive(Clone, Debug)]
pub struct StatusSchedule {
    /// The time between updates when nothing else asks for one.
    interval: Duration,
    /// Highest `wal_start` of any XLogData seen.
    received: Lsn,
    /// Highest position ever confirmed; only [`Self::confirm_flushed`] raises it, and it
    /// never lowers it.
    flushed: Lsn,
    /// When the next update is due if nothing asks for one earlier.
    next_due: Instant,
    /// An update is owed at once: a keepalive requested a reply, or the owner asked.
    owed: bool,
    /// The latest `now` seen, which is when an owed update became due at the latest.
    latest: Instant,
}

impl StatusSchedule {
    /// A schedule starting at `now`, with the first update due at once: the server learns
    /// straight away that the client is there and what it has (nothing, `0/0`, at first).
    pub fn new(config: StatusConfig, now: Instant) -> Self {
        StatusSchedule {
            interval: config.interval(),
            received: Lsn::default(),
            flushed: Lsn::default(),
            next_due: now,
            owed: false,
            latest: now,
        }
    }

    /// The time between updates when nothing else asks for one (after
    /// [`effective_status_interval`]).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Takes note of a message the server sent, as it is read (not when the consumer gets
    /// it): an XLogData raises the received position to its `wal_start`; a keepalive that
    /// requests a reply makes an update due at once. Incoming messages never postpone the
    /// periodic update.
    pub fn on_server_message(&mut self, message: &ServerMessage, now: Instant) {
        self.latest = self.latest.max(now);
        match message {
            ServerMessage::XLogData(data) => self.received = self.received.max(data.wal_start),
            ServerMessage::PrimaryKeepalive(keepalive) => {
                if keepalive.reply_requested {
                    self.owed = true;
                }
            }
        }
    }

    /// Everything before `lsn` was durably processed: later updates report it as the flush
    /// position. Lower values than one confirmed before are ignored, so the position never
    /// goes back. Does not by itself make an update due (use [`Self::request_status`] for
    /// that).
    pub fn confirm_flushed(&mut self, lsn: Lsn) {
        self.flushed = self.flushed.max(lsn);
    }

    /// Makes an update due at once (e.g. after a checkpoint, or before closing).
    pub fn request_status(&mut self) {
        self.owed = true;
    }

    /// The update to send at `now`, if one is due: owed (reply requested, or asked for), or
    /// the interval has passed since the last one. Returning one counts it as sent: the
    /// next periodic update is due an interval after `now`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<StatusReport> {
        self.latest = self.latest.max(now);
        if !self.owed && now < self.next_due {
            return None;
        }
        self.owed = false;
        self.next_due = now
            .checked_add(self.interval)
            .or_else(|| now.checked_add(FAR_FUTURE))
            .unwrap_or(now);
        Some(self.report())
    }

    /// When [`Self::poll_transmit`] next needs to be called if nothing else happens. In the
    /// past (no later than the latest `now` given) while an update is owed.
    pub fn poll_timeout(&self) -> Instant {
        if self.owed {
            self.next_due.min(self.latest)
        } else {
            self.next_due
        }
    }

    /// The highest `wal_start` of any XLogData seen so far (`0/0` if none).
    pub fn received(&self) -> Lsn {
        self.received
    }

    /// The highest position confirmed so far (`0/0` if none).
    pub fn flushed(&self) -> Lsn {
        self.flushed
    }

    /// The positions an update sent now would carry.
    pub fn report(&self) -> StatusReport {
        StatusReport {
            write: self.received.max(self.flushed),
            flush: self.flushed,
        }
    }
}

#[cfg(test)]
#[path = "status_schedule_tests.rs"]
mod tests;
