//! Handing out the source's batches: the decisions (where a batch ends, what it covers)
//! are `cdc_pgoutput::machine`'s; here the statistics and the phases' progress for the
//! resume token follow each batch.

use cdc_core::ChangeBatch;

use super::PgSource;

impl PgSource {
    /// Hands out the batch being built, recording what it covers.
    pub(super) fn take_batch(&mut self) -> ChangeBatch {
        let batch = self.machine.take();
        if self.machine.copying() && !self.reported_copying {
            self.reported_copying = true;
            self.stats.copying();
        }
        if let Some(snapshot) = &self.snapshot {
            self.snapshot_progress = Some(snapshot.progress());
        }
        if let Some(backfill) = self.backfill.as_mut() {
            let batches = self.machine.batches();
            self.backfill_progress = backfill.progress_for(
                batches.covered_position(),
                batches.covered_end(),
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
