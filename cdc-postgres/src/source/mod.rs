//! `PgSource`: a consistent initial snapshot, then the slot's change stream, as a
//! [`cdc_core::Source`].
//!
//! - [`catalog`](crate::catalog): what the catalog says about the configured tables.
//! - `start`: the decisions at start — resume, redo an interrupted snapshot, create the
//!   slot — each checked against the slot's state.
//! - `snapshot_phase`: snapshot rows and markers with positions.
//! - this module: batching, progress, end position, reconnect.

mod backfill_keys;
mod backfill_phase;
mod backfill_progress;
mod batching;
mod options;
mod pending;
mod reconnect;
mod slot_poller;
mod snapshot_phase;
mod spill;
mod start;
mod stats;
mod table_set;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cdc_core::{
    ChangeBatch, ChangeEvent, ConfirmHandle, Error, ErrorKind, Lsn, Result, ResumeToken, Source,
    SourceIdentity,
};

pub use options::{PgSourceOptions, ReconnectPolicy};
pub use spill::TempFileSpill;
pub use stats::{SlotRetention, SourceState, SourceStats, SourceStatsSnapshot, TableReadWhole};

use self::backfill_phase::BackfillPhase;
use self::pending::EventQueue;
use self::pending::Pending;
use self::snapshot_phase::SnapshotPhase;
use crate::catalog::CatalogTable;
use crate::conn::{PgOutputOptions, ReplicationConnection, ReplicationStream};
use crate::wal_page::WalPages;
use cdc_pgoutput::changes::{AssemblerConfig, ChangeAssembler};
use cdc_pgoutput::machine::batches::{BatchRules, Batches};
use cdc_pgoutput::machine::progress::{StreamProgress, held_back};
use cdc_pgoutput::machine::schedule::{self, LoopFacts, Step};
use cdc_pgoutput::protocol::pgoutput::{DecoderOptions, ProtocolVersion};
use cdc_pgoutput::protocol::replication::ServerMessage;

/// What the source is doing.
#[derive(Debug)]
enum Phase {
    NotStarted,
    Snapshot(Box<SnapshotPhase>),
    Streaming,
    Ended,
}

/// Streams a PostgreSQL publication's tables: snapshot first (per the snapshot mode), then
/// every change, in bounded batches; confirms to the slot only what the pipeline says is
/// acknowledged. See the crate documentation for guarantees.
#[derive(Debug)]
pub struct PgSource {
    options: PgSourceOptions,
    phase: Phase,
    identity: Option<SourceIdentity>,
    tables: Arc<Vec<CatalogTable>>,
    assembler: Option<ChangeAssembler>,
    stream: Option<ReplicationStream>,
    pgoutput: Option<PgOutputOptions>,
    server_version: u32,
    /// The server's `shared_buffers` in pages (0: unknown); see `snapshot::copy::plan`.
    shared_buffer_pages: i64,
    slot: String,
    /// The pending queue, the batch being built (kept here so a cancelled `next_batch`
    /// loses nothing) and what the handed-out batches cover.
    batches: Batches,
    /// An idle stream's progress and the end position.
    progress: StreamProgress,
    confirmed: Lsn,
    /// Where the pipeline reports what may be confirmed.
    confirm: ConfirmHandle,
    scratch: Vec<ChangeEvent>,
    /// Replication messages received and not yet processed (processing pauses while a
    /// committed streamed transaction is released).
    inbox: VecDeque<ServerMessage>,
    snapshot_progress: Option<cdc_core::SnapshotProgress>,
    /// The replication session that created the slot, kept idle while the snapshot it
    /// exported is being copied.
    parked: Option<ReplicationConnection>,
    /// The walsender that `start` asked to create the slot (to end it and drop the slot
    /// if `start` is abandoned).
    creating_slot: Option<i32>,
    /// Whether the server is a standby (slot creation waits for the primary there).
    in_recovery: bool,
    /// The server's WAL page sizes, read at start (see `wal_page`).
    wal: WalPages,
    /// The online snapshot, while it runs alongside the stream.
    backfill: Option<BackfillPhase>,
    /// The online snapshot's progress as of the batches handed out (for tokens).
    backfill_progress: Option<cdc_core::BackfillProgress>,
    /// The stream has had its turn since the last chunk round (chunks and the stream
    /// alternate, so the slot keeps advancing while a snapshot runs).
    stream_had_turn: bool,
    /// The batch being built already took what the stream had read (see `next_batch`).
    took_ready: bool,
    stats: SourceStats,
    /// The state last reported to `stats`.
    reported_state: SourceState,
    slot_poller: Option<slot_poller::SlotPoller>,
}

impl PgSource {
    /// A source with `options`; nothing connects before [`Source::start`].
    pub fn new(options: PgSourceOptions) -> Self {
        let limits = options.config.batch;
        let progress = StreamProgress::new(options.progress_interval, options.end_lsn);
        let rules = BatchRules {
            max_events: limits.max_events,
            max_bytes: limits.max_bytes,
            max_latency: limits.max_latency,
        };
        PgSource {
            slot: options.config.slot_name(),
            options,
            phase: Phase::NotStarted,
            identity: None,
            tables: Arc::new(Vec::new()),
            assembler: None,
            stream: None,
            pgoutput: None,
            server_version: 0,
            shared_buffer_pages: 0,
            batches: Batches::new(rules),
            progress,
            confirmed: Lsn::ZERO,
            confirm: ConfirmHandle::default(),
            scratch: Vec::new(),
            inbox: VecDeque::new(),
            snapshot_progress: None,
            parked: None,
            creating_slot: None,
            in_recovery: false,
            wal: WalPages::default(),
            backfill: None,
            backfill_progress: None,
            stream_had_turn: true,
            took_ready: false,
            stats: SourceStats::default(),
            reported_state: SourceState::Starting,
            slot_poller: None,
        }
    }

    /// The slot this source streams from.
    pub fn slot_name(&self) -> &str {
        &self.slot
    }

    /// The stream's identity, once started.
    pub fn identity(&self) -> Option<&SourceIdentity> {
        self.identity.as_ref()
    }

    /// The configured tables as the catalog described them at start.
    pub fn tables(&self) -> &[CatalogTable] {
        &self.tables
    }

    /// The source's live statistics (a shared handle: take it before the pipeline owns
    /// the source, read it from anywhere while it runs).
    pub fn stats(&self) -> SourceStats {
        self.stats.clone()
    }

    /// Reports the current state to the statistics when it changed.
    fn report_state(&mut self) {
        let state = match &self.phase {
            Phase::NotStarted => SourceState::Starting,
            Phase::Snapshot(_) => SourceState::Snapshot,
            Phase::Ended => SourceState::Stopped,
            Phase::Streaming if self.backfill.is_some() => SourceState::Backfilling,
            Phase::Streaming => SourceState::Streaming,
        };
        if state != self.reported_state {
            self.reported_state = state;
            self.stats.set_state(state, None);
        }
    }

    /// The highest WAL position received from the server.
    pub fn received_lsn(&self) -> Lsn {
        self.stream.as_ref().map_or(Lsn::ZERO, |s| s.received())
    }

    fn assembler_config(&self, version: ProtocolVersion) -> AssemblerConfig {
        AssemblerConfig {
            decoder: DecoderOptions::new(version).with_parallel_streaming(
                self.pgoutput
                    .as_ref()
                    .is_some_and(|p| p.streaming == crate::conn::Streaming::Parallel),
            ),
            routing: start::routing(&self.tables),
            schema_policy: self.options.schema_policy,
            messages: self.options.messages.clone(),
            stream_memory_limit: self.options.stream_memory_limit,
            spill: TempFileSpill::shared(),
        }
    }

    fn latency_expired(&self) -> bool {
        self.batches.latency_expired(Instant::now())
    }

    /// What the streaming loop knows, for `schedule::next_step`.
    fn loop_facts(&self) -> LoopFacts {
        LoopFacts {
            latency_expired: self.latency_expired(),
            replaying: self.assembler.as_ref().is_some_and(|a| a.replaying()),
            between_transactions: self.between_transactions(),
            inbox: self.inbox.len(),
            pending: self.batches.pending_len(),
            max_events: self.options.config.batch.max_events,
            building_empty: self.batches.building().is_empty(),
            took_ready: self.took_ready,
            stream_had_turn: self.stream_had_turn,
            backfill: self.backfill.as_ref().map(BackfillPhase::facts),
        }
    }

    fn reached_end(&self) -> bool {
        let nothing_waiting = self.batches.pending_len() == 0 && self.inbox.is_empty();
        !self.holding()
            && self
                .progress
                .reached_end(&self.batches, self.confirmed, nothing_waiting)
    }

    /// Passes the pipeline's latest confirmation to the replication stream.
    fn apply_confirmation(&mut self) {
        let lsn = self.confirm.confirmed();
        if lsn > self.confirmed {
            self.confirmed = lsn;
            self.stats.confirmed(lsn);
            if let Some(stream) = &self.stream {
                stream.set_flushed(lsn);
                stream.send_status_now();
            }
        }
    }

    /// Processes one replication message into pending items.
    fn process_message(&mut self, message: ServerMessage) -> Result<()> {
        let Some(assembler) = self.assembler.as_mut() else {
            return Err(Error::protocol("internal: streaming without an assembler"));
        };
        match message {
            ServerMessage::XLogData(data) => {
                self.stats.message(data.data.len(), data.wal_end);
                self.stats.received(data.wal_start);
                let end = assembler.process(data.data, &mut self.scratch)?;
                let hold = assembler.confirm_hold();
                self.stats.buffers(
                    assembler.buffered_bytes(),
                    assembler.spilled_bytes(),
                    assembler.prepared_waiting(),
                );
                self.queue_scratch()?;
                if let Some(end) = end {
                    self.push_end(end, hold);
                }
            }
            ServerMessage::PrimaryKeepalive(keepalive) => {
                self.stats.message(0, keepalive.wal_end);
                // The WAL end a keepalive reports has been decoded and sent: with no
                // transaction open, nothing before it is still coming.
                if !assembler.in_transaction() && !assembler.replaying() {
                    self.progress
                        .idle(keepalive.wal_end, assembler.confirm_hold());
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill.progress(keepalive.wal_end);
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves the assembler's events into the pending queue, through the online snapshot's
    /// merge while one runs.
    fn queue_scratch(&mut self) -> Result<()> {
        match self.backfill.as_mut() {
            None => self
                .batches
                .pending_mut()
                .extend(self.scratch.drain(..).map(Pending::Event)),
            Some(backfill) => {
                for event in self.scratch.drain(..) {
                    if let Some(event) = backfill.on_event(event)? {
                        self.batches.push_event(event);
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the stream stands between two transactions (a chunk may be placed here).
    fn between_transactions(&self) -> bool {
        self.assembler
            .as_ref()
            .is_some_and(|a| !a.in_transaction() && !a.replaying())
    }

    /// Releases the next bounded part of a committed streamed transaction, if one is
    /// being released; false otherwise.
    fn continue_replay(&mut self) -> Result<bool> {
        let Some(assembler) = self.assembler.as_mut() else {
            return Ok(false);
        };
        if !assembler.replaying() {
            return Ok(false);
        }
        let end =
            assembler.continue_replay(&mut self.scratch, self.options.config.batch.max_events)?;
        let hold = assembler.confirm_hold();
        self.queue_scratch()?;
        if let Some(end) = end {
            self.push_end(end, hold);
        }
        Ok(true)
    }

    /// A transaction ended at `end`: tokens may cover up to there, but no further than
    /// `hold` (the earliest PREPARE of a prepared transaction still waiting, which the
    /// server sends again only to a session starting at or before it).
    fn push_end(&mut self, end: Lsn, hold: Option<Lsn>) {
        self.progress.passed(end);
        let end = held_back(end, hold);
        // Behind events held for the server's key comparisons, the end waits with them.
        if !self.backfill.as_mut().is_some_and(|b| b.hold_end(end)) {
            self.batches.push_end(end);
        }
    }

    /// Whether streamed items wait for the server's key comparisons (see
    /// `backfill_phase::server_order`): until they go on, nothing after them may be
    /// handed out as progress.
    fn holding(&self) -> bool {
        self.backfill.as_ref().is_some_and(BackfillPhase::holding)
    }
}

#[async_trait]
impl Source for PgSource {
    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
        // A previous consumer's walsender may still hold the slot for a moment, the server
        // may be restarting: transient failures are retried like a lost connection.
        let mut retries = options::Retries::new(
            self.options.reconnect,
            "attempts to start",
            "cannot start yet; retrying",
        );
        loop {
            match start::start(self, resume).await {
                Ok(lsn) => {
                    if let Some(interval) = self.options.slot_poll_interval {
                        self.slot_poller = Some(slot_poller::SlotPoller::spawn(
                            self.options.config.connection.clone(),
                            self.slot.clone(),
                            interval,
                            self.stats.clone(),
                        ));
                    }
                    self.report_state();
                    let copying = matches!(self.phase, Phase::Snapshot(_))
                        || self.backfill.as_ref().is_some_and(BackfillPhase::copies);
                    self.stats.started(copying);
                    return Ok(lsn);
                }
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(retries.after_failure(e)?).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        let result = self.next_batch_inner().await;
        match &result {
            Ok(Some(_)) => {}
            Ok(None) => self.stats.set_state(SourceState::Stopped, None),
            Err(e) => self
                .stats
                .set_state(SourceState::Stopped, Some(e.to_string())),
        }
        result
    }

    fn resume_token(&self, batch: &ChangeBatch) -> ResumeToken {
        self.resume_token_for(batch)
    }

    fn confirm_handle(&self) -> ConfirmHandle {
        self.confirm.clone()
    }

    async fn abandon_start(&mut self) -> Result<()> {
        self.abandon().await
    }

    async fn close(&mut self) -> Result<()> {
        self.close_stream().await
    }
}

impl PgSource {
    async fn next_batch_inner(&mut self) -> Result<Option<ChangeBatch>> {
        loop {
            self.report_state();
            self.apply_confirmation();
            if self.fill() {
                return Ok(Some(self.take_batch()));
            }
            // With an online snapshot running, the end waits for it: a stream that stops
            // at an LSN stops with every table complete.
            if self.reached_end()
                && matches!(self.phase, Phase::Streaming)
                && self.backfill.is_none()
            {
                self.phase = Phase::Ended;
            }
            match &mut self.phase {
                Phase::NotStarted => {
                    return Err(Error::config("next_batch called before start"));
                }
                Phase::Ended => {
                    if self.batches.has_final_batch() {
                        return Ok(Some(self.take_batch()));
                    }
                    return Ok(None);
                }
                Phase::Snapshot(snapshot) if !snapshot.is_finished() => {
                    let pulled = snapshot
                        .pull(&mut EventQueue(self.batches.pending_mut()))
                        .await;
                    if let Err(e) = pulled {
                        if !e.is_transient() {
                            return Err(e);
                        }
                        self.retry_snapshot(e).await?;
                    }
                    continue;
                }
                Phase::Snapshot(snapshot) => {
                    // Streaming starts at the consistent point, confirmable once the
                    // snapshot is acknowledged.
                    let consistent_point = snapshot.consistent_point();
                    start::after_snapshot(self).await?;
                    self.batches.push_end(consistent_point);
                    self.fill();
                    self.snapshot_progress = None;
                    // From here the tokens record the table set, every table copied (a
                    // later run learns which tables are new to the stream, or gone).
                    self.backfill_progress = Some(BackfillPhase::all_done(&self.tables));
                    return Ok(Some(self.take_batch()));
                }
                Phase::Streaming => {}
            }
            let facts = self.loop_facts();
            match schedule::next_step(&facts) {
                Step::HandOut => return Ok(Some(self.take_batch())),
                Step::ContinueReplay => {
                    self.continue_replay()?;
                    continue;
                }
                // Events held for the server's key comparisons go on (one query for all).
                Step::ResolveHeld => {
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill
                            .resolve_held(&mut EventQueue(self.batches.pending_mut()))
                            .await?;
                    }
                    continue;
                }
                // A table without a primary key is read whole while the stream waits (see
                // `backfill_phase::whole`): its pieces go in one after the other, with
                // nothing from the stream between them.
                Step::NextWholePiece => {
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill
                            .next_whole_piece(&mut EventQueue(self.batches.pending_mut()))
                            .await?;
                    }
                    continue;
                }
                // A round read in the background goes in at a transaction boundary (if the
                // transactions passed meanwhile are all in its snapshots); the next round
                // starts as soon as this one is placed, not once these rows went out.
                Step::FinishRound => {
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill
                            .finish_round(&mut EventQueue(self.batches.pending_mut()))
                            .await?;
                    }
                    continue;
                }
                // The next chunks are read while the stream and the sink go on.
                Step::StartRound => {
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill.start_round().await?;
                    }
                    continue;
                }
                // After a round whose snapshot missed a transaction the stream passed:
                // read with the stream paused, which cannot miss one.
                Step::ReadRoundPaused => {
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill
                            .read_round(&mut EventQueue(self.batches.pending_mut()))
                            .await?;
                    }
                    self.stream_had_turn = false;
                    continue;
                }
                Step::StartWhole => {
                    if let Some(backfill) = self.backfill.as_mut() {
                        backfill
                            .start_whole(&mut EventQueue(self.batches.pending_mut()))
                            .await?;
                    }
                    self.stream_had_turn = false;
                    continue;
                }
                Step::ProcessMessage => {
                    if let Some(message) = self.inbox.pop_front() {
                        self.process_message(message)?;
                    }
                    continue;
                }
                // Everything received is processed: what the stream had already read goes
                // in first, once, then the batch goes out without waiting for its limits.
                Step::TakeReadyOrHandOut => {
                    if let Some(more) = self.stream.as_mut().and_then(|s| s.try_next_chunk()) {
                        self.took_ready = true;
                        self.inbox.extend(more);
                        continue;
                    }
                    return Ok(Some(self.take_batch()));
                }
                Step::Idle => {}
            }
            // Idle progress: nothing pending or being built, and the server's WAL end
            // moved past what the batches cover.
            if schedule::may_hand_out_idle_progress(&facts)
                && self
                    .progress
                    .idle_batch_due(Instant::now(), &mut self.batches)
            {
                return Ok(Some(self.take_batch()));
            }
            let wait = schedule::idle_wait(
                &facts,
                self.batches.latency_left(Instant::now()),
                self.options.progress_interval,
            );
            self.stats.caught_up(
                self.inbox.is_empty()
                    && !self.holding()
                    && self.batches.pending_len() == 0
                    && self.batches.building().is_empty()
                    && self.between_transactions(),
            );
            let Some(stream) = self.stream.as_mut() else {
                self.reconnect(Error::transient("no replication stream"), "no_stream")
                    .await?;
                continue;
            };
            let confirm = self.confirm.clone();
            let round_done = self.backfill.as_ref().map(BackfillPhase::round_notify);
            let received = tokio::select! {
                received = stream.next_chunk() => received,
                // A confirmation goes to the server at once, even while waiting.
                _ = confirm.changed() => continue,
                // A background chunk read finished: place it without waiting for a timer.
                () = async {
                    match &round_done {
                        Some(done) => done.notified().await,
                        None => std::future::pending().await,
                    }
                } => continue,
                _ = tokio::time::sleep(wait) => {
                    self.stream_had_turn = true;
                    continue;
                }
            };
            self.stream_had_turn = true;
            match received {
                Ok(Some(messages)) => {
                    if !messages.is_empty() {
                        self.stats.caught_up(false);
                    }
                    self.inbox.extend(messages);
                }
                Ok(None) => {
                    self.reconnect(
                        Error::transient("the server ended the replication stream"),
                        "server_ended",
                    )
                    .await?;
                }
                Err(e) if e.kind() == ErrorKind::Transient => {
                    self.reconnect(e, "connection_lost").await?
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn resume_token_for(&self, batch: &ChangeBatch) -> ResumeToken {
        let identity = self.identity.clone().unwrap_or(SourceIdentity {
            system_identifier: String::new(),
            timeline: 0,
            database: String::new(),
            slot: self.slot.clone(),
        });
        let mut token = ResumeToken::new(
            identity,
            self.batches.covered_position().max(batch.last_position()),
        );
        token.commit_end = self.batches.covered_end().max(batch.commit_end);
        token.snapshot = self.snapshot_progress.clone();
        token.backfill = self.backfill_progress.clone();
        token
    }

    async fn abandon(&mut self) -> Result<()> {
        self.phase = Phase::Ended;
        self.parked = None;
        self.stream = None;
        let Some(walsender) = self.creating_slot else {
            return Ok(());
        };
        // The slot was being created (or was created) by this start, so no sink holds a
        // token for it: drop it rather than leave it retaining WAL. Our walsender may not
        // have noticed yet that its client is gone (it can sit waiting for WAL), so end it
        // first: a creation cut short is then undone by the server, and the drop finds
        // nothing. Bounded, so a stop stays prompt.
        let drop = async {
            let sql = crate::conn::connect_sql(&self.options.config.connection).await?;
            if let Err(e) = sql
                .execute("SELECT pg_terminate_backend($1)", &[&walsender])
                .await
            {
                tracing::debug!(error = %e, walsender, "could not end the abandoned walsender");
            }
            let mut repl = ReplicationConnection::connect(&self.options.config.connection).await?;
            let dropped = repl.drop_slot(&self.slot, true).await;
            repl.close().await;
            match dropped {
                Ok(()) => {
                    tracing::warn!(slot = %self.slot, "dropped the slot this run created but never used");
                    Ok(())
                }
                Err(e) if e.kind() == ErrorKind::ResyncRequired => Ok(()), // never created
                Err(e) => Err(e),
            }
        };
        match tokio::time::timeout(Duration::from_secs(10), drop).await {
            Ok(result) => result,
            Err(_) => Err(Error::transient(format!(
                "stopped while creating replication slot {:?}, and could not drop it within 10 s: \
                 check pg_replication_slots and drop it if it is there (pgcdc drop-slot)",
                self.slot
            ))),
        }
    }

    async fn close_stream(&mut self) -> Result<()> {
        self.phase = Phase::Ended;
        self.slot_poller = None;
        self.report_state();
        // The pipeline's final confirmation (after its last checkpoint) arrives after the
        // last `next_batch`: pass it on, so the stream's farewell status update carries it
        // and the slot ends where the sink's state does.
        self.apply_confirmation();
        if let Some(stream) = self.stream.take() {
            stream.close().await?;
        }
        Ok(())
    }
}
