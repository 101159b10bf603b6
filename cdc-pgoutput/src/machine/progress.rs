//! Where the stream stands beyond the transactions it delivered: how far an idle stream
//! has been (a keepalive's WAL end between transactions), when a batch that carries only
//! that progress is due, and whether the end position a run was given is reached.
//!
//! An idle stream's progress lets the slot advance over WAL that carries nothing for the
//! sink (other databases, tables outside the publication), no further than a prepared
//! transaction still waiting (the server sends it again only to a session starting at or
//! before its PREPARE). No clock: the caller passes the time.

use std::time::{Duration, Instant};

use cdc_core::Lsn;

use super::batches::Batches;

/// `lsn`, but no further than `hold`.
pub fn held_back(lsn: Lsn, hold: Option<Lsn>) -> Lsn {
    hold.map_or(lsn, |hold| lsn.min(hold))
}

/// The stream's position as far as idleness and the end position are concerned.
#[derive(Debug)]
pub struct StreamProgress {
    /// Highest keepalive WAL end seen outside a transaction, held back by a waiting
    /// prepared transaction: idle progress.
    idle_wal_end: Lsn,
    /// How far the stream has passed (transaction ends and idle keepalives, not held
    /// back): where the end position is compared.
    passed: Lsn,
    /// When the last batch of idle progress went out.
    last_idle_batch: Option<Instant>,
    /// At most one batch of idle progress per this interval.
    interval: Duration,
    /// The position the run ends at, if it was given one.
    end: Option<Lsn>,
}

impl StreamProgress {
    /// Nothing passed yet; idle progress at most every `interval`; the run ends at `end`.
    pub fn new(interval: Duration, end: Option<Lsn>) -> Self {
        StreamProgress {
            idle_wal_end: Lsn::ZERO,
            passed: Lsn::ZERO,
            last_idle_batch: None,
            interval,
            end,
        }
    }

    /// The end position, as adjusted at start (one given just past a WAL page header is
    /// moved to where a record can end there).
    pub fn set_end(&mut self, end: Option<Lsn>) {
        self.end = end;
    }

    /// The stream reported `wal_end` with no transaction open: nothing before it is still
    /// coming. `hold`: the PREPARE of a prepared transaction still waiting.
    pub fn idle(&mut self, wal_end: Lsn, hold: Option<Lsn>) {
        self.passed = self.passed.max(wal_end);
        self.idle_wal_end = self.idle_wal_end.max(held_back(wal_end, hold));
    }

    /// A new replication session: what the old one had passed beyond `kept` (the slot's
    /// confirmed position, or what the batches built or handed out cover) went with its
    /// queue and is sent again — an idle keepalive of the old session must not let an
    /// empty batch confirm past the transactions still to come again, nor end the run
    /// before they do.
    pub fn new_session(&mut self, kept: Lsn) {
        self.idle_wal_end = self.idle_wal_end.min(kept);
        self.passed = self.passed.min(kept);
    }

    /// A transaction ended at `end` (not held back).
    pub fn passed(&mut self, end: Lsn) {
        self.passed = self.passed.max(end);
    }

    /// At `now`, with nothing pending or held for the batch being built: when the idle
    /// stream moved past what the batches cover and the last idle batch is `interval`
    /// old, marks the (empty) batch being built to confirm that far and says to hand it
    /// out.
    pub fn idle_batch_due(&mut self, now: Instant, batches: &mut Batches) -> bool {
        let building = batches.building();
        let progressed = self.idle_wal_end > batches.covered_end().unwrap_or(Lsn::ZERO)
            && self.idle_wal_end > building.commit_end.unwrap_or(Lsn::ZERO);
        let due = self
            .last_idle_batch
            .is_none_or(|t| now.saturating_duration_since(t) >= self.interval);
        if !(building.is_empty() && progressed && due) {
            return false;
        }
        batches.idle_progress(self.idle_wal_end);
        self.last_idle_batch = Some(now);
        true
    }

    /// Whether the run's end position is reached: the batches (built or handed out)
    /// confirm up to it, or the stream passed it, or — with `nothing_waiting` (nothing
    /// pending or received) — the slot was confirmed at or past it already.
    pub fn reached_end(&self, batches: &Batches, confirmed: Lsn, nothing_waiting: bool) -> bool {
        self.end.is_some_and(|end| {
            batches
                .building()
                .commit_end
                .or(batches.covered_end())
                .is_some_and(|c| c >= end)
                || self.idle_wal_end >= end
                || self.passed >= end
                // Already confirmed at or past the end when the stream started.
                || (confirmed >= end && nothing_waiting)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::batches::BatchRules;

    fn batches() -> Batches {
        Batches::new(BatchRules {
            max_events: 10,
            max_bytes: usize::MAX,
            max_latency: Duration::from_millis(100),
        })
    }

    #[test]
    fn idle_progress_goes_out_once_per_interval_and_not_past_a_waiting_prepare() {
        let start = Instant::now();
        let mut batches = batches();
        let mut progress = StreamProgress::new(Duration::from_secs(1), None);
        assert!(
            !progress.idle_batch_due(start, &mut batches),
            "nothing passed"
        );
        progress.idle(Lsn(500), Some(Lsn(300)));
        assert!(progress.idle_batch_due(start, &mut batches));
        assert_eq!(batches.building().commit_end, Some(Lsn(300)), "held back");
        batches.take();
        progress.idle(Lsn(900), None);
        assert!(
            !progress.idle_batch_due(start + Duration::from_millis(999), &mut batches),
            "within the interval"
        );
        assert!(progress.idle_batch_due(start + Duration::from_secs(1), &mut batches));
        assert_eq!(batches.building().commit_end, Some(Lsn(900)));
        batches.take();
        assert!(
            !progress.idle_batch_due(start + Duration::from_secs(5), &mut batches),
            "nothing new since"
        );
    }

    #[test]
    fn a_new_session_forgets_what_the_old_one_passed_beyond_what_is_kept() {
        // Seed 25,550: a keepalive at 900 after transactions that were still queued when
        // the connection was lost; the new session sends them again from 400.
        let start = Instant::now();
        let mut batches = batches();
        let mut progress = StreamProgress::new(Duration::from_secs(1), Some(Lsn(800)));
        progress.idle(Lsn(900), None);
        progress.new_session(Lsn(400));
        assert!(
            !progress.reached_end(&batches, Lsn::ZERO, false),
            "the run would end before the transactions come again"
        );
        progress.idle_batch_due(start, &mut batches);
        assert_eq!(
            batches.building().commit_end,
            Some(Lsn(400)),
            "an empty batch would confirm past them"
        );
        // What the new session passes counts again.
        progress.idle(Lsn(900), None);
        assert!(progress.reached_end(&batches, Lsn::ZERO, false));
    }

    #[test]
    fn the_end_is_reached_by_what_the_stream_passed_or_the_batches_confirm() {
        let mut batches = batches();
        let mut progress = StreamProgress::new(Duration::from_secs(1), Some(Lsn(1000)));
        assert!(!progress.reached_end(&batches, Lsn::ZERO, true));
        // Confirmed past the end before anything streamed: only once nothing waits.
        assert!(!progress.reached_end(&batches, Lsn(1000), false));
        assert!(progress.reached_end(&batches, Lsn(1000), true));
        progress.passed(Lsn(999));
        assert!(!progress.reached_end(&batches, Lsn::ZERO, false));
        // A waiting PREPARE holds idle progress back, not the end.
        progress.idle(Lsn(1000), Some(Lsn(10)));
        assert!(progress.reached_end(&batches, Lsn::ZERO, false));
        let mut other = StreamProgress::new(Duration::from_secs(1), Some(Lsn(1000)));
        batches.idle_progress(Lsn(1000));
        assert!(
            other.reached_end(&batches, Lsn::ZERO, false),
            "the batch confirms it"
        );
        other.set_end(None);
        assert!(
            !other.reached_end(&batches, Lsn(5000), true),
            "no end given"
        );
    }
}
