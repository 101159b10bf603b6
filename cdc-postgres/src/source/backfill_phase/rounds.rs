//! Read rounds of the online snapshot, as the driver does them: the plans come from
//! `OnlineSnapshot::plan_round`, the chunks are read on connections of their own (in a
//! background task while the stream goes on, or with it paused), and the reads go to
//! `OnlineSnapshot::place_round`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cdc_core::{Error, Result};
use cdc_pgoutput::backfill::online::{Ahead, Splits, TablePlan};
use tokio::sync::Notify;

use super::{BackfillPhase, RoundResult};
use crate::catalog::CatalogTable;
use crate::conn::sql_session::SqlSession;
use crate::snapshot::{chunk_boundaries, read_chunk};
use crate::source::pending::EventQueue;
use crate::wal_page::WalPages;

impl BackfillPhase {
    /// Signalled when a background round finishes (the source waits on it with the
    /// stream).
    pub(crate) fn round_notify(&self) -> Arc<Notify> {
        self.round_done.clone()
    }

    /// Starts reading the next chunks in the background (see
    /// `OnlineSnapshot::plan_round`).
    pub(crate) async fn start_round(&mut self) -> Result<()> {
        let plans = self
            .state
            .plan_round(std::mem::take(&mut self.next_splits))?;
        if plans.is_empty() {
            return Ok(());
        }
        let wanted: usize = plans.iter().map(|p| p.chunks).sum();
        while self.readers.len() < wanted {
            match SqlSession::connect(&self.options.connection).await {
                Ok(session) => self.readers.push(session),
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "cannot open a connection for the online snapshot; retrying");
                    self.state.round_not_started(Instant::now());
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
    /// when one is due and may run while the stream goes on (`optimistic`): the readers
    /// go on at once, while these rows are queued and sent (the sink takes them batch by
    /// batch, and each chunk ends a batch).
    pub(crate) async fn finish_round(&mut self, out: &mut EventQueue<'_>) -> Result<()> {
        self.place_round(out).await?;
        if self.state.optimistic() && self.state.wants_chunk(Instant::now()) {
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
        self.next_splits = next_splits;
        let outcome = self.state.place_round(results, Instant::now(), out)?;
        for _ in 0..outcome.rereads {
            self.options.stats.chunk_reread();
        }
        if outcome.failed_connection {
            self.readers.clear();
            self.planner = None;
        }
        Ok(())
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
                    let (reads, next) = plan.requests(ends);
                    requests.extend(reads);
                    ahead.extend(next);
                }
                Err(e) => failed.push((plan.failed_request(), Err(e))),
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
            for Ahead {
                index,
                catalog_index,
                after,
                chunks,
            } in ahead
            {
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
