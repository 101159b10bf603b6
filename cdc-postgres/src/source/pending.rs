//! What the source has produced but not yet put into a batch, and the handle through
//! which the snapshot and backfill phases add to it.

use std::collections::VecDeque;

use cdc_core::{ChangeEvent, Lsn};
pub(super) use cdc_pgoutput::machine::batches::Pending;

/// The source's pending queue as the snapshot and backfill phases fill it: what they
/// produce goes straight in (a queue of their own, moved over afterwards, cost every
/// event one more copy).
pub(crate) struct EventQueue<'a>(pub(super) &'a mut VecDeque<Pending>);

impl EventQueue<'_> {
    /// Appends `event`.
    pub(crate) fn push_back(&mut self, event: ChangeEvent) {
        self.0.push_back(Pending::Event(event));
    }

    /// Appends the end of a transaction.
    pub(crate) fn push_end(&mut self, end: Lsn) {
        self.0.push_back(Pending::End(end));
    }
}
