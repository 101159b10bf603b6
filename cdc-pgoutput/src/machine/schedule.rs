//! The streaming loop's choice of what to do next, from what it knows: hand out the batch,
//! release more of a committed streamed transaction, let held events go on, place or read
//! the online snapshot's chunks, take in a received message, or wait — and for how long.
//!
//! The order is the policy: a batch past its latency goes first; the online snapshot's
//! reads alternate with the stream (a read with the stream paused only after the stream
//! had its turn, so the slot keeps advancing while a snapshot runs); chunks are placed only
//! between two transactions; what the stream had already read goes into a batch once
//! before it is handed out, so a steady load does not hold every batch for its whole
//! latency limit.

use std::time::Duration;

/// What the online snapshot's state says, for the choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackfillFacts {
    /// Events are held for the server's key comparisons and may be resolved now.
    pub wants_resolving: bool,
    /// Items held for the server's key comparisons.
    pub held: usize,
    /// A table without a key is being copied whole (the stream waits).
    pub copying_whole: bool,
    /// A background read round finished and may be placed.
    pub round_ready: bool,
    /// The most events one round places.
    pub round_events: usize,
    /// Chunks remain and it is time to read them.
    pub wants_chunk: bool,
    /// The next round may read while the stream goes on.
    pub optimistic: bool,
    /// Chunks may be placed at the current anchor.
    pub may_place: bool,
    /// A table without a key waits to be read and it is time.
    pub wants_whole: bool,
    /// Nothing is left to read or decide.
    pub finished: bool,
}

/// What the loop knows when it chooses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopFacts {
    /// The batch being built waited its latency limit.
    pub latency_expired: bool,
    /// A committed streamed transaction is being released in parts.
    pub replaying: bool,
    /// The stream stands between two transactions.
    pub between_transactions: bool,
    /// Messages received and not yet processed.
    pub inbox: usize,
    /// Items pending for the batch.
    pub pending: usize,
    /// The batch size limit.
    pub max_events: usize,
    /// The batch being built has no events.
    pub building_empty: bool,
    /// The batch being built already took what the stream had read.
    pub took_ready: bool,
    /// The stream had its turn since the last paused read.
    pub stream_had_turn: bool,
    /// The online snapshot, while it runs.
    pub backfill: Option<BackfillFacts>,
}

/// The next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Hand out the batch being built.
    HandOut,
    /// Release the next part of the committed streamed transaction.
    ContinueReplay,
    /// Have the server compare the held events' keys and let them go on.
    ResolveHeld,
    /// Place the next piece of the table being copied whole.
    NextWholePiece,
    /// Place the finished background round (and start the next one).
    FinishRound,
    /// Start reading the next round in the background, then choose again.
    StartRound,
    /// Read the next round with the stream paused (after a round that missed a
    /// transaction the stream passed), and place it.
    ReadRoundPaused,
    /// Start copying a table without a key, the stream paused.
    StartWhole,
    /// Process the next received message.
    ProcessMessage,
    /// Take in what the stream has already read, once; hand out the batch if nothing is.
    TakeReadyOrHandOut,
    /// Nothing to do now: hand out idle progress if due, else wait.
    Idle,
}

impl LoopFacts {
    fn holding(&self) -> bool {
        self.backfill.is_some_and(|b| b.held > 0)
    }
}

/// The next step for `facts`.
pub fn next_step(facts: &LoopFacts) -> Step {
    if facts.latency_expired {
        return Step::HandOut;
    }
    if facts.replaying {
        return Step::ContinueReplay;
    }
    let backfill = facts.backfill.unwrap_or_default();
    let running = facts.backfill.is_some();
    if running
        && backfill.wants_resolving
        && (facts.inbox == 0 || backfill.held >= facts.max_events)
    {
        return Step::ResolveHeld;
    }
    if running && backfill.copying_whole {
        return Step::NextWholePiece;
    }
    if facts.between_transactions && running && backfill.round_ready {
        return Step::FinishRound;
    }
    let room = facts.pending < facts.max_events;
    // The next round is read while the last one's rows still wait to go out (at most one
    // round's rows, plus a batch): the server reads while this side places and the sink
    // encodes.
    let round_room = facts.pending < facts.max_events.saturating_add(backfill.round_events);
    if running && round_room && backfill.wants_chunk && backfill.optimistic {
        return Step::StartRound;
    }
    if running
        && facts.stream_had_turn
        && facts.inbox == 0
        && facts.between_transactions
        && room
        && backfill.wants_chunk
        && backfill.may_place
    {
        return Step::ReadRoundPaused;
    }
    if running
        && facts.stream_had_turn
        && facts.between_transactions
        && room
        && backfill.wants_whole
        && backfill.may_place
    {
        return Step::StartWhole;
    }
    if facts.inbox > 0 {
        return Step::ProcessMessage;
    }
    if !facts.building_empty && facts.pending == 0 {
        return if facts.took_ready {
            Step::HandOut
        } else {
            Step::TakeReadyOrHandOut
        };
    }
    Step::Idle
}

/// Whether an idle-progress batch may go out now (no events held behind it).
pub fn may_hand_out_idle_progress(facts: &LoopFacts) -> bool {
    !facts.holding()
}

/// How long to wait for the stream when idle: the batch's latency left (or the progress
/// interval when nothing is built); with chunks still to read, the stream only gets a
/// look-in — 1 ms before the next paused read is due, at most 20 ms otherwise.
pub fn idle_wait(
    facts: &LoopFacts,
    latency_left: Option<Duration>,
    interval: Duration,
) -> Duration {
    let wait = latency_left.unwrap_or(interval);
    let backfill_waiting = facts.backfill.is_some_and(|b| !b.finished);
    let wait = if backfill_waiting && !facts.stream_had_turn {
        Duration::from_millis(1)
    } else if backfill_waiting {
        wait.min(Duration::from_millis(20))
    } else {
        wait
    };
    wait.max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streaming() -> LoopFacts {
        LoopFacts {
            between_transactions: true,
            max_events: 100,
            building_empty: true,
            stream_had_turn: true,
            ..LoopFacts::default()
        }
    }

    fn backfilling(backfill: BackfillFacts) -> LoopFacts {
        LoopFacts {
            backfill: Some(backfill),
            ..streaming()
        }
    }

    #[test]
    fn a_late_batch_goes_first_then_a_replay_then_messages() {
        let mut facts = streaming();
        facts.inbox = 3;
        facts.replaying = true;
        facts.latency_expired = true;
        assert_eq!(next_step(&facts), Step::HandOut);
        facts.latency_expired = false;
        assert_eq!(next_step(&facts), Step::ContinueReplay);
        facts.replaying = false;
        assert_eq!(next_step(&facts), Step::ProcessMessage);
        facts.inbox = 0;
        assert_eq!(next_step(&facts), Step::Idle);
    }

    #[test]
    fn what_the_stream_read_goes_in_once_before_the_batch_goes_out() {
        let mut facts = streaming();
        facts.building_empty = false;
        assert_eq!(next_step(&facts), Step::TakeReadyOrHandOut);
        facts.took_ready = true;
        assert_eq!(next_step(&facts), Step::HandOut);
        facts.pending = 1;
        assert_eq!(
            next_step(&facts),
            Step::Idle,
            "pending items are filled first"
        );
    }

    #[test]
    fn held_events_wait_for_what_arrived_unless_a_batch_of_them_waits() {
        let mut facts = backfilling(BackfillFacts {
            wants_resolving: true,
            held: 5,
            ..BackfillFacts::default()
        });
        facts.inbox = 2;
        assert_eq!(next_step(&facts), Step::ProcessMessage);
        facts.backfill = Some(BackfillFacts {
            held: 100,
            ..facts.backfill.unwrap_or_default()
        });
        assert_eq!(next_step(&facts), Step::ResolveHeld);
        facts.inbox = 0;
        facts.backfill = Some(BackfillFacts {
            held: 1,
            ..facts.backfill.unwrap_or_default()
        });
        assert_eq!(next_step(&facts), Step::ResolveHeld);
        assert!(
            !may_hand_out_idle_progress(&facts),
            "held events come first"
        );
    }

    #[test]
    fn chunks_are_placed_only_between_transactions() {
        let mut facts = backfilling(BackfillFacts {
            round_ready: true,
            ..BackfillFacts::default()
        });
        assert_eq!(next_step(&facts), Step::FinishRound);
        facts.between_transactions = false;
        facts.inbox = 1;
        assert_eq!(next_step(&facts), Step::ProcessMessage);
    }

    #[test]
    fn a_paused_read_comes_only_after_the_stream_had_its_turn_and_its_messages_are_in() {
        let paused = BackfillFacts {
            wants_chunk: true,
            may_place: true,
            round_events: 1000,
            ..BackfillFacts::default()
        };
        let mut facts = backfilling(paused);
        assert_eq!(next_step(&facts), Step::ReadRoundPaused);
        facts.stream_had_turn = false;
        assert_eq!(next_step(&facts), Step::Idle);
        assert_eq!(
            idle_wait(&facts, None, Duration::from_secs(1)),
            Duration::from_millis(1),
            "the stream gets a look-in only"
        );
        facts.stream_had_turn = true;
        facts.inbox = 1;
        assert_eq!(next_step(&facts), Step::ProcessMessage);
        facts.inbox = 0;
        facts.pending = 100;
        assert_eq!(
            next_step(&facts),
            Step::Idle,
            "no room: the batch goes out first"
        );
        // Optimistic: read in the background, with room for a round beyond a batch.
        facts.backfill = Some(BackfillFacts {
            optimistic: true,
            ..paused
        });
        assert_eq!(next_step(&facts), Step::StartRound);
        facts.pending = 1100;
        assert_eq!(next_step(&facts), Step::Idle);
    }

    #[test]
    fn a_keyless_table_starts_only_at_an_anchor_and_then_holds_the_stream() {
        let mut facts = backfilling(BackfillFacts {
            wants_whole: true,
            may_place: true,
            ..BackfillFacts::default()
        });
        assert_eq!(next_step(&facts), Step::StartWhole);
        facts.between_transactions = false;
        assert_eq!(next_step(&facts), Step::Idle);
        facts.backfill = Some(BackfillFacts {
            copying_whole: true,
            ..BackfillFacts::default()
        });
        facts.inbox = 4;
        assert_eq!(next_step(&facts), Step::NextWholePiece);
    }

    #[test]
    fn idle_waits_follow_the_batch_and_the_snapshot() {
        let facts = streaming();
        let interval = Duration::from_secs(1);
        assert_eq!(idle_wait(&facts, None, interval), interval);
        assert_eq!(
            idle_wait(&facts, Some(Duration::from_millis(40)), interval),
            Duration::from_millis(40)
        );
        assert_eq!(
            idle_wait(&facts, Some(Duration::ZERO), interval),
            Duration::from_millis(1),
            "never a zero timer"
        );
        let snapshot = backfilling(BackfillFacts::default());
        assert_eq!(
            idle_wait(&snapshot, None, interval),
            Duration::from_millis(20)
        );
        let done = backfilling(BackfillFacts {
            finished: true,
            ..BackfillFacts::default()
        });
        assert_eq!(idle_wait(&done, None, interval), interval);
    }
}
