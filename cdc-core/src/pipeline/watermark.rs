//! The acknowledgement watermark: which batches are acknowledged, and so how far the
//! source may be confirmed. Pure bookkeeping, no I/O, so the gating rules can be tested
//! without a pipeline around them.

use std::collections::VecDeque;

use crate::{BatchId, CommitMode, Lsn, Position};

/// One batch written to the sink and not yet retired.
#[derive(Clone, Debug)]
struct InFlight {
    id: BatchId,
    last_position: Option<Position>,
    commit_end: Option<Lsn>,
    bytes: usize,
    completed: bool,
    durable: bool,
}

/// Tracks written batches and computes the confirmable LSN.
///
/// Invariants: the confirmable LSN only ever moves forward, only to a batch's
/// `commit_end` (a transaction end), and only once that batch and every earlier one are
/// acknowledged under the commit mode (durable in checkpoint mode, completed in completion
/// mode).
#[derive(Debug)]
pub struct Watermark {
    mode: CommitMode,
    batches: VecDeque<InFlight>,
    confirmable: Lsn,
    /// Bytes of batches written but not yet completed: what the sink may still hold.
    pending_bytes: usize,
    /// Batches in `batches` not yet completed.
    uncompleted: usize,
    /// Every batch before this index in `batches` is completed. In checkpoint mode
    /// completed batches wait for a checkpoint, thousands of them with small batches, so
    /// a completion must not walk them again each time.
    completed_prefix: usize,
    last_durable: Option<Position>,
}

impl Watermark {
    /// An empty watermark starting at `start` (the position already confirmed).
    pub fn new(mode: CommitMode, start: Lsn) -> Self {
        Watermark {
            mode,
            batches: VecDeque::new(),
            confirmable: start,
            pending_bytes: 0,
            uncompleted: 0,
            completed_prefix: 0,
            last_durable: None,
        }
    }

    /// Records a batch handed to the sink.
    pub fn written(
        &mut self,
        id: BatchId,
        last_position: Option<Position>,
        commit_end: Option<Lsn>,
        bytes: usize,
    ) {
        self.pending_bytes += bytes;
        self.uncompleted += 1;
        self.batches.push_back(InFlight {
            id,
            last_position,
            commit_end,
            bytes,
            completed: false,
            durable: false,
        });
    }

    /// Records a batch whose events were all already covered by the resume token: it is
    /// completed and durable by definition.
    pub fn already_acknowledged(&mut self, id: BatchId, commit_end: Option<Lsn>) {
        self.batches.push_back(InFlight {
            id,
            last_position: None,
            commit_end,
            bytes: 0,
            completed: true,
            durable: true,
        });
        self.retire();
    }

    /// The sink processed batch `id` and every earlier one.
    pub fn completed(&mut self, id: BatchId) {
        for batch in self
            .batches
            .iter_mut()
            .skip(self.completed_prefix)
            .take_while(|b| b.id <= id)
        {
            if !batch.completed {
                batch.completed = true;
                self.pending_bytes -= batch.bytes;
                self.uncompleted -= 1;
            }
        }
        self.retire();
    }

    /// Everything a durable token covers is durable in the sink: batches with events up to
    /// `position`, and event-less progress batches up to `commit_end`.
    pub fn durable(&mut self, position: Option<Position>, commit_end: Option<Lsn>) {
        if position.is_some() {
            self.last_durable = self.last_durable.max(position);
        }
        for batch in self.batches.iter_mut() {
            let covered = match batch.last_position {
                Some(p) => position.is_some_and(|d| p <= d),
                None => match (batch.commit_end, commit_end) {
                    (None, _) => true,
                    (Some(end), Some(durable_end)) => end <= durable_end,
                    (Some(_), None) => false,
                },
            };
            if !covered {
                break;
            }
            // Durable implies processed.
            batch.durable = true;
            if !batch.completed {
                batch.completed = true;
                self.pending_bytes -= batch.bytes;
                self.uncompleted -= 1;
            }
        }
        self.retire();
    }

    /// Drops acknowledged batches from the front, advancing the confirmable LSN.
    fn retire(&mut self) {
        while let Some(front) = self.batches.front() {
            let acknowledged = match self.mode {
                CommitMode::Checkpoint => front.durable,
                CommitMode::Completion => front.completed,
            };
            if !acknowledged {
                break;
            }
            if let Some(end) = front.commit_end {
                self.confirmable = self.confirmable.max(end);
            }
            self.batches.pop_front();
            self.completed_prefix = self.completed_prefix.saturating_sub(1);
        }
        while self
            .batches
            .get(self.completed_prefix)
            .is_some_and(|b| b.completed)
        {
            self.completed_prefix += 1;
        }
    }

    /// The LSN the source may be confirmed to.
    pub fn confirmable(&self) -> Lsn {
        self.confirmable
    }

    /// Bytes written to the sink and not yet completed.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Batches written and not yet acknowledged under the commit mode.
    pub fn in_flight(&self) -> usize {
        self.batches.len()
    }

    /// Batches written but not yet completed.
    pub fn uncompleted(&self) -> usize {
        self.uncompleted
    }

    /// Whether every written batch is acknowledged.
    pub fn is_idle(&self) -> bool {
        self.batches.is_empty()
    }

    /// Whether every written batch is durable (nothing awaits a checkpoint).
    pub fn all_durable(&self) -> bool {
        self.batches.iter().all(|b| b.durable)
    }

    /// The highest durable position reported.
    pub fn last_durable(&self) -> Option<Position> {
        self.last_durable
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pos(l: u64, o: u64) -> Option<Position> {
        Some(Position::new(Lsn(l), o))
    }

    #[test]
    fn checkpoint_mode_waits_for_durability() {
        let mut w = Watermark::new(CommitMode::Checkpoint, Lsn(0));
        w.written(BatchId(0), pos(10, 3), Some(Lsn(12)), 100);
        w.written(BatchId(1), pos(20, 1), None, 50);
        w.completed(BatchId(1));
        assert_eq!(w.confirmable(), Lsn(0));
        assert_eq!(w.pending_bytes(), 0);
        w.durable(pos(10, 3), Some(Lsn(12)));
        assert_eq!(w.confirmable(), Lsn(12));
        assert_eq!(w.in_flight(), 1);
    }

    #[test]
    fn progress_batches_need_a_token_covering_their_end() {
        let mut w = Watermark::new(CommitMode::Checkpoint, Lsn(0));
        w.written(BatchId(0), pos(10, 3), Some(Lsn(12)), 100);
        w.written(BatchId(1), None, Some(Lsn(50)), 0);
        w.completed(BatchId(1));
        // An older token covers the data batch but not the progress after it.
        w.durable(pos(10, 3), Some(Lsn(12)));
        assert_eq!(w.confirmable(), Lsn(12));
        w.durable(pos(10, 3), Some(Lsn(50)));
        assert_eq!(w.confirmable(), Lsn(50));
        assert!(w.is_idle());
    }

    #[test]
    fn completion_mode_follows_completion() {
        let mut w = Watermark::new(CommitMode::Completion, Lsn(0));
        w.written(BatchId(0), pos(10, 3), Some(Lsn(12)), 100);
        w.written(BatchId(1), pos(20, 3), Some(Lsn(22)), 100);
        w.completed(BatchId(0));
        assert_eq!(w.confirmable(), Lsn(12));
        w.completed(BatchId(1));
        assert_eq!(w.confirmable(), Lsn(22));
        assert!(w.is_idle());
    }

    #[test]
    fn mid_transaction_batches_confirm_the_previous_end_only() {
        let mut w = Watermark::new(CommitMode::Checkpoint, Lsn(5));
        w.written(BatchId(0), pos(30, 100), None, 1);
        w.completed(BatchId(0));
        w.durable(pos(30, 100), Some(Lsn(5)));
        assert_eq!(w.confirmable(), Lsn(5));
    }

    /// The plain definition the counters must agree with: every batch walked each time.
    #[derive(Default)]
    struct Naive {
        batches: Vec<(BatchId, bool)>,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Written,
        Acknowledged,
        Completed(u64),
        Durable(u64),
    }

    proptest! {
        #[test]
        fn counters_agree_with_walking_every_batch(
            mode in prop_oneof![
                Just(CommitMode::Checkpoint),
                Just(CommitMode::Completion)
            ],
            ops in prop::collection::vec(
                prop_oneof![
                    4 => Just(Op::Written),
                    1 => Just(Op::Acknowledged),
                    3 => (0u64..40).prop_map(Op::Completed),
                    1 => (0u64..40).prop_map(Op::Durable),
                ],
                0..200,
            ),
        ) {
            let mut w = Watermark::new(mode, Lsn(0));
            let mut naive = Naive::default();
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Written => {
                        w.written(BatchId(next), pos(next * 10 + 10, 0), Some(Lsn(next * 10 + 10)), 7);
                        naive.batches.push((BatchId(next), false));
                        next += 1;
                    }
                    Op::Acknowledged => {
                        w.already_acknowledged(BatchId(next), Some(Lsn(next * 10 + 10)));
                        naive.batches.push((BatchId(next), true));
                        next += 1;
                    }
                    Op::Completed(id) => {
                        w.completed(BatchId(id));
                        for b in naive.batches.iter_mut().take_while(|b| b.0 <= BatchId(id)) {
                            b.1 = true;
                        }
                    }
                    Op::Durable(id) => {
                        // A token durable through batch `id`'s position.
                        w.durable(pos(id * 10 + 10, 0), Some(Lsn(id * 10 + 10)));
                        for b in naive.batches.iter_mut().take_while(|b| b.0 <= BatchId(id)) {
                            b.1 = true;
                        }
                    }
                }
                let uncompleted = naive.batches.iter().filter(|b| !b.1).count();
                prop_assert_eq!(w.uncompleted(), uncompleted);
                prop_assert_eq!(w.pending_bytes(), uncompleted * 7);
            }
        }
    }
}
