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
mod batching;
mod options;
mod pending;
mod reconnect;
mod slot_poller;
mod snapshot_phase;
mod spill;
mod start;
mod stats;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cdc_core::{
    ChangeBatch, ConfirmHandle, Error, ErrorKind, Lsn, Result, ResumeToken, Source, SourceIdentity,
};

pub use cdc_pgoutput::changes::SchemaChangePolicy;
pub use options::{PgSourceOptions, ReconnectPolicy, SlotPolicy};
pub use spill::TempFileSpill;
pub use stats::{SlotRetention, SourceState, SourceStats, SourceStatsSnapshot, TableReadWhole};

use self::backfill_phase::BackfillPhase;
use self::pending::EventQueue;
use self::snapshot_phase::SnapshotPhase;
use crate::catalog::CatalogTable;
use crate::conn::{PgOutputOptions, ReplicationConnection, ReplicationStream};
use crate::wal_page::WalPages;
use cdc_pgoutput::changes::AssemblerConfig;
use cdc_pgoutput::machine::batches::BatchRules;
use cdc_pgoutput::machine::source::{
    Action, BackfillStep, MachineConfig, Phase, SourceMachine, StreamMerge,
};
use cdc_pgoutput::protocol::pgoutput::{DecoderOptions, ProtocolVersion};
use cdc_pgoutput::protocol::replication::ServerMessage;

/// Streams a PostgreSQL publication's tables: snapshot first (per the snapshot mode), then
/// every change, in bounded batches; confirms to the slot only what the pipeline says is
/// acknowledged. See the crate documentation for guarantees.
#[derive(Debug)]
pub struct PgSource {
    options: PgSourceOptions,
    /// The decisions: phases, batches, progress, the assembler (see
    /// `cdc_pgoutput::machine::source`). This type performs its actions.
    machine: SourceMachine,
    /// The consistent snapshot being copied (the machine's `Snapshot` phase).
    snapshot: Option<Box<SnapshotPhase>>,
    identity: Option<SourceIdentity>,
    tables: Arc<Vec<CatalogTable>>,
    stream: Option<ReplicationStream>,
    pgoutput: Option<PgOutputOptions>,
    server_version: u32,
    /// The server's `shared_buffers` in pages (0: unknown); see `snapshot::copy::plan`.
    shared_buffer_pages: i64,
    slot: String,
    /// Where the pipeline reports what may be confirmed.
    confirm: ConfirmHandle,
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
    stats: SourceStats,
    /// The state last reported to `stats`.
    reported_state: SourceState,
    /// Whether the statistics know that the run copies rows.
    reported_copying: bool,
    slot_poller: Option<slot_poller::SlotPoller>,
    /// The preflight report of `check`, for the `start` that follows it.
    checked: Option<crate::conn::PreflightReport>,
    /// The sink takes row blocks: the consistent snapshot's rows go out undecoded.
    row_blocks: bool,
}

impl PgSource {
    /// A source with `options`; nothing connects before [`Source::start`].
    pub fn new(options: PgSourceOptions) -> Self {
        let limits = options.config.batch;
        let machine = SourceMachine::new(MachineConfig {
            batch: BatchRules {
                max_events: limits.max_events,
                max_bytes: limits.max_bytes,
                max_latency: limits.max_latency,
            },
            progress_interval: options.progress_interval,
            end: options.end_lsn,
        });
        PgSource {
            slot: options.config.slot_name(),
            options,
            machine,
            snapshot: None,
            identity: None,
            tables: Arc::new(Vec::new()),
            stream: None,
            pgoutput: None,
            server_version: 0,
            shared_buffer_pages: 0,
            confirm: ConfirmHandle::default(),
            snapshot_progress: None,
            parked: None,
            creating_slot: None,
            in_recovery: false,
            wal: WalPages::default(),
            backfill: None,
            backfill_progress: None,
            stats: SourceStats::default(),
            reported_state: SourceState::Starting,
            reported_copying: false,
            slot_poller: None,
            checked: None,
            row_blocks: false,
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
        let state = match self.machine.phase() {
            Phase::NotStarted => SourceState::Starting,
            Phase::Snapshot => SourceState::Snapshot,
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
            routing: self.routing(),
            schema_policy: self.options.schema_policy,
            messages: self.options.messages.clone(),
            stream_memory_limit: self.options.stream_memory_limit,
            spill: TempFileSpill::shared(),
        }
    }

    /// Passes the pipeline's latest confirmation to the replication stream.
    fn apply_confirmation(&mut self) {
        if let Some(lsn) = self.machine.confirm(self.confirm.confirmed()) {
            self.stats.confirmed(lsn);
            if let Some(stream) = &self.stream {
                stream.set_flushed(lsn);
                stream.send_status_now();
            }
        }
    }

    /// The merge of the online snapshot, while one runs, as the machine sees it.
    fn merge(backfill: &mut Option<BackfillPhase>) -> Option<&mut dyn StreamMerge> {
        backfill.as_mut().map(|b| b as &mut dyn StreamMerge)
    }
}

#[async_trait]
impl Source for PgSource {
    /// With a sink that takes row blocks, the consistent snapshot hands its rows on
    /// undecoded (`EventKind::InsertBlock`); the online snapshot's chunks are decoded
    /// either way (their keys place them in the stream).
    fn offer_row_blocks(&mut self, sink_takes_them: bool) {
        self.row_blocks = sink_takes_them;
    }

    async fn start(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
        // A previous consumer's walsender may still hold the slot for a moment, the server
        // may be restarting: transient failures are retried like a lost connection.
        let mut retries = options::Retries::new(
            self.options.reconnect,
            "attempts to start",
            "cannot start yet; retrying",
        );
        loop {
            match self.start_once(resume).await {
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
                    let copying = self.machine.phase() == Phase::Snapshot
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

    fn commit_mode(&self) -> cdc_core::CommitMode {
        self.options.config.commit_mode
    }

    async fn check(&mut self) -> Result<()> {
        self.check_server().await
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
            let action = self
                .machine
                .poll(Instant::now(), Self::merge(&mut self.backfill))?;
            match action {
                Action::HandOut => return Ok(Some(self.take_batch())),
                Action::Done => return Ok(None),
                Action::NotStarted => {
                    return Err(Error::config("next_batch called before start"));
                }
                Action::PullSnapshot => self.pull_snapshot().await?,
                Action::Backfill(step) => self.backfill_step(step).await?,
                Action::TakeReady => {
                    let ready = self.stream.as_mut().and_then(|s| s.try_next_chunk());
                    if let Some(messages) = &ready {
                        self.stats_received(messages);
                    }
                    self.machine.ready(ready);
                }
                Action::Wait { wait, caught_up } => self.wait(wait, caught_up).await?,
            }
        }
    }

    /// Copies more of the consistent snapshot; once it is all copied, starts the stream.
    async fn pull_snapshot(&mut self) -> Result<()> {
        let Some(snapshot) = self.snapshot.as_mut() else {
            return Err(Error::protocol(
                "internal: snapshot phase without a snapshot",
            ));
        };
        if !snapshot.is_finished() {
            let pulled = snapshot
                .pull(&mut EventQueue(self.machine.pending_mut()))
                .await;
            if let Err(e) = pulled {
                if !e.is_transient() {
                    return Err(e);
                }
                self.retry_snapshot(e).await?;
            }
            return Ok(());
        }
        // Streaming starts at the consistent point, confirmable once the snapshot is
        // acknowledged.
        let consistent_point = snapshot.consistent_point();
        self.after_snapshot().await?;
        self.machine.snapshot_copied(consistent_point);
        self.snapshot = None;
        self.snapshot_progress = None;
        // From here the tokens record the table set, every table copied (a later run
        // learns which tables are new to the stream, or gone).
        self.backfill_progress = Some(BackfillPhase::all_done(&self.tables));
        Ok(())
    }

    /// Performs the online snapshot's `step`.
    async fn backfill_step(&mut self, step: BackfillStep) -> Result<()> {
        let Some(backfill) = self.backfill.as_mut() else {
            return Ok(());
        };
        let mut queue = EventQueue(self.machine.pending_mut());
        match step {
            // Events held for the server's key comparisons go on (one query for all).
            BackfillStep::ResolveHeld => backfill.resolve_held(&mut queue).await,
            // A table without a primary key is read whole while the stream waits (see
            // `backfill_phase::whole`): its pieces go in one after the other, with
            // nothing from the stream between them.
            BackfillStep::NextWholePiece => backfill.next_whole_piece(&mut queue).await,
            // A round read in the background goes in at a transaction boundary (if the
            // transactions passed meanwhile are all in its snapshots); the next round
            // starts as soon as this one is placed, not once these rows went out.
            BackfillStep::FinishRound => backfill.finish_round(&mut queue).await,
            // The next chunks are read while the stream and the sink go on.
            BackfillStep::StartRound => backfill.start_round().await,
            // After a round whose snapshot missed a transaction the stream passed: read
            // with the stream paused, which cannot miss one.
            BackfillStep::ReadRoundPaused => backfill.read_round(&mut queue).await,
            BackfillStep::StartWhole => backfill.start_whole(&mut queue).await,
        }
    }

    /// Counts received messages in the statistics.
    fn stats_received(&self, messages: &[ServerMessage]) {
        for message in messages {
            match message {
                ServerMessage::XLogData(data) => {
                    self.stats.message(data.data.len(), data.wal_end);
                    self.stats.received(data.wal_start);
                }
                ServerMessage::PrimaryKeepalive(keepalive) => {
                    self.stats.message(0, keepalive.wal_end);
                }
            }
        }
    }

    /// Waits up to `wait` for the stream, a confirmation or a background round.
    async fn wait(&mut self, wait: Duration, caught_up: bool) -> Result<()> {
        if let Some(assembler) = self.machine.assembler() {
            self.stats.buffers(
                assembler.buffered_bytes(),
                assembler.spilled_bytes(),
                assembler.prepared_waiting(),
            );
        }
        self.stats.caught_up(caught_up);
        let Some(stream) = self.stream.as_mut() else {
            return self
                .reconnect(Error::transient("no replication stream"), "no_stream")
                .await;
        };
        let confirm = self.confirm.clone();
        let round_done = self.backfill.as_ref().map(BackfillPhase::round_notify);
        let received = tokio::select! {
            received = stream.next_chunk() => received,
            // A confirmation goes to the server at once, even while waiting.
            _ = confirm.changed() => return Ok(()),
            // A background chunk read finished: place it without waiting for a timer.
            () = async {
                match &round_done {
                    Some(done) => done.notified().await,
                    None => std::future::pending().await,
                }
            } => return Ok(()),
            _ = tokio::time::sleep(wait) => {
                self.machine.waited();
                return Ok(());
            }
        };
        match received {
            Ok(Some(messages)) => {
                if !messages.is_empty() {
                    self.stats.caught_up(false);
                }
                self.stats_received(&messages);
                self.machine.receive(messages);
                Ok(())
            }
            Ok(None) => {
                self.machine.waited();
                self.reconnect(
                    Error::transient("the server ended the replication stream"),
                    "server_ended",
                )
                .await
            }
            Err(e) if e.kind() == ErrorKind::Transient => {
                self.machine.waited();
                self.reconnect(e, "connection_lost").await
            }
            Err(e) => Err(e),
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
            self.machine
                .batches()
                .covered_position()
                .max(batch.last_position()),
        );
        token.commit_end = self.machine.batches().covered_end().max(batch.commit_end);
        token.complete_end = self
            .machine
            .batches()
            .complete_upto()
            .filter(|&c| Some(c) > token.commit_end);
        token.snapshot = self.snapshot_progress.clone();
        token.backfill = self.backfill_progress.clone();
        token
    }

    async fn abandon(&mut self) -> Result<()> {
        self.machine.set_phase(Phase::Ended);
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
        self.machine.set_phase(Phase::Ended);
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
