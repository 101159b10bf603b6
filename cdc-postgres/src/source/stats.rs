//! Live statistics of a [`super::PgSource`], readable from any thread while it runs: what
//! was received from the server, how far behind the server it is, what it buffers, its
//! reconnects, its state (for health checks) and the slot's WAL retention on the server
//! (polled over a SQL connection of its own).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cdc_core::Lsn;

/// What the source is doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SourceState {
    /// Not started, or starting (preflight, slot, first connection).
    #[default]
    Starting,
    /// Copying the consistent initial snapshot.
    Snapshot,
    /// Streaming, with an online snapshot running alongside.
    Backfilling,
    /// Streaming.
    Streaming,
    /// The replication connection was lost; reconnecting with backoff.
    Reconnecting,
    /// Stopped (end position reached, closed, or failed).
    Stopped,
}

impl SourceState {
    /// The label value (`starting`, `snapshot`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SourceState::Starting => "starting",
            SourceState::Snapshot => "snapshot",
            SourceState::Backfilling => "backfilling",
            SourceState::Streaming => "streaming",
            SourceState::Reconnecting => "reconnecting",
            SourceState::Stopped => "stopped",
        }
    }

    /// Every state, in label order.
    pub const ALL: [SourceState; 6] = [
        SourceState::Starting,
        SourceState::Snapshot,
        SourceState::Backfilling,
        SourceState::Streaming,
        SourceState::Reconnecting,
        SourceState::Stopped,
    ];
}

/// The slot's WAL retention as last polled from `pg_replication_slots`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRetention {
    /// Bytes of WAL between the server's current position and the slot's `restart_lsn`.
    pub retained_bytes: u64,
    /// `wal_status`: `reserved`, `extended`, `unreserved` or `lost`.
    pub wal_status: String,
    /// When it was polled.
    pub polled_at: Instant,
}

/// Counters updated by the source. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct SourceStats {
    inner: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    received_bytes: AtomicU64,
    received_messages: AtomicU64,
    received_lsn: AtomicU64,
    server_wal_end: AtomicU64,
    confirmed_lsn: AtomicU64,
    buffered_bytes: AtomicU64,
    spilled_bytes: AtomicU64,
    prepared_waiting: AtomicU64,
    caught_up: AtomicBool,
    chunk_rereads: AtomicU64,
    tables_read_whole: Mutex<Vec<TableReadWhole>>,
    state: Mutex<StateInfo>,
    reconnects: Mutex<BTreeMap<&'static str, u64>>,
    slot: Mutex<Option<SlotRetention>>,
}

#[derive(Debug, Default)]
struct StateInfo {
    state: SourceState,
    since: Option<Instant>,
    last_error: Option<String>,
    copied: bool,
    started: bool,
}

/// A table the online snapshot reads whole, under one snapshot, while the stream waits:
/// its changes cannot be merged key range by key range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableReadWhole {
    /// The table (`schema.name`, quoted where needed).
    pub table: String,
    /// Why, in a few words (`no primary key`).
    pub reason: String,
}

/// A point-in-time copy of [`SourceStats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceStatsSnapshot {
    /// Bytes of replication messages received (payloads of XLogData and keepalives).
    pub received_bytes: u64,
    /// Replication messages received.
    pub received_messages: u64,
    /// Highest WAL position received.
    pub received_lsn: Lsn,
    /// The server's WAL end, as its last message said.
    pub server_wal_end: Lsn,
    /// Position confirmed to the slot.
    pub confirmed_lsn: Lsn,
    /// Bytes of in-progress (or prepared) transactions held in memory.
    pub buffered_bytes: u64,
    /// Bytes of them held in spill files.
    pub spilled_bytes: u64,
    /// Prepared transactions waiting for COMMIT PREPARED (two-phase decoding).
    pub prepared_waiting: u64,
    /// Whether everything the server sent has been handed out and the source waits for
    /// more (nothing received is still being processed).
    pub caught_up: bool,
    /// Online snapshot chunk reads taken again because their snapshot did not show a
    /// transaction the stream had already passed into their key range (a commit made
    /// while a background round read, or one waiting for a synchronous standby); each is
    /// read again with the stream paused.
    pub chunk_rereads: u64,
    /// Tables this run's online snapshot reads whole while the stream waits, and why.
    pub tables_read_whole: Vec<TableReadWhole>,
    /// What the source is doing.
    pub state: SourceState,
    /// How long it has been in that state.
    pub state_age: Duration,
    /// The error that caused the current reconnect, or that stopped the source.
    pub last_error: Option<String>,
    /// Whether this source copies (or copied) rows in this run: a consistent snapshot,
    /// or an online backfill with tables left to read, finished or not.
    pub copied: bool,
    /// Whether the source has started (its slot and stream are set up).
    pub started: bool,
    /// Reconnects by cause.
    pub reconnects: Vec<(&'static str, u64)>,
    /// The slot's WAL retention, once polled.
    pub slot: Option<SlotRetention>,
}

impl SourceStatsSnapshot {
    /// Whether the stream holds every table without this run copying anything: it
    /// resumed after its snapshot was complete, or was started without one.
    pub fn nothing_to_copy(&self) -> bool {
        self.started && !self.copied
    }

    /// WAL bytes between the server's end and what is confirmed (0 before anything is
    /// known).
    pub fn lag_bytes(&self) -> u64 {
        if self.server_wal_end == Lsn::ZERO {
            return 0;
        }
        self.server_wal_end.bytes_since(self.confirmed_lsn)
    }
}

impl SourceStats {
    /// Reads everything.
    pub fn snapshot(&self) -> SourceStatsSnapshot {
        let c = &self.inner;
        let state = lock(&c.state);
        SourceStatsSnapshot {
            received_bytes: c.received_bytes.load(Relaxed),
            received_messages: c.received_messages.load(Relaxed),
            received_lsn: Lsn(c.received_lsn.load(Relaxed)),
            server_wal_end: Lsn(c.server_wal_end.load(Relaxed)),
            confirmed_lsn: Lsn(c.confirmed_lsn.load(Relaxed)),
            buffered_bytes: c.buffered_bytes.load(Relaxed),
            spilled_bytes: c.spilled_bytes.load(Relaxed),
            prepared_waiting: c.prepared_waiting.load(Relaxed),
            caught_up: c.caught_up.load(Relaxed),
            chunk_rereads: c.chunk_rereads.load(Relaxed),
            tables_read_whole: lock(&c.tables_read_whole).clone(),
            state: state.state,
            state_age: state.since.map_or(Duration::ZERO, |s| s.elapsed()),
            last_error: state.last_error.clone(),
            copied: state.copied,
            started: state.started,
            reconnects: lock(&c.reconnects)
                .iter()
                .map(|(cause, n)| (*cause, *n))
                .collect(),
            slot: lock(&c.slot).clone(),
        }
    }

    pub(super) fn message(&self, bytes: usize, wal_end: Lsn) {
        let c = &self.inner;
        c.received_bytes.fetch_add(bytes as u64, Relaxed);
        c.received_messages.fetch_add(1, Relaxed);
        c.server_wal_end.fetch_max(wal_end.0, Relaxed);
    }

    pub(super) fn received(&self, lsn: Lsn) {
        self.inner.received_lsn.fetch_max(lsn.0, Relaxed);
    }

    pub(super) fn confirmed(&self, lsn: Lsn) {
        self.inner.confirmed_lsn.fetch_max(lsn.0, Relaxed);
    }

    pub(super) fn buffers(&self, memory: usize, spilled: u64, prepared_waiting: usize) {
        let c = &self.inner;
        c.buffered_bytes.store(memory as u64, Relaxed);
        c.spilled_bytes.store(spilled, Relaxed);
        c.prepared_waiting.store(prepared_waiting as u64, Relaxed);
    }

    /// A chunk read is taken again (see [`SourceStatsSnapshot::chunk_rereads`]).
    pub(super) fn chunk_reread(&self) {
        self.inner.chunk_rereads.fetch_add(1, Relaxed);
    }

    /// The tables this run's online snapshot reads whole.
    pub(super) fn read_whole(&self, tables: Vec<TableReadWhole>) {
        *lock(&self.inner.tables_read_whole) = tables;
    }

    pub(super) fn caught_up(&self, caught_up: bool) {
        self.inner.caught_up.store(caught_up, Relaxed);
    }

    /// Moves to `state` (its age restarts only on a change); `error` is kept as the
    /// reason for `Reconnecting` and `Stopped`.
    pub(super) fn set_state(&self, state: SourceState, error: Option<String>) {
        let mut info = lock(&self.inner.state);
        if info.state != state || info.since.is_none() {
            info.state = state;
            info.since = Some(Instant::now());
        }
        if matches!(state, SourceState::Reconnecting | SourceState::Stopped) {
            if error.is_some() {
                info.last_error = error;
            }
        } else {
            info.last_error = None;
        }
    }

    /// The source has started; `copying`: it copies rows in this run.
    pub(super) fn started(&self, copying: bool) {
        let mut info = lock(&self.inner.state);
        info.started = true;
        info.copied |= copying;
    }

    /// The source hands out the start of a snapshot (a table copied again later in the
    /// run, too).
    pub(super) fn copying(&self) {
        lock(&self.inner.state).copied = true;
    }

    pub(super) fn reconnect(&self, cause: &'static str) {
        *lock(&self.inner.reconnects).entry(cause).or_insert(0) += 1;
    }

    pub(super) fn slot_polled(&self, retention: Option<SlotRetention>) {
        *lock(&self.inner.slot) = retention;
    }
}

/// The lock, also after a panic elsewhere poisoned it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_age_restarts_only_on_a_change_and_errors_stay_with_reconnecting() {
        let stats = SourceStats::default();
        stats.set_state(SourceState::Streaming, None);
        stats.set_state(SourceState::Reconnecting, Some("connection reset".into()));
        std::thread::sleep(Duration::from_millis(20));
        stats.set_state(SourceState::Reconnecting, None);
        let s = stats.snapshot();
        assert_eq!(s.state, SourceState::Reconnecting);
        assert!(s.state_age >= Duration::from_millis(20));
        assert_eq!(s.last_error.as_deref(), Some("connection reset"));
        stats.set_state(SourceState::Streaming, None);
        assert_eq!(stats.snapshot().last_error, None);
        stats.reconnect("connection_lost");
        stats.reconnect("connection_lost");
        stats.reconnect("server_ended");
        assert_eq!(
            stats.snapshot().reconnects,
            [("connection_lost", 2), ("server_ended", 1)]
        );
    }

    #[test]
    fn nothing_to_copy_only_for_a_run_that_streamed_without_copying() {
        let stats = SourceStats::default();
        assert!(!stats.snapshot().nothing_to_copy(), "not started yet");
        stats.started(false);
        stats.set_state(SourceState::Reconnecting, Some("reset".into()));
        assert!(stats.snapshot().nothing_to_copy());
        stats.copying();
        assert!(!stats.snapshot().nothing_to_copy(), "a table copied again");
        let copying_first = SourceStats::default();
        copying_first.started(true);
        copying_first.set_state(SourceState::Streaming, None);
        assert!(!copying_first.snapshot().nothing_to_copy());
    }

    #[test]
    fn lag_is_the_server_end_past_the_confirmed_position() {
        let stats = SourceStats::default();
        assert_eq!(stats.snapshot().lag_bytes(), 0);
        stats.message(10, Lsn(1000));
        stats.confirmed(Lsn(400));
        assert_eq!(stats.snapshot().lag_bytes(), 600);
        stats.confirmed(Lsn(1200));
        assert_eq!(stats.snapshot().lag_bytes(), 0);
    }
}
