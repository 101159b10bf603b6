//! Building the source's batches from its pending items: where a batch ends (its size
//! and byte limits, a whole online snapshot chunk, a transaction's end) and what the
//! handed-out batch covers for the resume token.

use std::time::Instant;

use cdc_core::{ChangeBatch, EventKind, SnapshotMarker};

use super::{Pending, PgSource, Phase};

impl PgSource {
    /// Moves pending items into the batch being built; true when the batch is full.
    pub(super) fn fill(&mut self) -> bool {
        let limits = self.options.config.batch;
        while let Some(item) = self.pending.pop_front() {
            match item {
                Pending::End(lsn) => {
                    self.building.commit_end = self.building.commit_end.max(Some(lsn));
                }
                Pending::Event(event) => {
                    if self.queued_upto.is_some_and(|q| event.position <= q) {
                        // Replayed after a reconnect: already in a batch.
                        continue;
                    }
                    self.queued_upto = Some(event.position);
                    if self.building.is_empty() {
                        self.building_since = Some(Instant::now());
                    }
                    if matches!(event.kind, EventKind::Snapshot(SnapshotMarker::Started)) {
                        self.stats.copying();
                    }
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
                        while let Some(Pending::Event(next)) = self.pending.front()
                            && matches!(
                                next.kind,
                                EventKind::Snapshot(
                                    SnapshotMarker::TableCompleted { .. }
                                        | SnapshotMarker::Completed { .. }
                                )
                            )
                            && let Some(Pending::Event(next)) = self.pending.pop_front()
                        {
                            self.queued_upto = Some(next.position);
                            self.building.push(next);
                        }
                        return true;
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
                && (self.building.len() >= limits.max_events
                    || self.building.byte_size >= limits.max_bytes)
            {
                return true;
            }
        }
        false
    }

    /// Hands out the batch being built, recording what it covers.
    pub(super) fn take_batch(&mut self) -> ChangeBatch {
        self.took_ready = false;
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
        self.covered_position = self.covered_position.max(batch.last_position());
        self.covered_end = self.covered_end.max(batch.commit_end);
        if let Phase::Snapshot(snapshot) = &self.phase {
            self.snapshot_progress = Some(snapshot.progress());
        }
        if let Some(backfill) = self.backfill.as_mut() {
            self.backfill_progress =
                backfill.progress_for(self.covered_position, self.covered_end, batch.events.last());
            if backfill.is_finished() {
                // The last progress (every table done) stays in later tokens.
                tracing::info!("online snapshot complete");
                self.backfill = None;
            }
        }
        batch
    }
}
