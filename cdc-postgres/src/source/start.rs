//! What happens at start: preflight, identity and resume checks, and the choice between
//! resuming the stream, redoing an interrupted snapshot, and creating the slot.

use std::sync::Arc;

use cdc_core::{
    BackfillProgress, ChangeEvent, Error, EventKind, Lsn, Position, Result, ResumeToken,
    SnapshotMarker, SourceIdentity, TableName,
};

use super::PgSource;
use super::backfill_phase::{BackfillOptions, BackfillPhase};
use super::snapshot_phase::SnapshotPhase;
use crate::catalog::{self, CatalogTable};
use crate::conn::{
    CreateSlotOptions, CreatedSlot, PgOutputOptions, PreflightOptions, ReplicationConnection,
    SnapshotAction, SnapshotMode, check_resume, connect_sql, preflight,
};
use crate::snapshot::copy;
use crate::source::pending::EventQueue;
use crate::wal_page::WalPages;
use cdc_pgoutput::changes::{ChangeAssembler, TableRouting};
use cdc_pgoutput::machine::source::Phase;
use cdc_pgoutput::machine::start::{
    AfterNewSlot, SlotFacts, SnapshotChoice, StartFacts, StartPlan, TokenFacts, plan,
    refuse_configuration, slot_must_exist,
};
use cdc_pgoutput::machine::table_set::{self, AddedTables};
use cdc_pgoutput::protocol::pgoutput::ProtocolVersion;
use cdc_pgoutput::types::TypeRegistry;

/// Routes the configured tables (and their partitions) to themselves.
impl PgSource {
    /// One attempt at starting (see `start`): resume, redo an interrupted snapshot, or
    /// create the slot.
    pub(super) async fn start_once(&mut self, resume: Option<&ResumeToken>) -> Result<Lsn> {
        start(self, resume).await
    }

    /// See `check`.
    pub(super) async fn check_server(&mut self) -> Result<()> {
        check(self).await
    }

    /// See `restart_snapshot`.
    pub(super) async fn restart_snapshot(&mut self) -> Result<()> {
        restart_snapshot(self).await
    }

    /// See `after_snapshot`.
    pub(super) async fn after_snapshot(&mut self) -> Result<()> {
        after_snapshot(self).await
    }

    /// Which tables the stream delivers, and under which names.
    pub(super) fn routing(&self) -> TableRouting {
        routing(&self.tables)
    }
}

fn routing(tables: &[CatalogTable]) -> TableRouting {
    let mut routing = TableRouting::tables(tables.iter().map(|t| t.schema.name.clone()));
    for table in tables {
        for partition in &table.partitions {
            routing = routing.with_partition(partition.clone(), table.schema.name.clone());
        }
        routing = routing.with_catalog(table.schema.name.clone(), catalog::catalog_info(table));
    }
    routing
}

/// Before the sink is opened: the preflight of the run (configuration, server, role,
/// publication, tables, slot), kept for `start`, so that a run that cannot work is refused
/// before its output is touched. Errors `start` retries (the server unreachable for now, a
/// slot still held by a previous connection) are left to it.
async fn check(source: &mut PgSource) -> Result<()> {
    let config = &source.options.config;
    config.validate()?;
    let sql = match connect_sql(&config.connection).await {
        Ok(sql) => sql,
        Err(e) if e.is_transient() => return Ok(()),
        Err(e) => return Err(e),
    };
    let report = match preflight(&sql, config, &PreflightOptions::default()).await {
        Ok(report) => report,
        Err(e) if e.is_transient() => return Ok(()),
        Err(e) => return Err(e),
    };
    if !report.only_transient_errors() {
        report.into_result()?;
        return Ok(());
    }
    source.checked = Some(report);
    Ok(())
}

async fn start(source: &mut PgSource, resume: Option<&ResumeToken>) -> Result<Lsn> {
    let config = source.options.config.clone();
    config.validate()?;
    let mut facts = StartFacts {
        snapshot: match config.snapshot {
            SnapshotMode::Never => SnapshotChoice::Never,
            SnapshotMode::Initial | SnapshotMode::InitialOnly => SnapshotChoice::Consistent,
            SnapshotMode::Online => SnapshotChoice::Online,
        },
        snapshot_only: config.snapshot == SnapshotMode::InitialOnly,
        token: resume.map(|t| TokenFacts {
            mid_snapshot: t.snapshot.is_some(),
            covered: t.commit_end.unwrap_or(Lsn::ZERO),
        }),
        slot: None,
        policy: source.options.slot_policy,
    };
    // Refused before anything is opened.
    refuse_configuration(&facts)?;
    let sql = connect_sql(&config.connection).await?;
    let report = match source.checked.take() {
        // Checked before the sink was opened: the one preflight of this attempt.
        Some(report) if slot_must_exist(&facts) => report.requiring_the_slot(&source.slot),
        Some(report) => report,
        None => {
            preflight(
                &sql,
                &config,
                &PreflightOptions {
                    slot_must_exist: slot_must_exist(&facts),
                    own_pid: None,
                },
            )
            .await?
        }
    };
    if let Some(token) = resume {
        refuse_slot_lost_in_promotion(&config, &report, token).await?;
    }
    let report = report.into_result()?;
    // The one preflight of a run: what is not an error is said once, here.
    for warning in report.problems_of(crate::conn::Severity::Warning) {
        tracing::warn!("{warning}");
    }
    refuse_failover_slot_on_standby(&config, &report)?;
    source.server_version = report.server_version_num;
    source.in_recovery = report.in_recovery;
    let table_names: Vec<TableName> = if config.tables.is_empty() {
        report.table_names()
    } else {
        config.qualified_tables()?
    };
    let mut types = TypeRegistry::new();
    let tables = catalog::load_tables(&sql, &config.publication, &table_names, &mut types).await?;
    source.tables = Arc::new(tables);
    source.shared_buffer_pages = catalog::shared_buffer_pages(&sql).await;

    let mut repl = ReplicationConnection::connect(&config.connection).await?;
    let system = repl.identify_system().await?;
    let database = system
        .dbname
        .clone()
        .unwrap_or_else(|| config.connection.dbname.clone());
    let identity = system.identity(&database, &source.slot);
    // For positions just past a WAL page header (see `wal_page`): the online snapshot's
    // chunk positions, and an end given as one, which an idle server would never reach.
    let page = repl.show("wal_block_size").await.ok();
    let segment = repl.show("wal_segment_size").await.ok();
    source.wal = WalPages::from_shown(page.as_deref(), segment.as_deref());
    source.options.end_lsn = source.options.end_lsn.map(|end| source.wal.record_end(end));
    source.machine.set_end(source.options.end_lsn);
    if let Some(token) = resume {
        let covered = token
            .commit_end
            .unwrap_or(Lsn::ZERO)
            .max(token.position.map_or(Lsn::ZERO, |p| p.commit_lsn));
        check_resume_on(&mut repl, &token.source, covered, &identity).await?;
    }
    source.identity = Some(identity);
    facts.slot = report.slot.as_ref().map(|slot| SlotFacts {
        confirmed: slot.confirmed_flush_lsn.unwrap_or(Lsn::ZERO),
    });
    let plan = plan(&facts, &source.slot)?;
    if let (StartPlan::AlreadyCopied, Some(token)) = (plan, resume) {
        // A warning, as a user who expected a new snapshot must learn why none was taken.
        tracing::warn!(
            "the output already holds the complete initial-only snapshot of an earlier run: \
             nothing to do (for a new snapshot, run into an empty output)"
        );
        source
            .machine
            .resume_after(token.position, token.commit_end, token.complete_end);
        repl.close().await;
        source.machine.set_phase(Phase::Ended);
        return Ok(token.commit_end.unwrap_or(Lsn::ZERO));
    }

    let streaming = config.streaming.resolve(source.server_version);
    // A slot that decodes prepared transactions at PREPARE sends Begin Prepare ... even to
    // a session that did not ask (PostgreSQL keeps two-phase on once a slot has it): such a
    // session needs the protocol that carries them.
    let slot_two_phase = source.server_version >= 150000
        && report
            .slot
            .as_ref()
            .is_some_and(|s| s.two_phase == Some(true));
    if slot_two_phase && !config.two_phase {
        tracing::info!(
            slot = %source.slot,
            "the slot decodes prepared transactions at PREPARE (two_phase); decoding them so"
        );
    }
    let two_phase = config.two_phase || slot_two_phase;
    let pgoutput = PgOutputOptions {
        publication_names: vec![config.publication.clone()],
        // Binary only when every column decodes from it: types kept as `Value::Other`
        // must arrive as their exact text.
        binary: source.options.binary
            && source.server_version >= 140000
            && source.tables.iter().all(CatalogTable::binary_safe),
        messages: source.options.messages != cdc_pgoutput::changes::MessageFilter::Off,
        streaming,
        two_phase,
    };
    let version_number = pgoutput.protocol_version(source.server_version)?;
    let version = ProtocolVersion::from_number(version_number).unwrap_or(ProtocolVersion::V1);
    source.pgoutput = Some(pgoutput);
    let mut assembler = ChangeAssembler::new(source.assembler_config(version));
    let registry = assembler.relations_mut().types_mut();
    *registry = types;
    source.machine.set_assembler(assembler);

    match plan {
        StartPlan::AlreadyCopied => Err(Error::config(
            "internal: a completed snapshot-only run without its token",
        )),
        StartPlan::Resume {
            confirmed,
            start,
            copy_added,
        } => {
            let Some(token) = resume else {
                return Err(Error::config("internal: a resume without a token"));
            };
            source
                .machine
                .resume_after(token.position, token.commit_end, token.complete_end);
            source.machine.set_confirmed(confirmed);
            start_streaming(source, repl, start).await?;
            let resnapshot = source.options.resnapshot.clone();
            for table in &resnapshot {
                if !source.tables.iter().any(|t| &t.schema.name == table) {
                    return Err(Error::config(format!(
                        "--resnapshot {table}: the table is not one the stream delivers"
                    )));
                }
            }
            let configured: Vec<TableName> = source
                .tables
                .iter()
                .map(|t| t.schema.name.clone())
                .collect();
            let added_tables = if copy_added {
                AddedTables::Copy
            } else {
                AddedTables::StreamOnly
            };
            let set = table_set::resume(token.backfill.clone(), &configured, added_tables);
            report_table_set(&set, added_tables);
            source.backfill_progress = Some(set.progress.clone());
            begin_backfill(source, set.progress, start)?;
            if let Some(backfill) = source.backfill.as_mut() {
                for table in &resnapshot {
                    backfill.restart(table)?;
                }
                let truncated = backfill.tables_to_truncate();
                if !source.options.sink_applies_truncate && !truncated.is_empty() {
                    return Err(refuse_truncate(&truncated));
                }
            }
            Ok(confirmed)
        }
        StartPlan::StreamFromSlot { confirmed } => {
            // The tokens record the table set, none of it to copy.
            source.backfill_progress = Some(BackfillPhase::all_done(&source.tables));
            source.machine.set_confirmed(confirmed);
            start_streaming(source, repl, confirmed).await?;
            Ok(confirmed)
        }
        StartPlan::NewSlot {
            drop_existing,
            then,
        } => {
            if drop_existing {
                tracing::warn!(slot = %source.slot, "dropping the existing slot to take a new snapshot");
                repl.drop_slot(&source.slot, true).await?;
            }
            if let Some(token) = resume {
                // Positions of the new snapshot must order after everything the token saw.
                source
                    .machine
                    .batches_mut()
                    .resume_after_position(token.position);
            }
            let drop_partial = match then {
                AfterNewSlot::Consistent { restarted } => {
                    return begin_snapshot(source, repl, restarted).await;
                }
                AfterNewSlot::Stream => None,
                AfterNewSlot::Online { drop_partial } => {
                    // Validate every table before creating anything (each needs a key
                    // whose order pgcdc can reproduce).
                    BackfillPhase::new(
                        source.tables.clone(),
                        BackfillPhase::fresh_progress(&source.tables),
                        Lsn::ZERO,
                        None,
                        backfill_options(source),
                    )?;
                    Some(drop_partial)
                }
            };
            let created = create_slot(
                source,
                &mut repl,
                CreateSlotOptions {
                    temporary: false,
                    snapshot: SnapshotAction::NoExport,
                    two_phase: source.pgoutput.as_ref().is_some_and(|p| p.two_phase),
                    failover: source.options.config.failover,
                },
            )
            .await?;
            source.machine.set_confirmed(created.consistent_point);
            start_streaming(source, repl, created.consistent_point).await?;
            let Some(drop_partial) = drop_partial else {
                // snapshot = never: the tokens record the table set, none of it to copy.
                source.backfill_progress = Some(BackfillPhase::all_done(&source.tables));
                return Ok(created.consistent_point);
            };
            if drop_partial {
                // The sink holds part of an interrupted snapshot (the consistent mode's,
                // when the mode changed between runs): it drops it first, as before a
                // consistent snapshot taken again.
                let ordinal = match source.machine.batches().queued_upto() {
                    Some(p) if p.commit_lsn.0 + 1 >= created.consistent_point.0 => p.ordinal + 1,
                    _ => 0,
                };
                let position =
                    Position::new(Lsn(created.consistent_point.0.saturating_sub(1)), ordinal);
                source.machine.batches_mut().push_event(ChangeEvent {
                    lsn: cdc_core::Lsn::ZERO,
                    position,
                    kind: EventKind::Snapshot(SnapshotMarker::Restarted),
                });
            }
            let progress = BackfillPhase::fresh_progress(&source.tables);
            begin_backfill(source, progress, created.consistent_point)?;
            // The first token covers the slot's start, as the slot is confirmed there
            // already (a restart before any streamed transaction must not find the slot
            // ahead of the token).
            source
                .machine
                .batches_mut()
                .push_end(created.consistent_point);
            Ok(created.consistent_point)
        }
    }
}

fn backfill_options(source: &PgSource) -> BackfillOptions {
    BackfillOptions {
        connection: source.options.config.connection.clone(),
        chunk_rows: source.options.backfill_chunk_rows,
        readers: source.options.snapshot_workers,
        in_recovery: source.in_recovery,
        wal: source.wal,
        stats: source.stats.clone(),
    }
}

/// Starts (or continues, from a token's `progress`) the online snapshot alongside the
/// stream, which starts at `start`.
fn begin_backfill(source: &mut PgSource, progress: BackfillProgress, start: Lsn) -> Result<()> {
    let phase = BackfillPhase::new(
        source.tables.clone(),
        progress,
        start,
        source.machine.batches().queued_upto(),
        backfill_options(source),
    )?;
    if let Some(assembler) = source.machine.assembler_mut().filter(|_| phase.copies()) {
        // Chunk rows carry the catalog's schemas: the stream's Relation messages match them.
        // (A resumed stream with nothing to copy leaves them unseeded, as a stream without
        // a snapshot does: the first Relation of a table defines it.)
        for table in source.tables.iter() {
            assembler
                .relations_mut()
                .seed_delivered(table.schema.clone());
        }
    }
    source.backfill = Some(phase);
    Ok(())
}

/// A copy taken again needs a TRUNCATE the sink does not apply.
fn refuse_truncate(tables: &[TableName]) -> Error {
    let list = tables
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Error::config(format!(
        "{list}: the output holds an earlier copy (a table back in the stream after a run without it, a table to \
         --resnapshot, or a table without a key whose copy was cut short), so the new copy must start with a TRUNCATE \
         of it, which this output does not apply. Fix: with Feldera JSON, --on-truncate marker if the consumer applies \
         it (--layout multiplexed); or stream into a new, empty output; or leave the table out of --table"
    ))
}

/// Says what a resumed run does with tables added to, removed from or back in the stream.
fn report_table_set(set: &table_set::TableSet, added_tables: AddedTables) {
    if set.adopted {
        tracing::warn!(
            "the resume token records no table set (it was written by an earlier pgcdc): the configured tables are taken \
             as the ones the output holds. A table added to the stream in this same run is therefore not copied: \
             copy it with --resnapshot TABLE"
        );
    }
    for table in &set.left {
        tracing::warn!(%table, "the table left the stream: its changes are no longer delivered, and the output keeps its rows as of now; if it comes back, it is copied again");
    }
    for table in &set.added {
        match added_tables {
            AddedTables::Copy => {
                tracing::info!(%table, "a table new to the stream: copying it online")
            }
            AddedTables::StreamOnly => {
                tracing::warn!(%table, "a table new to the stream: not copied (snapshot mode never), only its changes from here on are delivered")
            }
        }
    }
    for table in &set.returned {
        match added_tables {
            AddedTables::Copy => {
                tracing::warn!(%table, "the table is back in the stream: the output's copy misses its changes since it left, so it is truncated and copied again")
            }
            AddedTables::StreamOnly => {
                tracing::warn!(%table, "the table is back in the stream, not copied again (snapshot mode never): the output misses its changes while it was out; copy it with --resnapshot TABLE")
            }
        }
    }
}

/// Creates the slot with an exported snapshot and starts copying under it. `restarted`
/// puts a snapshot-restart marker first, so the sink drops a previous, incomplete copy.
pub(super) async fn begin_snapshot(
    source: &mut PgSource,
    mut repl: ReplicationConnection,
    restarted: bool,
) -> Result<Lsn> {
    let temporary = source.options.config.snapshot == SnapshotMode::InitialOnly;
    let created = create_slot(
        source,
        &mut repl,
        CreateSlotOptions {
            temporary,
            snapshot: SnapshotAction::Export,
            two_phase: source.pgoutput.as_ref().is_some_and(|p| p.two_phase),
            failover: source.options.config.failover,
        },
    )
    .await?;
    let consistent_point = created.consistent_point;
    source.machine.set_confirmed(consistent_point);
    let Some(snapshot_name) = created.snapshot_name else {
        return Err(Error::protocol(
            "CREATE_REPLICATION_SLOT did not export a snapshot",
        ));
    };
    let items = copy::plan(
        &source.tables,
        copy::PlanOptions {
            workers: source.options.snapshot_workers,
            chunk_pages: source.options.snapshot_chunk_pages,
            ctid_ranges: source.server_version >= 140000,
            shared_buffer_pages: source.shared_buffer_pages,
        },
    );
    let per_table = copy::items_per_table(&items, source.tables.len());
    // A connection per item at most: more would only import the snapshot and leave (the
    // readers' share of one large table goes to its decoding tasks instead).
    let readers = source.options.snapshot_workers.min(items.len()).max(1);
    let workers = copy::spawn_workers(
        source.options.config.connection.clone(),
        snapshot_name,
        source.tables.clone(),
        items,
        readers,
        2 * source.options.snapshot_workers.max(1),
        source.row_blocks,
    );
    let phase = SnapshotPhase::new(
        workers,
        source.tables.clone(),
        per_table,
        consistent_point,
        restarted,
        source.machine.batches().queued_upto(),
        &mut EventQueue(source.machine.pending_mut()),
    )?;
    // The exported snapshot lives as long as this session stays idle: keep it open,
    // unused, until the copy is done.
    source.parked = Some(repl);
    source.snapshot = Some(Box::new(phase));
    source.machine.set_phase(Phase::Snapshot);
    if let Some(assembler) = source.machine.assembler_mut() {
        for table in source.tables.iter() {
            assembler
                .relations_mut()
                .seed_delivered(table.schema.clone());
        }
    }
    Ok(consistent_point)
}

/// Abandons a snapshot that failed transiently (connection lost) and takes a new one on
/// a new slot, with a restart marker so the sink drops the partial copy.
async fn restart_snapshot(source: &mut PgSource) -> Result<()> {
    source.snapshot = None;
    source.machine.set_phase(Phase::NotStarted);
    if let Some(parked) = source.parked.take() {
        drop(parked);
    }
    let mut repl = ReplicationConnection::connect(&source.options.config.connection).await?;
    let system = repl.identify_system().await?;
    if let Some(identity) = source.identity.clone() {
        // Nothing of the abandoned copy stays, so a promotion since (a standby of the same
        // system that has the history up to here) is a server to start over on.
        let current = system.identity(&identity.database, &source.slot);
        check_resume_on(&mut repl, &identity, Lsn::ZERO, &current).await?;
        source.identity = Some(current);
    }
    match repl.drop_slot(&source.slot, true).await {
        Ok(()) => {}
        Err(e) if e.kind() == cdc_core::ErrorKind::ResyncRequired => {} // already gone
        Err(e) => return Err(e),
    }
    begin_snapshot(source, repl, true).await.map(|_| ())
}

/// Creates the slot, saying what it waits for when that takes long: a logical slot starts
/// where no transaction is in progress, so the server waits for the transactions running
/// now to end — and on a standby for the primary's next running-transactions record,
/// which an idle primary writes only every few minutes.
async fn create_slot(
    source: &mut PgSource,
    repl: &mut ReplicationConnection,
    options: CreateSlotOptions,
) -> Result<CreatedSlot> {
    source.creating_slot = Some(repl.backend_pid());
    let create = repl.create_slot(&source.slot, options);
    tokio::pin!(create);
    let notice = tokio::time::sleep(SLOT_CREATION_NOTICE_AFTER);
    tokio::pin!(notice);
    let mut announced = false;
    loop {
        tokio::select! {
            created = &mut create => return created,
            _ = &mut notice, if !announced => {
                announced = true;
                if source.in_recovery {
                    tracing::warn!(
                        slot = %source.slot,
                        "creating the slot on a standby waits for the primary's next running-transactions \
                         WAL record (an idle primary writes one only every few minutes); to create it now, \
                         run on the primary: SELECT pg_log_standby_snapshot();"
                    );
                } else {
                    tracing::warn!(
                        slot = %source.slot,
                        "creating the slot waits for the transactions running on the server to end \
                         (see pg_stat_activity for long-running ones)"
                    );
                }
            }
        }
    }
}

/// How long slot creation may take before pgcdc says what it waits for.
const SLOT_CREATION_NOTICE_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// After the snapshot: stream from the consistent point, or end (`InitialOnly`).
///
/// The session that exported the snapshot may have died during the copy (terminated,
/// network loss, a proxy's idle timeout). The copy stands all the same: every worker
/// imported the snapshot before copying, and the slot was made persistent before the
/// snapshot was exported, so it still starts exactly at the consistent point. Streaming
/// then starts on a new session: the stream is left unset, and the next `next_batch`
/// reconnects from the confirmed position (the consistent point) like after any
/// connection loss, with the same backoff and checks.
async fn after_snapshot(source: &mut PgSource) -> Result<()> {
    let parked = source.parked.take();
    if source.options.config.snapshot == SnapshotMode::InitialOnly {
        if let Some(repl) = parked {
            repl.close().await;
        }
        source.machine.set_phase(Phase::Ended);
        return Ok(());
    }
    if let Some(repl) = parked {
        let start = source.machine.confirmed();
        match start_streaming(source, repl, start).await {
            Ok(()) => return Ok(()),
            Err(e) if e.is_transient() => tracing::warn!(
                error = %e,
                "the session that exported the snapshot was lost after the copy; \
                 the copy stands, streaming starts on a new session"
            ),
            Err(e) => return Err(e),
        }
    }
    source.stream = None;
    source.machine.set_phase(Phase::Streaming);
    Ok(())
}

async fn start_streaming(
    source: &mut PgSource,
    repl: ReplicationConnection,
    start: Lsn,
) -> Result<()> {
    let Some(pgoutput) = source.pgoutput.clone() else {
        return Err(Error::protocol("internal: streaming before start"));
    };
    let walsender = repl.backend_pid();
    let stream = repl
        .start_replication(&source.slot, start, &pgoutput, source.options.stream)
        .await?;
    stream.set_flushed(source.machine.confirmed());
    source.stream = Some(stream);
    source.machine.set_phase(Phase::Streaming);
    verify_slot_after_start(source, walsender).await
}

/// Checks the slot again once streaming started: it must be ours (held by our walsender),
/// valid, pgoutput, and in our database — a slot changed between the checks at start and
/// `START_REPLICATION` is caught here, before any event is delivered.
async fn verify_slot_after_start(source: &PgSource, walsender: i32) -> Result<()> {
    let sql = connect_sql(&source.options.config.connection).await?;
    let info = crate::conn::inspect_slot(&sql, &source.slot).await?;
    let database = source
        .identity
        .as_ref()
        .map_or(source.options.config.connection.dbname.as_str(), |i| {
            i.database.as_str()
        });
    let problems =
        crate::conn::slot_problems(&source.slot, info.as_ref(), database, true, Some(walsender));
    match problems.first() {
        Some(problem) => Err(problem.to_error()),
        None => Ok(()),
    }
}

/// On a standby a failover slot can neither be created (PostgreSQL syncs them from the
/// primary) nor streamed from while it is a synced copy (until the standby is promoted).
fn refuse_failover_slot_on_standby(
    config: &crate::conn::SourceConfig,
    report: &crate::conn::PreflightReport,
) -> Result<()> {
    if !report.in_recovery {
        return Ok(());
    }
    let slot = config.slot_name();
    if report.slot.as_ref().is_some_and(|s| s.synced == Some(true)) {
        return Err(Error::config(format!(
            "replication slot {slot:?} on this standby is a synced copy of the primary's failover slot: it cannot be streamed from \
             until this standby is promoted. Stream from the primary (after a promotion, from this server); to stream from this \
             standby instead, use another slot name (--slot)"
        )));
    }
    if config.failover {
        return Err(Error::config(
            "the server is a standby: a failover slot is created on the primary, and standbys keep synced copies of it. \
             Stream from the primary with --failover (`pgcdc check --failover` against this standby shows whether it keeps \
             the copy), or from this standby without --failover",
        ));
    }
    Ok(())
}

/// A slot the token needs that is missing on a server promoted since the token was taken
/// (same system, later timeline) was not synced to it: an ordinary slot stays on the old
/// primary. Said as such, rather than as a slot that "does not exist".
async fn refuse_slot_lost_in_promotion(
    config: &crate::conn::SourceConfig,
    report: &crate::conn::PreflightReport,
    token: &ResumeToken,
) -> Result<()> {
    let missing = report.problems.iter().any(|p| {
        matches!(
            &p.kind,
            crate::conn::ProblemKind::Slot(crate::conn::SlotProblem::Missing { .. })
        )
    });
    if !missing {
        return Ok(());
    }
    let mut repl = ReplicationConnection::connect(&config.connection).await?;
    let system = repl.identify_system().await;
    repl.close().await;
    let system = system?;
    if system.system_identifier != token.source.system_identifier
        || system.timeline <= token.source.timeline
    {
        return Ok(());
    }
    Err(Error::resync_required(format!(
        "replication slot {slot:?} is not on this server, which was promoted (or restored) since the saved position was taken \
         (timeline {from} then, {to} now): the slot was not a failover slot, so it stayed on the old primary and the changes since \
         cannot be streamed from here. Fix: start over with a new snapshot (with --out-dir, into a new, empty directory); \
         to survive the next failover, create the slot as a failover slot (--failover, PostgreSQL 17+) and set \
         sync_replication_slots = on on the standby and synchronized_standby_slots on the primary",
        slot = config.slot_name(),
        from = token.source.timeline,
        to = system.timeline,
    )))
}

/// Checks that a stream known as `known` may continue on the server now identified as
/// `current` ([`check_resume`]), where a later timeline (a promotion, a restore) is
/// accepted if everything the stream covers, up to `covered`, lies in the history the
/// two share ([`crate::conn::timeline::judge_timeline_switch`]).
pub(super) async fn check_resume_on(
    repl: &mut ReplicationConnection,
    known: &SourceIdentity,
    covered: Lsn,
    current: &SourceIdentity,
) -> Result<()> {
    if known.system_identifier != current.system_identifier || known.timeline >= current.timeline {
        return check_resume(known, current);
    }
    let history =
        crate::conn::timeline::parse_history(&repl.timeline_history(current.timeline).await?)?;
    crate::conn::timeline::judge_timeline_switch(known, covered, current.timeline, &history)?;
    tracing::warn!(
        from = known.timeline,
        to = current.timeline,
        %covered,
        "the server changed timeline since that position was saved; everything up to it is in the server's history: resuming"
    );
    // The rest (database, slot) as ever; the timeline was judged above.
    check_resume(
        known,
        &SourceIdentity {
            timeline: known.timeline,
            ..current.clone()
        },
    )
}
