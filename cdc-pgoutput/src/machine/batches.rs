//! The batches a source hands out: what it produced and has not yet put into a batch (the
//! pending queue), the batch being built, where a batch ends, and what the batches handed
//! out so far cover (for resume tokens).
//!
//! A batch ends at its size or byte limit, never inside an online snapshot chunk (a chunk
//! is delivered whole and ends its batch, together with its table's and the snapshot's
//! completion when they follow), and its latency limit counts from its first event. The
//! confirmable end of a batch (`commit_end`) is the end of the last transaction complete in
//! it as the stream reported it, which may be held back (a prepared transaction waiting).
//!
//! No clock and no I/O: the caller passes the time where a decision needs it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use cdc_core::{ChangeBatch, ChangeEvent, EventKind, Lsn, Position, SnapshotMarker};

/// An item produced but not yet put into a batch.
#[derive(Debug)]
pub enum Pending {
    /// An event for the batch.
    Event(ChangeEvent),
    /// A transaction ended here (whether or not it carried events): the batch that takes
    /// it may let the slot be confirmed up to here.
    End(Lsn),
    /// A transaction ended here whose `End` a waiting prepared transaction held back:
    /// the batch that takes it is complete up to here (see [`Batches::complete_upto`]).
    Complete(Lsn),
}

/// The pending queue as a driver's copy fills it (a consistent snapshot's rows, an
/// online snapshot's chunks): what they produce goes straight in (a queue of their own,
/// moved over afterwards, would cost every event one more copy).
#[derive(Debug)]
pub struct EventQueue<'a>(pub &'a mut VecDeque<Pending>);

impl EventQueue<'_> {
    /// Appends `event`.
    pub fn push_back(&mut self, event: ChangeEvent) {
        self.0.push_back(Pending::Event(event));
    }

    /// Appends the end of a transaction.
    pub fn push_end(&mut self, end: Lsn) {
        self.0.push_back(Pending::End(end));
    }
}

/// Where batches end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchRules {
    /// Events in a batch (a chunk may exceed it: it is never split).
    pub max_events: usize,
    /// Approximate bytes in a batch (likewise).
    pub max_bytes: usize,
    /// How long a batch may be built before it is handed out, from its first event.
    pub max_latency: Duration,
}

/// What [`Batches::fill`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filled {
    /// The batch is complete: hand it out.
    pub full: bool,
    /// A snapshot's `Started` marker went into the batch (the run copies rows).
    pub snapshot_started: bool,
}

/// The pending queue, the batch being built, and what handed-out batches cover.
#[derive(Debug)]
pub struct Batches {
    rules: BatchRules,
    pending: VecDeque<Pending>,
    building: ChangeBatch,
    /// When the batch being built took its first event.
    building_since: Option<Instant>,
    /// The batch holds a chunk's `ChunkStarted` but not yet its `ChunkCompleted`: the
    /// limits wait for the chunk's end.
    building_chunk: bool,
    /// The events the batch being built stands for: a block of snapshot rows counts as its
    /// rows, so `max_events` bounds the rows a sink gets at once either way.
    building_held: usize,
    /// Highest position put into a batch: an event at or before it, streamed again after
    /// a reconnect, is already in one.
    queued_upto: Option<Position>,
    /// What the batches handed out cover.
    covered_position: Option<Position>,
    covered_end: Option<Lsn>,
    /// Held-back transaction ends the batch being built, and those handed out, took.
    building_complete: Option<Lsn>,
    covered_complete: Option<Lsn>,
}

impl Batches {
    /// Nothing pending, built or handed out yet.
    pub fn new(rules: BatchRules) -> Self {
        Batches {
            rules,
            pending: VecDeque::new(),
            building: ChangeBatch::new(),
            building_since: None,
            building_chunk: false,
            building_held: 0,
            queued_upto: None,
            covered_position: None,
            covered_end: None,
            building_complete: None,
            covered_complete: None,
        }
    }

    /// The pending queue, for the phases that produce into it.
    pub fn pending_mut(&mut self) -> &mut VecDeque<Pending> {
        &mut self.pending
    }

    /// Items pending.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Queues an event.
    pub fn push_event(&mut self, event: ChangeEvent) {
        self.pending.push_back(Pending::Event(event));
    }

    /// Queues the end of a transaction that a waiting prepared transaction held back
    /// (after its held-back [`Pending::End`]).
    pub fn push_complete(&mut self, end: Lsn) {
        self.pending.push_back(Pending::Complete(end));
    }

    /// How far the batches handed out are complete: every transaction ending at or
    /// before it is in them (their `commit_end`, or beyond it where a waiting prepared
    /// transaction held that back).
    pub fn complete_upto(&self) -> Option<Lsn> {
        self.covered_end.max(self.covered_complete)
    }

    /// As [`Self::complete_upto`], with the batch being built.
    pub fn queued_complete(&self) -> Option<Lsn> {
        self.complete_upto()
            .max(self.building.commit_end)
            .max(self.building_complete)
    }

    /// Continues after a resume token complete up to `complete_end` (its
    /// `ResumeToken::complete_end`).
    pub fn resume_complete(&mut self, complete_end: Option<Lsn>) {
        self.covered_complete = complete_end;
    }

    /// Queues the end of a transaction.
    pub fn push_end(&mut self, end: Lsn) {
        self.pending.push_back(Pending::End(end));
    }

    /// The batch being built.
    pub fn building(&self) -> &ChangeBatch {
        &self.building
    }

    /// Highest position put into a batch.
    pub fn queued_upto(&self) -> Option<Position> {
        self.queued_upto
    }

    /// The last position the handed-out batches cover.
    pub fn covered_position(&self) -> Option<Position> {
        self.covered_position
    }

    /// The confirmable end the handed-out batches cover.
    pub fn covered_end(&self) -> Option<Lsn> {
        self.covered_end
    }

    /// Continues after a resume token that covers `position` and `commit_end`: nothing at
    /// or before `position` goes into a batch again.
    pub fn resume_after(&mut self, position: Option<Position>, commit_end: Option<Lsn>) {
        self.covered_position = position;
        self.covered_end = commit_end;
        self.queued_upto = position;
    }

    /// Continues after a resume token that covers `position` (its confirmable end kept).
    pub fn resume_after_position(&mut self, position: Option<Position>) {
        self.covered_position = position;
        self.queued_upto = position;
    }

    /// A new replication session starting at `start`: what was pending is gone with the
    /// old one (it is streamed again, or read again) — except ends at or before `start`,
    /// which no session sends again (the slot's start, pushed at a fresh start or after a
    /// consistent copy: without it the first token would not cover where the slot
    /// already is). The batch being built stays and is handed out.
    pub fn new_session(&mut self, start: Lsn) {
        self.pending
            .retain(|p| matches!(p, Pending::End(end) | Pending::Complete(end) if *end <= start));
        // A chunk is pushed into the queue whole, so none is half in the batch; should
        // one be, its end went with the queue and the limits must not wait for it.
        self.building_chunk = false;
    }

    /// Whether the batch being built has waited its latency limit at `now`.
    pub fn latency_expired(&self, now: Instant) -> bool {
        self.building_since
            .is_some_and(|since| now.saturating_duration_since(since) >= self.rules.max_latency)
    }

    /// How long the batch being built may still wait at `now` (`None`: it is empty).
    pub fn latency_left(&self, now: Instant) -> Option<Duration> {
        self.building_since.map(|since| {
            self.rules
                .max_latency
                .saturating_sub(now.saturating_duration_since(since))
        })
    }

    /// The highest WAL position of anything that went into a batch (built or handed out),
    /// or of `confirmed`: what a server must have in its history for the stream to
    /// continue there after a reconnect (a promoted standby that lagged has not).
    pub fn handed_out_upto(&self, confirmed: Lsn) -> Lsn {
        [
            Some(confirmed),
            self.covered_end,
            self.building.commit_end,
            self.queued_upto.map(|p| p.commit_lsn),
            self.covered_position.map(|p| p.commit_lsn),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(Lsn::ZERO)
    }

    /// Whether a run that ended still has a batch to hand out: events built, or progress
    /// beyond what the handed-out batches cover.
    pub fn has_final_batch(&self) -> bool {
        !self.building.is_empty() || self.building.commit_end > self.covered_end
    }

    /// Lets the (empty) batch being built confirm up to `end`: idle progress over
    /// transactions that carried nothing for the sink.
    pub fn idle_progress(&mut self, end: Lsn) {
        self.building.commit_end = Some(end);
    }

    /// Moves pending items into the batch being built (at `now`), until it is full or
    /// nothing is pending.
    pub fn fill(&mut self, now: Instant) -> Filled {
        let mut filled = Filled::default();
        while let Some(item) = self.pending.pop_front() {
            match item {
                Pending::End(lsn) => {
                    self.building.commit_end = self.building.commit_end.max(Some(lsn));
                }
                Pending::Complete(lsn) => {
                    self.building_complete = self.building_complete.max(Some(lsn));
                }
                Pending::Event(event) => {
                    if self.queued_upto.is_some_and(|q| event.position <= q) {
                        // Streamed again after a reconnect: already in a batch.
                        continue;
                    }
                    self.queued_upto = Some(event.position);
                    if self.building.is_empty() {
                        self.building_since = Some(now);
                    }
                    filled.snapshot_started |=
                        matches!(event.kind, EventKind::Snapshot(SnapshotMarker::Started));
                    let is_commit = matches!(event.kind, EventKind::Commit(_));
                    let starts_chunk = matches!(
                        event.kind,
                        EventKind::Snapshot(SnapshotMarker::ChunkStarted { .. })
                    );
                    let ends_chunk = matches!(
                        event.kind,
                        EventKind::Snapshot(SnapshotMarker::ChunkCompleted { .. })
                    );
                    let end_before = self.building.commit_end;
                    self.building_held += event.events_held();
                    self.building.push(event);
                    if starts_chunk {
                        self.building_chunk = true;
                    }
                    if ends_chunk {
                        // A chunk is delivered whole and ends its batch (with the
                        // table's completion when it is the last one), so a batch's
                        // token never falls inside a chunk: a sink whose output cannot
                        // be withdrawn (a JetStream stream) can make a chunk atomic.
                        // The snapshot's completion after it goes in too, so no token
                        // says every table is done without it.
                        self.building_chunk = false;
                        self.take_completions();
                        filled.full = true;
                        return filled;
                    }
                    if is_commit {
                        // How far the batch lets the slot be confirmed is the transaction's
                        // end as the stream put it right after the Commit (held back while
                        // a prepared transaction waits), not the Commit's own end LSN.
                        self.building.commit_end = end_before;
                        if let Some(&Pending::End(lsn)) = self.pending.front() {
                            self.pending.pop_front();
                            self.building.commit_end = self.building.commit_end.max(Some(lsn));
                        }
                    }
                }
            }
            if !self.building_chunk
                && (self.building_held >= self.rules.max_events
                    || self.building.byte_size >= self.rules.max_bytes)
            {
                // A table's last snapshot row and its completion go out together (an
                // output that labels the last row, as Debezium's records do, then
                // decides the label within the batch).
                self.take_completions();
                filled.full = true;
                return filled;
            }
        }
        filled
    }

    /// Moves the snapshot completion markers (a table's, the snapshot's) at the front of
    /// the queue into the batch being built.
    fn take_completions(&mut self) {
        while let Some(Pending::Event(next)) = self.pending.front()
            && matches!(
                next.kind,
                EventKind::Snapshot(
                    SnapshotMarker::TableCompleted { .. } | SnapshotMarker::Completed { .. }
                )
            )
            && let Some(Pending::Event(next)) = self.pending.pop_front()
        {
            self.queued_upto = Some(next.position);
            self.building_held += 1;
            self.building.push(next);
        }
    }

    /// Hands out the batch being built, recording what it covers.
    pub fn take(&mut self) -> ChangeBatch {
        // The next batch gets room for as many events as this one had: under load the
        // batches are full, and a vector of 10,000 events grown by doubling copies them
        // about twice over. Not capped at `max_events`: a batch holding an online
        // snapshot's chunk is larger (the chunk's rows and its two markers, at most the
        // chunk's cap), and so is the next chunk's; capped, every chunk's batch grew once
        // (1.3% of the client's instructions). Every batch is bounded by the batch limits
        // or by one chunk, so this room is too; after a large batch the next may hold
        // more room than it uses, for as long as that one batch lives.
        let room = self.building.len();
        let batch = std::mem::replace(&mut self.building, ChangeBatch::with_capacity(room));
        self.building_since = None;
        self.building_held = 0;
        self.covered_position = self.covered_position.max(batch.last_position());
        self.covered_end = self.covered_end.max(batch.commit_end);
        self.covered_complete = self.covered_complete.max(self.building_complete.take());
        batch
    }
}

#[cfg(test)]
#[path = "batches_tests.rs"]
mod tests;
