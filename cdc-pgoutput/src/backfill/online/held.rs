//! Keys only the server can compare (text under a linguistic collation, enums, `inet`,
//! …): the merge needs their comparisons with its boundaries before it passes their
//! events (`Backfill::comparisons_needed`). Such an event, and everything the stream
//! produces after it — events, transaction ends, idle progress — is held in stream order;
//! once what has arrived is taken in (or enough is held), the driver has the server
//! compare every held key with every boundary ([`OnlineSnapshot::comparisons_needed`]),
//! and the held items go on in order ([`OnlineSnapshot::comparisons_answered`]).
//! Nothing is placed while items are held (`may_place`), so the boundaries cannot move
//! under them; nothing held reaches a batch, so no token covers it, and a lost connection
//! streams it again.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::time::Instant;

use cdc_core::{Error, Lsn};

use super::super::merge::Comparison;
use super::super::token_progress::key_text;
use super::parts::Held;
use super::{OnlineSnapshot, RETRY_DELAY};
use crate::machine::batches::EventQueue;

impl OnlineSnapshot {
    /// How many items are held.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Holds the end of a transaction behind the held events; false when nothing is held
    /// (the caller queues it).
    pub fn hold_end(&mut self, end: Lsn) -> bool {
        if self.held.is_empty() {
            return false;
        }
        self.held.push_back(Held::End(end));
        true
    }

    /// Whether the held items should be resolved now (items are held, and no failed
    /// attempt asks to wait).
    pub fn wants_resolving(&self, now: Instant) -> bool {
        !self.held.is_empty() && self.compare_not_before.is_none_or(|t| now >= t)
    }

    /// The comparisons the held events need, each once.
    pub fn comparisons_needed(&self) -> Result<Vec<Comparison>, Error> {
        let mut needed: Vec<Comparison> = Vec::new();
        let mut seen = HashSet::new();
        for held in &self.held {
            if let Held::Event(event) = held {
                for comparison in self.merge.comparisons_needed(event)? {
                    let id = (
                        comparison.table,
                        key_text(&comparison.key)?,
                        key_text(&comparison.boundary)?,
                    );
                    if seen.insert(id) {
                        needed.push(comparison);
                    }
                }
            }
        }
        Ok(needed)
    }

    /// The server's `answers` to `needed` (in order): every held item goes on, in order.
    pub fn comparisons_answered(
        &mut self,
        needed: &[Comparison],
        answers: Vec<Ordering>,
        out: &mut EventQueue<'_>,
    ) -> Result<(), Error> {
        for (comparison, ordering) in needed.iter().zip(answers) {
            self.merge.learn_comparison(comparison, ordering)?;
        }
        self.compare_not_before = None;
        while let Some(held) = self.held.pop_front() {
            match held {
                Held::Event(event) => {
                    if let Some(event) = self.pass(event)? {
                        out.push_back(event);
                    }
                }
                Held::End(end) => out.push_end(end),
                Held::Idle(lsn) => self.merge.progress(lsn),
            }
        }
        self.merge.forget_comparisons();
        Ok(())
    }

    /// The comparisons failed on a lost connection: the items stay held, to be tried
    /// again shortly.
    pub fn comparisons_failed(&mut self, now: Instant) {
        self.compare_not_before = Some(now + RETRY_DELAY * 20);
    }
}
