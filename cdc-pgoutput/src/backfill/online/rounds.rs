//! Read rounds of the online snapshot: which chunks the readers copy next (one table
//! each, or consecutive key ranges of one table split among them), and, once the driver
//! has read them (in the background while the stream goes on, or with it paused),
//! checking each read's snapshot against what the stream passed before its chunks are
//! placed.

use std::time::Instant;

use cdc_core::Error;

use super::super::merge::{ChunkEnd, Frontier};
use super::super::token_progress::key_text;
use super::super::xid_snapshot::XidSnapshot;
use super::parts::{ChunkRead, Request, RoundOutcome, Splits, TablePlan};
use super::{OnlineSnapshot, RETRY_DELAY, stride};
use crate::machine::batches::EventQueue;

impl OnlineSnapshot {
    /// The most events one read round places: every reader's chunk and its markers.
    pub fn round_events(&self) -> usize {
        self.rules
            .readers
            .max(1)
            .saturating_mul(self.rules.chunk_rows.max(1).saturating_add(4))
    }

    /// Whether the next round may run in the background while the stream goes on (its
    /// chunks are placed only if no transaction the stream passed in the meantime is
    /// missing from their snapshots); after a round that failed that check, the next one
    /// reads with the stream paused.
    pub fn optimistic(&self) -> bool {
        self.optimistic
    }

    /// Whether a planned round's reads have not been placed yet.
    pub fn reading(&self) -> bool {
        self.reading
    }

    /// Whether chunks may be placed at the current anchor (see `floor`): not while
    /// streamed events are held (the merge has not passed them yet).
    pub fn may_place(&self) -> bool {
        self.held.is_empty()
            && self
                .floor
                .is_none_or(|floor| self.merge.processed() > floor.commit_lsn)
    }

    /// The next read round: how the readers are shared among the pending tables (one
    /// each for up to `readers` tables; with fewer tables than readers, the rest read
    /// further chunks of the same tables, consecutive key ranges, so that one large
    /// table is read by every reader). From now until [`Self::place_round`] the round is
    /// being read. `splits`: ends the driver found ahead during the last round.
    pub fn plan_round(&mut self, splits: Vec<Splits>) -> Result<Vec<TablePlan>, Error> {
        let readers = self.rules.readers.max(1);
        let pending: Vec<usize> = self.keyed_pending().take(readers).collect();
        let mut plans = Vec::with_capacity(pending.len());
        let Some(share) = readers.checked_div(pending.len()) else {
            return Ok(plans);
        };
        self.reading = true;
        self.splits = splits;
        let extra = readers % pending.len();
        for (n, &index) in pending.iter().enumerate() {
            let (Some(state), Some(&catalog_index)) =
                (self.merge.tables().get(index), self.catalog.get(index))
            else {
                continue;
            };
            let after = match &state.frontier {
                Frontier::UpTo(key) => Some(key_text(key)?),
                _ => None,
            };
            let chunks = share + usize::from(n < extra);
            let key_range = self
                .tables
                .get(catalog_index)
                .and_then(|t| stride::integer_key_range(&t.schema));
            let ends = match key_range {
                _ if chunks <= 1 => None,
                Some((_, max)) => self.estimated_ends(index, &after, chunks, max),
                None => self
                    .splits
                    .iter()
                    .find(|s| s.index == index)
                    .and_then(|s| s.ends_for(&after, chunks)),
            };
            let estimable = key_range.is_some();
            plans.push(TablePlan {
                index,
                catalog_index,
                after,
                chunks,
                ends,
                estimable,
            });
        }
        self.splits.clear();
        Ok(plans)
    }

    /// A round could not start (no connection to read with): the next try waits.
    pub fn round_not_started(&mut self, now: Instant) {
        self.reading = false;
        self.not_before = Some(now + RETRY_DELAY * 20);
    }

    /// For a table with a single-column integer key (values up to `max`) whose last round
    /// showed its key density: the ends of the round's first `chunks - 1` ranges,
    /// estimated (the last chunk is the next rows after them; see `stride`).
    fn estimated_ends(
        &self,
        index: usize,
        after: &Option<Vec<String>>,
        chunks: usize,
        max: i128,
    ) -> Option<Vec<Vec<String>>> {
        let &(_, stride) = self.strides.iter().find(|(i, _)| *i == index)?;
        let after: i128 = after.as_ref()?.first()?.parse().ok()?;
        Some(stride::estimated_ends(
            after,
            stride,
            chunks.saturating_sub(1),
            max,
        ))
    }

    /// Records the key density `chunks` of table `index` showed (read in this round,
    /// about to be placed), for the next round's estimated ends.
    fn learn_stride(
        &mut self,
        index: usize,
        chunks: &[(Request, ChunkRead, XidSnapshot, ChunkEnd)],
    ) {
        let Some(state) = self.merge.tables().get(index) else {
            return;
        };
        let (Some(&catalog_index), [key_column]) =
            (self.catalog.get(index), state.key_columns.as_slice())
        else {
            return;
        };
        if self
            .tables
            .get(catalog_index)
            .and_then(|t| stride::integer_key_range(&t.schema))
            .is_none()
        {
            return;
        }
        let mut rows = 0u64;
        let mut span = 0i128;
        for (request, read, _, _) in chunks {
            let text = |key: &Option<Vec<String>>| {
                key.as_ref()
                    .and_then(|k| k.first())
                    .and_then(|t| t.parse::<i128>().ok())
            };
            let last = read
                .rows
                .last()
                .and_then(|row| row.get(*key_column))
                .and_then(stride::integer_key);
            let end = match text(&request.upto) {
                Some(upto) if !read.cut_short => Some(upto),
                _ => last,
            };
            if let (Some(start), Some(end)) = (text(&request.after), end) {
                rows += read.rows.len() as u64;
                span += end - start;
            }
        }
        self.strides.retain(|(i, _)| *i != index);
        if let Some(stride) = stride::stride_for(self.rules.chunk_rows, rows, span) {
            self.strides.push((index, stride));
        }
    }

    /// Places the planned round's chunks at the current anchor (the caller is between
    /// two transactions): `results` are its reads, a table's chunks together and in key
    /// order (a failed read, transient or not, as its error). A chunk goes in only if it
    /// continues the table's frontier and every chunk before it in the round went in, and
    /// if its snapshot shows every transaction the stream passed whose dropped changes
    /// reach into its range; otherwise the next round reads it again (with the stream
    /// paused, when a snapshot missed something). Errors other than transient ones are
    /// returned.
    pub fn place_round(
        &mut self,
        results: Vec<(Request, Result<ChunkRead, Error>)>,
        now: Instant,
        out: &mut EventQueue<'_>,
    ) -> Result<RoundOutcome, Error> {
        self.reading = false;
        let mut outcome = RoundOutcome::default();
        let mut retry = false;
        // The round's snapshots, observed once every read of the round was checked.
        let mut seen = Vec::new();
        // Each table's chunks in key order; a chunk is placed only if every one before it
        // in the round was (they continue one another).
        let mut results = results.into_iter().peekable();
        while let Some((first, read)) = results.next() {
            let index = first.index;
            let mut group = vec![(first, read)];
            while let Some((next, _)) = results.peek() {
                if next.index != index {
                    break;
                }
                if let Some(item) = results.next() {
                    group.push(item);
                }
            }
            // The chunks that can go: read without error, continuing the frontier.
            // A TRUNCATE (or a restart) since the read began moved the table's frontier:
            // the chunks no longer continue what the sink holds.
            let frontier = match self.merge.tables().get(index).map(|s| &s.frontier) {
                Some(Frontier::UpTo(key)) => Some(key_text(key)?),
                Some(Frontier::NotStarted) => None,
                _ => {
                    retry = true;
                    continue;
                }
            };
            let mut expected_after = frontier;
            let mut usable = Vec::with_capacity(group.len());
            for (request, read) in group {
                let read = match read {
                    Ok(read) => read,
                    Err(e) if e.is_transient() => {
                        tracing::warn!(error = %e, "reading a snapshot chunk failed; retrying");
                        outcome.failed_connection = true;
                        retry = true;
                        break;
                    }
                    Err(e) => return Err(e),
                };
                if request.after != expected_after {
                    retry = true;
                    break;
                }
                // Checked for every chunk before any is placed: placing one clears the
                // table's record of what the stream passed before the anchor.
                let end = self.chunk_end(&request, &read)?;
                let (snapshot, shows_the_past) =
                    self.snapshot_showing_the_past(index, &read.snapshot, &end)?;
                seen.push(snapshot.clone());
                if !shows_the_past {
                    outcome.rereads += 1;
                    retry = true;
                    break;
                }
                // A chunk cut short at its cap ends the table's share of this round: the
                // chunks after it do not continue it (the next round reads on from it).
                let last = read.complete || read.cut_short;
                expected_after = request.upto.clone();
                usable.push((request, read, snapshot, end));
                if last {
                    break;
                }
            }
            self.learn_stride(index, &usable);
            for (request, read, snapshot, end) in usable {
                self.place(&request, read, snapshot, end, out)?;
            }
        }
        // Every later check is of a snapshot taken after these (the next round starts
        // after this one was placed).
        for snapshot in &seen {
            self.merge.observe(snapshot);
        }
        self.optimistic = outcome.rereads == 0;
        self.not_before = retry.then(|| now + RETRY_DELAY);
        Ok(outcome)
    }

    /// The snapshot `text` of a read of table `index` up to `end`, and whether it shows
    /// every transaction the stream passed before the anchor (in this session, or an
    /// earlier one: `Backfill::with_unshown`) whose dropped changes reach into the read's
    /// range. When it does not — e.g. a commit still waiting for a synchronous standby,
    /// or one to the range made while a background round read — the read is to be taken
    /// again.
    pub(super) fn snapshot_showing_the_past(
        &self,
        index: usize,
        text: &str,
        end: &ChunkEnd,
    ) -> Result<(XidSnapshot, bool), Error> {
        let snapshot = XidSnapshot::parse(text).map_err(|e| {
            Error::protocol(format!("the server returned a malformed snapshot: {e}"))
        })?;
        #[cfg(test)]
        if self.fault_skip_visibility {
            return Ok((snapshot, true));
        }
        let invisible = self.merge.invisible_before_anchor(index, &snapshot, end)?;
        if !invisible.is_empty() {
            tracing::debug!(
                ?invisible,
                "a snapshot does not yet show transactions the stream passed; reading again"
            );
        }
        Ok((snapshot, invisible.is_empty()))
    }
}
