//! Read rounds of the online snapshot: which chunks the readers copy next (one table
//! each, or consecutive key ranges of one table split among them), reading them in the
//! background while the stream goes on, and checking each read's snapshot against what
//! the stream passed before its chunks are placed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cdc_core::{Error, Result};
use cdc_pgoutput::backfill::merge::{ChunkEnd, Frontier};
use cdc_pgoutput::backfill::xid_snapshot::XidSnapshot;
use tokio::sync::Notify;

use super::parts::{Request, RoundResult, Splits, TablePlan};
use super::{BackfillPhase, RETRY_DELAY, stride};
use crate::catalog::CatalogTable;
use crate::conn::sql_session::SqlSession;
use crate::snapshot::{ChunkRead, chunk_boundaries, read_chunk};
use crate::source::pending::EventQueue;
use crate::wal_page::WalPages;
use cdc_pgoutput::backfill::token_progress::key_text;

impl BackfillPhase {
    /// The most events one read round places: every reader's chunk and its markers.
    pub(crate) fn round_events(&self) -> usize {
        self.options
            .readers
            .max(1)
            .saturating_mul(self.options.chunk_rows.max(1).saturating_add(4))
    }

    /// Whether the next round may run in the background while the stream goes on (its
    /// chunks are placed only if no transaction the stream passed in the meantime is
    /// missing from their snapshots); after a round that failed that check, the next one
    /// reads with the stream paused.
    pub(crate) fn optimistic(&self) -> bool {
        self.optimistic
    }

    /// Signalled when a background round finishes (the source waits on it with the
    /// stream).
    pub(crate) fn round_notify(&self) -> Arc<Notify> {
        self.round_done.clone()
    }

    /// Whether the background round has finished and its chunks can be placed now.
    pub(crate) fn round_ready(&self) -> bool {
        self.may_place() && self.in_flight.is_some() && self.round_ready.load(Ordering::Acquire)
    }

    /// Whether chunks may be placed at the current anchor (see `floor`): not while
    /// streamed events are held (the merge has not passed them yet).
    pub(crate) fn may_place(&self) -> bool {
        self.held.is_empty()
            && self
                .floor
                .is_none_or(|floor| self.merge.processed() > floor.commit_lsn)
    }

    /// How the round's readers are shared among the pending tables: one each for up to
    /// `readers` tables; with fewer tables than readers, the rest read further chunks of
    /// the same tables (consecutive key ranges), so that one large table is read by
    /// every reader.
    fn plan_round(&mut self) -> Result<Vec<TablePlan>> {
        let readers = self.options.readers.max(1);
        let pending: Vec<usize> = self.keyed_pending().take(readers).collect();
        let mut plans = Vec::with_capacity(pending.len());
        let Some(share) = readers.checked_div(pending.len()) else {
            return Ok(plans);
        };
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
                .and_then(stride::integer_key_range);
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
            .and_then(stride::integer_key_range)
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
        if let Some(stride) = stride::stride_for(self.options.chunk_rows, rows, span) {
            self.strides.push((index, stride));
        }
    }

    /// Starts reading the next chunks in the background (see [`Self::plan_round`]).
    pub(crate) async fn start_round(&mut self) -> Result<()> {
        let plans = self.plan_round()?;
        let wanted: usize = plans.iter().map(|p| p.chunks).sum();
        while self.readers.len() < wanted {
            match SqlSession::connect(&self.options.connection).await {
                Ok(session) => self.readers.push(session),
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "cannot open a connection for the online snapshot; retrying");
                    self.not_before = Some(Instant::now() + RETRY_DELAY * 20);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        // A table shared by several readers has the ends of its next round's chunks
        // found on a connection of their own while this round reads: the round then
        // starts with its reads, without a query before them.
        if self.planner.is_none() && plans.iter().any(|p| p.chunks > 1 && !p.estimable) {
            match SqlSession::connect(&self.options.connection).await {
                Ok(session) => self.planner = Some(session),
                // Only the splits ahead are missed: they are found before the reads.
                Err(e) if e.is_transient() => {
                    tracing::debug!(error = %e, "no connection to find chunk ends ahead");
                }
                Err(e) => return Err(e),
            }
        }
        let round = Round {
            readers: std::mem::take(&mut self.readers),
            planner: self.planner.take(),
            tables: self.tables.clone(),
            limit: self.options.chunk_rows.max(1),
            in_recovery: self.options.in_recovery,
            wal: self.options.wal,
        };
        let done = self.round_done.clone();
        let ready = self.round_ready.clone();
        ready.store(false, Ordering::Release);
        self.in_flight = Some(tokio::spawn(async move {
            let result = round.read(plans).await;
            // A permit is kept if nobody waits yet, so the wake-up is never lost.
            ready.store(true, Ordering::Release);
            done.notify_one();
            result
        }));
        Ok(())
    }

    /// Waits for the background round and places its chunks (at the current anchor: the
    /// caller is between two transactions), then starts the next round in the background
    /// when one is due and may run while the stream goes on ([`Self::optimistic`]): the
    /// readers go on at once, while these rows are queued and sent (the sink takes them
    /// batch by batch, and each chunk ends a batch).
    pub(crate) async fn finish_round(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        self.place_round(out).await?;
        if self.optimistic && self.wants_chunk() {
            self.start_round().await?;
        }
        Ok(())
    }

    /// Waits for the background round and places its chunks.
    async fn place_round(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        let Some(handle) = self.in_flight.take() else {
            return Ok(());
        };
        let RoundResult {
            readers,
            planner,
            results,
            next_splits,
        } = handle
            .await
            .map_err(|e| Error::protocol(format!("the snapshot chunk reader failed: {e}")))?;
        self.readers = readers;
        self.planner = planner;
        self.splits = next_splits;
        let mut retry = false;
        let mut failed_connection = false;
        let mut missed = false;
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
                        failed_connection = true;
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
                    self.options.stats.chunk_reread();
                    retry = true;
                    missed = true;
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
        if failed_connection {
            self.readers.clear();
            self.planner = None;
        }
        self.optimistic = !missed;
        self.not_before = retry.then(|| Instant::now() + RETRY_DELAY);
        Ok(())
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
    ) -> Result<(XidSnapshot, bool)> {
        let snapshot = XidSnapshot::parse(text).map_err(|e| {
            Error::protocol(format!("the server returned a malformed snapshot: {e}"))
        })?;
        let invisible = self.merge.invisible_before_anchor(index, &snapshot, end)?;
        if !invisible.is_empty() {
            tracing::debug!(
                ?invisible,
                "a snapshot does not yet show transactions the stream passed; reading again"
            );
        }
        Ok((snapshot, invisible.is_empty()))
    }

    /// Reads the next chunks with the stream paused, and places those whose snapshot saw
    /// every transaction the stream already passed. Transient failures are retried
    /// later; others are returned.
    pub(crate) async fn read_round(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        self.start_round().await?;
        self.place_round(out).await
    }
}

/// One background read round: its connections and what it reads with.
struct Round {
    readers: Vec<SqlSession>,
    planner: Option<SqlSession>,
    tables: Arc<Vec<CatalogTable>>,
    limit: usize,
    in_recovery: bool,
    wal: WalPages,
}

impl Round {
    /// Reads the chunks `plans` ask for, each on its own connection and in its own task
    /// (rows are decoded on as many threads as there are readers). A table shared by
    /// several readers is split at the ends of its next chunks — found ahead by the
    /// previous round, else found now on its first reader — and each reader copies one
    /// range; meanwhile the planner finds the ends of the round after. Results come a
    /// table's chunks together, in key order; a table whose split failed reports that as
    /// its first chunk's result.
    async fn read(self, plans: Vec<TablePlan>) -> RoundResult {
        let Round {
            mut readers,
            planner,
            tables,
            limit,
            in_recovery,
            wal,
        } = self;
        let mut failed = Vec::new();
        let mut requests = Vec::new();
        // The splits still to find run at once, each on its table's first reader.
        let mut sessions = readers.iter_mut();
        let splits = futures::future::join_all(plans.into_iter().map(|mut plan| {
            let client = sessions.next();
            for _ in 1..plan.chunks {
                sessions.next();
            }
            let table = tables.get(plan.catalog_index);
            async move {
                let ends = match (plan.ends.take(), client, table) {
                    _ if plan.chunks <= 1 => Ok(Vec::new()),
                    (Some(ends), _, _) => Ok(ends),
                    // A table whose next ends will be estimated from this round's rows
                    // ends its round with the next rows (no ends found ahead for it).
                    (None, Some(client), Some(table)) => {
                        let count = plan.chunks - usize::from(plan.estimable);
                        chunk_boundaries(client, table, plan.after.as_deref(), limit, count).await
                    }
                    _ => Err(Error::protocol(
                        "internal: a chunk without a reader or table",
                    )),
                };
                (plan, ends)
            }
        }))
        .await;
        // What the planner looks for next: from the last end of each table whose round
        // ends at a key.
        let mut ahead = Vec::new();
        for (plan, ends) in splits {
            match ends {
                Ok(ends) => {
                    let bounded = plan.chunks > 1 && ends.len() == plan.chunks;
                    let mut after = plan.after;
                    for end in ends {
                        requests.push(Request {
                            index: plan.index,
                            catalog_index: plan.catalog_index,
                            after: after.clone(),
                            upto: Some(end.clone()),
                        });
                        after = Some(end);
                    }
                    if bounded {
                        ahead.push((plan.index, plan.catalog_index, after, plan.chunks));
                    } else {
                        // The last chunk of the round: the next rows, however far they
                        // reach (and the table's end when they are fewer than a chunk).
                        requests.push(Request {
                            index: plan.index,
                            catalog_index: plan.catalog_index,
                            after,
                            upto: None,
                        });
                    }
                }
                Err(e) => failed.push((
                    Request {
                        index: plan.index,
                        catalog_index: plan.catalog_index,
                        after: plan.after,
                        upto: None,
                    },
                    Err(e),
                )),
            }
        }
        let mut tasks = Vec::with_capacity(requests.len());
        let mut readers = readers.into_iter();
        for request in &requests {
            let Some(mut client) = readers.next() else {
                break;
            };
            let tables = tables.clone();
            let after = request.after.clone();
            let upto = request.upto.clone();
            let catalog_index = request.catalog_index;
            tasks.push(tokio::spawn(async move {
                let read = match tables.get(catalog_index) {
                    Some(table) => {
                        read_chunk(
                            &mut client,
                            table,
                            after.as_deref(),
                            upto.as_deref(),
                            limit,
                            in_recovery,
                            wal,
                        )
                        .await
                    }
                    None => Err(Error::protocol("internal: chunk of an unknown table")),
                };
                (client, read)
            }));
        }
        let plan_ahead = async {
            let mut planner = planner?;
            let mut next = Vec::new();
            for (index, catalog_index, after, chunks) in ahead {
                let Some(table) = tables.get(catalog_index) else {
                    continue;
                };
                match chunk_boundaries(&mut planner, table, after.as_deref(), limit, chunks).await {
                    Ok(ends) => next.push(Splits {
                        index,
                        exhausted: ends.len() < chunks,
                        after,
                        ends,
                    }),
                    // The next round finds them itself; a broken planner is replaced.
                    Err(e) => {
                        tracing::debug!(error = %e, "finding chunk ends ahead failed");
                        return None;
                    }
                }
            }
            Some((planner, next))
        };
        let (reads, ahead) =
            futures::future::join(futures::future::join_all(tasks), plan_ahead).await;
        let mut clients = Vec::with_capacity(reads.len());
        let mut results = Vec::with_capacity(requests.len() + failed.len());
        let mut reads = reads.into_iter();
        for request in requests {
            let read = match reads.next() {
                Some(Ok((client, read))) => {
                    clients.push(client);
                    read
                }
                // The task panicked: its connection is gone (a new one is opened).
                Some(Err(e)) => Err(Error::protocol(format!(
                    "the snapshot chunk reader failed: {e}"
                ))),
                None => Err(Error::protocol("internal: a chunk without a reader")),
            };
            results.push((request, read));
        }
        clients.extend(readers);
        results.extend(failed);
        let (planner, next_splits) = match ahead {
            Some((planner, next)) => (Some(planner), next),
            None => (None, Vec::new()),
        };
        RoundResult {
            readers: clients,
            planner,
            results,
            next_splits,
        }
    }
}
