//! A conformance kit for [`Sink`] implementations (feature `conformance`): proves, from
//! any crate's tests, that a sink keeps its side of the crash-safety contract.
//!
//! Given a [`SinkHarness`] — a way to make the sink over some durable storage, to wipe
//! that storage, and to read back the rows it holds durably — [`check_sink`] streams
//! generated histories through the real [`Pipeline`](crate::Pipeline) from a scripted
//! source that behaves as a replication slot does (it cannot send again what was
//! confirmed; it resumes after a token; it takes an interrupted snapshot again after a
//! `Restarted` marker). Histories hold two tables under `REPLICA IDENTITY FULL`
//! (`id int8` key, `seq int8`, `note text`), an optional consistent snapshot, then
//! transactions of inserts, updates, deletes, TRUNCATEs of one or two tables, a column
//! added mid-stream, logical messages, and large transactions that batches cut.
//!
//! Each case crashes the sink at drawn points — at a write or a checkpoint, before the
//! sink does it or after (the call never returns; the pipeline and the sink are
//! dropped, as a killed process's would be) — and reopens it from its own storage, in
//! each commit mode asked for. It checks:
//! - **the token handed back unchanged**: `open` returns one of the tokens the pipeline
//!   handed the sink, byte for byte, or none only when nothing was ever acknowledged
//!   durable;
//! - **nothing acknowledged before it was durable**: that token is never older than the
//!   newest one the sink acknowledged as durable (by `Ack::Done` from `checkpoint` or
//!   through its [`Acknowledger`](crate::Acknowledger));
//! - **every change durable exactly once, replays skipped by position**: at the end the
//!   rows the harness reads back are exactly the history's final rows — no row missing,
//!   none twice (a sink whose storage runs ahead of its token must skip, by position,
//!   the events the source sends again after its token).
//!
//! In [`CommitMode::Completion`] the slot follows what the sink processed, durable or
//! not: after a crash a sink with state of its own may hold a token older than the slot,
//! and the source then refuses to start (a `ResyncRequired` error), as `PgSource` does.
//! The kit accepts that refusal (it counts it in [`KitReport::gaps_reported`]) and checks
//! everything else; silent loss or duplication fails.
//!
//! ```no_run
//! # use cdc_core::conformance::{check_sink, KitOptions, SinkHarness};
//! # async fn example<H: SinkHarness>(mut harness: H) {
//! let report = check_sink(&mut harness, &KitOptions::default()).await.unwrap();
//! assert!(report.crashes > 0);
//! # }
//! ```

mod crashing;
mod history;
mod source;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;

pub use history::{DurableLog, DurableRow};

use crate::{CommitMode, ErrorKind, Pipeline, PipelineConfig, Result, RunEnd, Sink};
use crashing::{CrashPoint, Crashing, Record};
use history::{History, Rng, Shape};
use source::{KitSource, Server};

/// What the kit needs to test a sink.
#[async_trait]
pub trait SinkHarness: Send {
    /// The sink.
    type Sink: Sink + 'static;

    /// Wipes the durable storage: a case starts from nothing.
    async fn reset(&mut self) -> Result<()>;

    /// A sink over the storage, as a program starting — or restarting after a crash —
    /// makes it (not yet opened).
    fn sink(&mut self) -> Result<Self::Sink>;

    /// The rows the storage holds durably, read back as a consumer of the output would
    /// (after the last sink was closed or dropped). For an output that is a log of
    /// changes, [`DurableLog`] applies it strictly.
    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>>;
}

/// What the kit runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct KitOptions {
    /// Histories to run (each in every mode of `commit_modes`).
    pub cases: u32,
    /// The first history's seed; case `n` uses `seed + n`.
    pub seed: u64,
    /// The commit modes to run each history in.
    pub commit_modes: Vec<CommitMode>,
    /// Histories hold TRUNCATEs (turn off for a sink that refuses them by design).
    pub truncates: bool,
    /// Histories add a column to a table mid-stream.
    pub schema_changes: bool,
    /// Histories begin with a consistent snapshot, taken again when a crash interrupts
    /// it (turn off for a sink whose output cannot withdraw rows, e.g. JetStream).
    pub snapshot: bool,
    /// Crashes per history, at most.
    pub crashes: u32,
    /// The pipeline's checkpoint interval.
    pub checkpoint_interval: Duration,
}

impl Default for KitOptions {
    /// Eight histories, both commit modes, everything on, up to four crashes each.
    fn default() -> Self {
        KitOptions {
            cases: 8,
            seed: 1,
            commit_modes: vec![CommitMode::Checkpoint, CommitMode::Completion],
            truncates: true,
            schema_changes: true,
            snapshot: true,
            crashes: 4,
            checkpoint_interval: Duration::from_millis(5),
        }
    }
}

/// What a passing run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KitReport {
    /// Histories run (times commit modes).
    pub runs: u32,
    /// Crashes made.
    pub crashes: u32,
    /// Events in the histories.
    pub events: u64,
    /// Restarts the source refused in completion mode (the documented gap).
    pub gaps_reported: u32,
}

/// A broken promise: which case, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The history's seed (run it alone with `KitOptions { seed, cases: 1, .. }`).
    pub seed: u64,
    /// The commit mode.
    pub commit_mode: CommitMode,
    /// What went wrong.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sink conformance, seed {} ({:?} mode): {}",
            self.seed, self.commit_mode, self.what
        )
    }
}

impl std::error::Error for Violation {}

/// Runs the kit against the harness's sink (see the [module docs](self)).
pub async fn check_sink<H: SinkHarness>(
    harness: &mut H,
    options: &KitOptions,
) -> std::result::Result<KitReport, Violation> {
    let mut report = KitReport::default();
    for case in 0..options.cases {
        let seed = options.seed.wrapping_add(u64::from(case));
        for &commit_mode in &options.commit_modes {
            let fail = |what: String| Violation {
                seed,
                commit_mode,
                what,
            };
            run_case(harness, options, seed, commit_mode, &mut report)
                .await
                .map_err(fail)?;
            report.runs += 1;
        }
    }
    Ok(report)
}

async fn run_case<H: SinkHarness>(
    harness: &mut H,
    options: &KitOptions,
    seed: u64,
    commit_mode: CommitMode,
    report: &mut KitReport,
) -> std::result::Result<(), String> {
    harness
        .reset()
        .await
        .map_err(|e| format!("the harness could not reset its storage: {e}"))?;
    let mut rng = Rng::new(seed);
    let history = Arc::new(History::generate(
        &mut rng,
        Shape {
            snapshot: options.snapshot,
            truncates: options.truncates,
            schema_changes: options.schema_changes,
        },
    ));
    report.events += history.events;
    let server = Arc::new(Mutex::new(Server::default()));
    let record = Arc::new(Mutex::new(Record::default()));
    // A run makes about one write per 20 events and a checkpoint every few writes (as
    // the timer falls): crash somewhere among the first calls a run makes. (A point past
    // a run's last call is no crash: the case then ends sooner.)
    let calls = (history.events / 50).max(2);
    let mut crashes_left = options.crashes;
    let mut run = 0u64;
    loop {
        run += 1;
        let crash = (crashes_left > 0).then(|| CrashPoint {
            call: 1 + rng.below(calls),
            after: rng.chance(50),
        });
        let sink = harness
            .sink()
            .map_err(|e| format!("the harness could not make its sink: {e}"))?;
        let (crashed_tx, crashed_rx) = oneshot::channel();
        let sink = Crashing::new(sink, record.clone(), crash, crashed_tx);
        let source = KitSource::new(
            history.clone(),
            server.clone(),
            commit_mode,
            seed.wrapping_mul(31).wrapping_add(run),
        );
        let config =
            PipelineConfig::default().with_checkpoint_interval(options.checkpoint_interval);
        let mut task = tokio::spawn(Pipeline::new(source, sink, config).run());
        tokio::select! {
            Ok(()) = crashed_rx => {
                task.abort();
                let _ = task.await;
                crashes_left -= 1;
                report.crashes += 1;
            }
            outcome = &mut task => {
                let violations = crashing::lock(&record).violations.clone();
                if let Some(v) = violations.first() {
                    return Err(v.clone());
                }
                match outcome {
                    Ok(Ok(summary)) if summary.end == RunEnd::SourceEnded => break,
                    Ok(Ok(summary)) => {
                        return Err(format!("the run ended early ({:?})", summary.end));
                    }
                    Ok(Err(e))
                        if commit_mode == CommitMode::Completion
                            && e.kind() == ErrorKind::ResyncRequired =>
                    {
                        report.gaps_reported += 1;
                        return Ok(());
                    }
                    Ok(Err(e)) => return Err(format!("run {run} failed: {e}")),
                    Err(e) => return Err(format!("run {run} panicked: {e}")),
                }
            }
        }
    }
    let mut rows = harness
        .durable_rows()
        .await
        .map_err(|e| format!("reading back the durable rows: {e}"))?;
    rows.sort();
    let expected = history.expected_rows();
    if rows != expected {
        return Err(describe_difference(&rows, &expected));
    }
    Ok(())
}

/// The rows missing, extra and twice, a few of each.
fn describe_difference(rows: &[DurableRow], expected: &[DurableRow]) -> String {
    let twice: Vec<&DurableRow> = rows
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| &w[0])
        .collect();
    let missing: Vec<&DurableRow> = expected.iter().filter(|r| !rows.contains(r)).collect();
    let extra: Vec<&DurableRow> = rows.iter().filter(|r| !expected.contains(r)).collect();
    let show = |list: &[&DurableRow]| {
        list.iter()
            .take(5)
            .map(|r| format!("{} id {} seq {}", r.table, r.id, r.seq))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "the output holds {} rows, the history ends with {}: {} held twice [{}], {} missing [{}], {} not in the history [{}]",
        rows.len(),
        expected.len(),
        twice.len(),
        show(&twice),
        missing.len(),
        show(&missing),
        extra.len(),
        show(&extra)
    )
}
