//! [`SourceMachine`]: the streaming source's decisions in one place, no I/O and no clock.
//!
//! The driver (`cdc-postgres`'s `PgSource`, or the deterministic simulation in the tests)
//! owns the connections and the time. It feeds the machine what happened — replication
//! messages as they arrive ([`SourceMachine::receive`]), what the stream had already read
//! ([`SourceMachine::ready`]), the pipeline's confirmations ([`SourceMachine::confirm`]),
//! a wait that ended without a message ([`SourceMachine::waited`]), a lost connection
//! ([`SourceMachine::resume_point`] then [`SourceMachine::new_session`]) — and asks
//! [`SourceMachine::poll`] what to do next: hand out the batch, let the online snapshot
//! take a step, take in what the stream already read, wait (for how long), or stop.
//!
//! The machine owns the change assembler (messages to events), the batches (what is
//! pending, being built, handed out and covered by tokens), the stream's idle progress and
//! end position, and the phases. The online snapshot takes part through [`StreamMerge`]:
//! every streamed event passes through it, and its facts join the schedule
//! (`schedule::next_step`); its reads are I/O, so they are actions the driver performs,
//! putting their rows into [`SourceMachine::pending_mut`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use cdc_core::{ChangeBatch, ChangeEvent, Error, Lsn, Position};

use super::batches::{BatchRules, Batches, Pending};
use super::progress::{StreamProgress, held_back};
use super::schedule::{self, BackfillFacts, LoopFacts, Step};
use crate::changes::ChangeAssembler;
use crate::protocol::replication::ServerMessage;

/// How a source's batches are cut and how often an idle stream's progress goes out.
#[derive(Clone, Copy, Debug)]
pub struct MachineConfig {
    /// Where batches end.
    pub batch: BatchRules,
    /// At most one batch of idle progress per this interval.
    pub progress_interval: Duration,
    /// The position the run ends at, if given.
    pub end: Option<Lsn>,
}

/// The online snapshot as the stream sees it: every streamed event passes through its
/// merge, transaction ends and idle progress may have to wait behind events it holds, and
/// its state joins the schedule.
pub trait StreamMerge {
    /// One streamed event: `Some` to deliver, `None` when the merge drops or holds it.
    fn on_event(&mut self, event: ChangeEvent) -> Result<Option<ChangeEvent>, Error>;
    /// A transaction ended at `end`: true when the merge holds it (behind held events),
    /// false to queue it now.
    fn hold_end(&mut self, end: Lsn) -> bool;
    /// The stream is idle up to `lsn`.
    fn idle(&mut self, lsn: Lsn);
    /// What the schedule needs to know at `now`.
    fn facts(&self, now: Instant) -> BackfillFacts;
}

/// What the source is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `start` has not finished.
    NotStarted,
    /// A consistent snapshot is being copied (by the driver) into the pending queue.
    Snapshot,
    /// The change stream (with an online snapshot alongside, if one runs).
    Streaming,
    /// The run is over: the end position was reached, or the source was closed.
    Ended,
}

/// An online snapshot's step, performed by the driver (it reads or compares on the
/// server) with its results put into [`SourceMachine::pending_mut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackfillStep {
    /// Have the server compare the held events' keys and let them go on.
    ResolveHeld,
    /// Place the next piece of the table being copied whole.
    NextWholePiece,
    /// Place the finished background round (and start the next one).
    FinishRound,
    /// Start reading the next round in the background.
    StartRound,
    /// Read the next round with the stream paused, and place it.
    ReadRoundPaused,
    /// Start copying a table without a key, the stream paused.
    StartWhole,
}

/// What the driver does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Hand out the batch being built: [`SourceMachine::take`].
    HandOut,
    /// The run is over and nothing is left to hand out.
    Done,
    /// `next_batch` before `start`.
    NotStarted,
    /// Copy more of the consistent snapshot into the pending queue; once it is all
    /// copied, start the stream and call [`SourceMachine::snapshot_copied`].
    PullSnapshot,
    /// Let the online snapshot take this step.
    Backfill(BackfillStep),
    /// Pass what the stream has already read, without waiting, to
    /// [`SourceMachine::ready`].
    TakeReady,
    /// Wait up to `wait` for messages ([`SourceMachine::receive`]), a confirmation, or a
    /// background round; call [`SourceMachine::waited`] if the time passed. `caught_up`:
    /// everything received went into batches handed out.
    Wait {
        /// How long at most.
        wait: Duration,
        /// Nothing received is waiting to be handed out.
        caught_up: bool,
    },
}

/// Where a new replication session must continue after a lost connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResumePoint {
    /// The position to start streaming from (what the slot was confirmed to).
    pub start: Lsn,
    /// Everything handed out so far lies at or before this position: a server (a promoted
    /// standby) may continue only if its history reaches it.
    pub handed_out_upto: Lsn,
}

/// A deliberate mistake, for the simulation's fault test.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// A batch cut inside a transaction lets the slot be confirmed past that
    /// transaction's commit record, as if the rest of it were in the batch too.
    ConfirmOneTooFar,
    /// A new session forgets the ends no session sends again (the slot's start pushed at
    /// a fresh start), as before seed 46725 found it.
    ForgetStartEnd,
    /// Ends are not held back to the PREPARE of a prepared transaction still waiting:
    /// the slot is confirmed past it, and a later session never receives it.
    IgnorePrepareHold,
    /// A new session keeps the old one's idle progress, as before seed 25550 found it.
    KeepIdleProgress,
}

/// The source's decisions; see the module documentation.
#[derive(Debug)]
pub struct SourceMachine {
    phase: Phase,
    assembler: Option<ChangeAssembler>,
    batches: Batches,
    progress: StreamProgress,
    progress_interval: Duration,
    max_events: usize,
    /// Replication messages received and not yet processed (processing pauses while a
    /// committed streamed transaction is released).
    inbox: VecDeque<ServerMessage>,
    scratch: Vec<ChangeEvent>,
    /// What the pipeline confirmed (and the slot will be told).
    confirmed: Lsn,
    /// The stream has had its turn since the last paused read (chunks and the stream
    /// alternate, so the slot keeps advancing while a snapshot runs).
    stream_had_turn: bool,
    /// The batch being built already took what the stream had read.
    took_ready: bool,
    /// Hand out the batch being built at the next poll, full or not (the consistent
    /// snapshot's end).
    hand_out_now: bool,
    /// A snapshot's `Started` marker went into a batch.
    copying: bool,
    #[cfg(test)]
    pub(crate) fault: Option<Fault>,
}

impl SourceMachine {
    /// A machine that has not started.
    pub fn new(config: MachineConfig) -> Self {
        SourceMachine {
            phase: Phase::NotStarted,
            assembler: None,
            batches: Batches::new(config.batch),
            progress: StreamProgress::new(config.progress_interval, config.end),
            progress_interval: config.progress_interval,
            max_events: config.batch.max_events,
            inbox: VecDeque::new(),
            scratch: Vec::new(),
            confirmed: Lsn::ZERO,
            stream_had_turn: true,
            took_ready: false,
            hand_out_now: false,
            copying: false,
            #[cfg(test)]
            fault: None,
        }
    }

    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Moves to `phase` (the driver's start decides between snapshot and stream; a closed
    /// source has ended).
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
    }

    /// The end position, as adjusted at start.
    pub fn set_end(&mut self, end: Option<Lsn>) {
        self.progress.set_end(end);
    }

    /// Streams through `assembler` from now on (kept across sessions: it remembers the
    /// schemas delivered).
    pub fn set_assembler(&mut self, assembler: ChangeAssembler) {
        self.assembler = Some(assembler);
        self.tell_assembler_what_is_delivered();
    }

    /// Continues after a resume token that covers `position`, `commit_end` and
    /// `complete_end` (its fields of those names): nothing at or before `position` goes
    /// into a batch again, and the assembler knows what the sink has.
    pub fn resume_after(
        &mut self,
        position: Option<Position>,
        commit_end: Option<Lsn>,
        complete_end: Option<Lsn>,
    ) {
        self.batches.resume_after(position, commit_end);
        self.batches.resume_complete(complete_end);
        self.tell_assembler_what_is_delivered();
    }

    /// Tells the assembler what is already in a batch, at the start of a session: a
    /// COMMIT PREPARED the server sends alone is of a transaction prepared before the
    /// session's start, so what the batches held then decides it (see
    /// [`ChangeAssembler::set_delivered`]); nothing later in the session changes that.
    fn tell_assembler_what_is_delivered(&mut self) {
        if let Some(assembler) = self.assembler.as_mut() {
            assembler.set_delivered(self.batches.queued_upto(), self.batches.queued_complete());
        }
    }

    /// The change assembler, once set.
    pub fn assembler(&self) -> Option<&ChangeAssembler> {
        self.assembler.as_ref()
    }

    /// The change assembler, once set (to seed schemas).
    pub fn assembler_mut(&mut self) -> Option<&mut ChangeAssembler> {
        self.assembler.as_mut()
    }

    /// The batches: pending, being built, covered.
    pub fn batches(&self) -> &Batches {
        &self.batches
    }

    /// The batches, for start's decisions (where a resumed run continues).
    pub fn batches_mut(&mut self) -> &mut Batches {
        &mut self.batches
    }

    /// The pending queue, which the snapshot phases fill.
    pub fn pending_mut(&mut self) -> &mut VecDeque<Pending> {
        self.batches.pending_mut()
    }

    /// What the pipeline confirmed so far (or the slot was at when the stream started).
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// The slot is confirmed up to `lsn` when the stream starts.
    pub fn set_confirmed(&mut self, lsn: Lsn) {
        self.confirmed = lsn;
    }

    /// Whether a snapshot's `Started` marker went into a batch (the run copies rows).
    pub fn copying(&self) -> bool {
        self.copying
    }

    /// Whether nothing received waits, and the stream stands between transactions.
    fn between_transactions(&self) -> bool {
        self.assembler
            .as_ref()
            .is_some_and(|a| !a.in_transaction() && !a.replaying())
    }

    /// The pipeline confirmed up to `lsn`: `Some` with the position to send the server
    /// when that moves the slot on.
    pub fn confirm(&mut self, lsn: Lsn) -> Option<Lsn> {
        if lsn > self.confirmed {
            self.confirmed = lsn;
            return Some(lsn);
        }
        None
    }

    /// Messages the stream received while the machine waited: the stream had its turn.
    pub fn receive(&mut self, messages: impl IntoIterator<Item = ServerMessage>) {
        self.stream_had_turn = true;
        self.inbox.extend(messages);
    }

    /// A wait ended without a message: the stream had its turn.
    pub fn waited(&mut self) {
        self.stream_had_turn = true;
    }

    /// After [`Action::TakeReady`]: what the stream had already read (`None`: nothing).
    /// Either way, the batch being built has taken what was ready.
    pub fn ready(&mut self, messages: Option<Vec<ServerMessage>>) {
        self.took_ready = true;
        if let Some(messages) = messages {
            self.inbox.extend(messages);
        }
    }

    /// Messages received and not yet processed.
    pub fn inbox_len(&self) -> usize {
        self.inbox.len()
    }

    /// The consistent snapshot is all copied; the stream starts at `consistent_point`
    /// (confirmable once the snapshot is acknowledged), or the run ends there (the driver
    /// set the phase): the batch being built goes out.
    pub fn snapshot_copied(&mut self, consistent_point: Lsn) {
        self.batches.push_end(consistent_point);
        self.hand_out_now = true;
    }

    /// The connection was lost: where the next session starts.
    pub fn resume_point(&self) -> ResumePoint {
        ResumePoint {
            start: self.confirmed,
            handed_out_upto: self.batches.handed_out_upto(self.confirmed),
        }
    }

    /// A new replication session: what was received and pending is gone with the old one
    /// (streamed again, or read again); the batch being built stays and goes out; the
    /// assembler forgets relation ids and open transactions, not the schemas delivered.
    pub fn new_session(&mut self) {
        if let Some(assembler) = self.assembler.as_mut() {
            assembler.reset_session();
        }
        #[cfg(test)]
        let start = if self.fault == Some(Fault::ForgetStartEnd) {
            Lsn::ZERO
        } else {
            self.confirmed
        };
        #[cfg(not(test))]
        let start = self.confirmed;
        self.batches.new_session(start);
        // What the old session passed beyond what is kept is sent again.
        let kept = [
            Some(self.confirmed),
            self.batches.covered_end(),
            self.batches.building().commit_end,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(Lsn::ZERO);
        #[cfg(test)]
        let kept = if self.fault == Some(Fault::KeepIdleProgress) {
            Lsn(u64::MAX)
        } else {
            kept
        };
        self.progress.new_session(kept);
        self.inbox.clear();
        self.tell_assembler_what_is_delivered();
    }

    /// Hands out the batch being built (after [`Action::HandOut`]).
    pub fn take(&mut self) -> ChangeBatch {
        self.took_ready = false;
        self.hand_out_now = false;
        #[cfg(test)]
        if self.fault == Some(Fault::ConfirmOneTooFar)
            && let Some(last) = self.batches.building().events.last()
            && !matches!(last.kind, cdc_core::EventKind::Commit(_))
        {
            // Past the commit record of the transaction the batch is cut in.
            let past = Lsn(last.position.commit_lsn.0 + 1);
            self.batches.idle_progress(past);
        }
        self.batches.take()
    }

    /// Whether the stream stands still: nothing received, held, pending or built waits,
    /// and no transaction is open.
    fn caught_up(&self, facts: &LoopFacts) -> bool {
        self.inbox.is_empty()
            && facts.backfill.is_none_or(|b| b.held == 0)
            && self.batches.pending_len() == 0
            && self.batches.building().is_empty()
            && self.between_transactions()
    }

    fn loop_facts(&self, now: Instant, merge: Option<&dyn StreamMerge>) -> LoopFacts {
        LoopFacts {
            latency_expired: self.batches.latency_expired(now),
            replaying: self.assembler.as_ref().is_some_and(|a| a.replaying()),
            between_transactions: self.between_transactions(),
            inbox: self.inbox.len(),
            pending: self.batches.pending_len(),
            max_events: self.max_events,
            building_empty: self.batches.building().is_empty(),
            took_ready: self.took_ready,
            stream_had_turn: self.stream_had_turn,
            backfill: merge.map(|m| m.facts(now)),
        }
    }

    /// Whether the run's end position is reached.
    fn reached_end(&self) -> bool {
        let nothing_waiting = self.batches.pending_len() == 0 && self.inbox.is_empty();
        self.progress
            .reached_end(&self.batches, self.confirmed, nothing_waiting)
    }

    /// What to do next at `now`, with the online snapshot `merge` if one runs. Processes
    /// received messages and releases streamed transactions on the way (through `merge`).
    pub fn poll(
        &mut self,
        now: Instant,
        mut merge: Option<&mut dyn StreamMerge>,
    ) -> Result<Action, Error> {
        loop {
            let filled = self.batches.fill(now);
            self.copying |= filled.snapshot_started;
            if filled.full || self.hand_out_now {
                return Ok(Action::HandOut);
            }
            // With an online snapshot running, the end waits for it: a stream that stops
            // at an LSN stops with every table complete (and nothing is held for it).
            if self.phase == Phase::Streaming && merge.is_none() && self.reached_end() {
                self.phase = Phase::Ended;
            }
            match self.phase {
                Phase::NotStarted => return Ok(Action::NotStarted),
                Phase::Ended if self.batches.has_final_batch() => return Ok(Action::HandOut),
                Phase::Ended => return Ok(Action::Done),
                Phase::Snapshot => return Ok(Action::PullSnapshot),
                Phase::Streaming => {}
            }
            let facts = self.loop_facts(now, merge.as_ref().map(|m| &**m as &dyn StreamMerge));
            match schedule::next_step(&facts) {
                Step::HandOut => return Ok(Action::HandOut),
                Step::ContinueReplay => self.continue_replay(reborrow(&mut merge))?,
                Step::ResolveHeld => return Ok(Action::Backfill(BackfillStep::ResolveHeld)),
                Step::NextWholePiece => {
                    return Ok(Action::Backfill(BackfillStep::NextWholePiece));
                }
                Step::FinishRound => return Ok(Action::Backfill(BackfillStep::FinishRound)),
                Step::StartRound => return Ok(Action::Backfill(BackfillStep::StartRound)),
                Step::ReadRoundPaused => {
                    self.stream_had_turn = false;
                    return Ok(Action::Backfill(BackfillStep::ReadRoundPaused));
                }
                Step::StartWhole => {
                    self.stream_had_turn = false;
                    return Ok(Action::Backfill(BackfillStep::StartWhole));
                }
                Step::ProcessMessage => {
                    if let Some(message) = self.inbox.pop_front() {
                        self.process_message(message, reborrow(&mut merge))?;
                    }
                }
                Step::TakeReadyOrHandOut => return Ok(Action::TakeReady),
                Step::Idle => {
                    // Idle progress: nothing pending or being built, and the server's WAL
                    // end moved past what the batches cover.
                    if schedule::may_hand_out_idle_progress(&facts)
                        && self.progress.idle_batch_due(now, &mut self.batches)
                    {
                        return Ok(Action::HandOut);
                    }
                    let wait = schedule::idle_wait(
                        &facts,
                        self.batches.latency_left(now),
                        self.progress_interval,
                    );
                    return Ok(Action::Wait {
                        wait,
                        caught_up: self.caught_up(&facts),
                    });
                }
            }
        }
    }

    /// Processes one replication message into pending items.
    fn process_message(
        &mut self,
        message: ServerMessage,
        merge: Option<&mut dyn StreamMerge>,
    ) -> Result<(), Error> {
        let Some(assembler) = self.assembler.as_mut() else {
            return Err(Error::protocol("internal: streaming without an assembler"));
        };
        match message {
            ServerMessage::XLogData(data) => {
                let end = assembler.process_from(data.data, data.wal_start, &mut self.scratch)?;
                let hold = assembler.confirm_hold();
                self.queue_scratch(merge, end, hold)?;
            }
            ServerMessage::PrimaryKeepalive(keepalive) => {
                // The WAL end a keepalive reports has been decoded and sent: with no
                // transaction open, nothing before it is still coming.
                if !assembler.in_transaction() && !assembler.replaying() {
                    self.progress
                        .idle(keepalive.wal_end, assembler.confirm_hold());
                    if let Some(merge) = merge {
                        merge.idle(keepalive.wal_end);
                    }
                }
            }
        }
        Ok(())
    }

    /// Releases the next bounded part of a committed streamed transaction.
    fn continue_replay(&mut self, merge: Option<&mut dyn StreamMerge>) -> Result<(), Error> {
        let Some(assembler) = self.assembler.as_mut() else {
            return Ok(());
        };
        if !assembler.replaying() {
            return Ok(());
        }
        let end = assembler.continue_replay(&mut self.scratch, self.max_events)?;
        let hold = assembler.confirm_hold();
        self.queue_scratch(merge, end, hold)
    }

    /// Moves the assembler's events into the pending queue, through the online snapshot's
    /// merge while one runs; then the end of the transaction that ended at `end`, if one
    /// did: tokens may cover up to there, but no further than `hold` (the earliest PREPARE
    /// of a prepared transaction still waiting, which the server sends again only to a
    /// session starting at or before it).
    fn queue_scratch(
        &mut self,
        merge: Option<&mut dyn StreamMerge>,
        end: Option<Lsn>,
        hold: Option<Lsn>,
    ) -> Result<(), Error> {
        #[cfg(test)]
        let hold = if self.fault == Some(Fault::IgnorePrepareHold) {
            None
        } else {
            hold
        };
        match merge {
            None => {
                self.batches
                    .pending_mut()
                    .extend(self.scratch.drain(..).map(Pending::Event));
                if let Some(end) = end {
                    self.progress.passed(end);
                    self.push_end(held_back(end, hold));
                    if held_back(end, hold) < end {
                        self.batches.push_complete(end);
                    }
                }
            }
            Some(merge) => {
                for event in self.scratch.drain(..) {
                    if let Some(event) = merge.on_event(event)? {
                        self.batches.push_event(event);
                    }
                }
                if let Some(end) = end {
                    self.progress.passed(end);
                    let unheld = end;
                    let end = held_back(end, hold);
                    // Behind events held for the server's key comparisons, the end waits
                    // with them.
                    // (A held end says nothing of completeness: the events before it
                    // are held too.)
                    if !merge.hold_end(end) {
                        self.push_end(end);
                        if end < unheld {
                            self.batches.push_complete(unheld);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn push_end(&mut self, end: Lsn) {
        self.batches.push_end(end);
    }
}

/// `merge` for one call, leaving it usable after.
fn reborrow<'a>(merge: &'a mut Option<&mut dyn StreamMerge>) -> Option<&'a mut dyn StreamMerge> {
    match merge {
        Some(merge) => Some(&mut **merge),
        None => None,
    }
}
