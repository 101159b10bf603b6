//! Handing out the source's batches: the decisions (where a batch ends, what it covers)
//! are `cdc_pgoutput::machine::batches`; here the statistics and the phases' progress for
//! the resume token follow each batch.

use std::time::Instant;

use cdc_core::ChangeBatch;

use super::{PgSource, Phase};

impl PgSource {
    /// Moves pending items into the batch being built; true when the batch is full.
    pub(super) fn fill(&mut self) -> bool {
        let filled = self.batches.fill(Instant::now());
        if filled.snapshot_started {
            self.stats.copying();
        }
        filled.full
    }

    /// Hands out the batch being built, recording what it covers.
    pub(super) fn take_batch(&mut self) -> ChangeBatch {
        self.took_ready = false;
        let batch = self.batches.take();
        if let Phase::Snapshot(snapshot) = &self.phase {
            self.snapshot_progress = Some(snapshot.progress());
        }
        if let Some(backfill) = self.backfill.as_mut() {
            self.backfill_progress = backfill.progress_for(
                self.batches.covered_position(),
                self.batches.covered_end(),
                batch.events.last(),
            );
            if backfill.is_finished() {
                // The last progress (every table done) stays in later tokens.
                tracing::info!("online snapshot complete");
                self.backfill = None;
            }
        }
        batch
    }
}
