//! The commands, and what `stream` and `demo` share: building the source configuration
//! and running a pipeline with progress, signals and a summary. (The source checks the
//! server itself when it starts: preflight runs once.)

pub mod check;
pub mod demo;
pub mod slots;
pub mod stream;

use std::time::{Duration, Instant};

use cdc_core::{
    Error, ErrorKind, Pipeline, PipelineConfig, RunSummary, Sink, TableName, quote_identifier,
};
use cdc_postgres::conn::{ConnectionConfig, SourceConfig};
use tokio_postgres::Client;

use crate::cli::{CliError, ConnArgs, SourceArgs, SummaryArg};
use crate::counting_sink::CountingSink;
use crate::observed_source::ObservedSource;
use crate::progress::Reporter;
use crate::signals::Interrupts;
use crate::summary::Summary;

/// How long establishing a connection may take when the connection string sets no
/// `connect_timeout` (libpq would wait for the operating system, which can be minutes).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The connection the flags and libpq's environment give ([`crate::connection`]), with a
/// default connect timeout.
pub(crate) fn connection(args: &ConnArgs) -> Result<ConnectionConfig, CliError> {
    Ok(with_connect_timeout(crate::connection::resolve(args)?))
}

/// `connection` with [`DEFAULT_CONNECT_TIMEOUT`] unless it sets one.
pub(crate) fn with_connect_timeout(mut connection: ConnectionConfig) -> ConnectionConfig {
    connection
        .connect_timeout
        .get_or_insert(DEFAULT_CONNECT_TIMEOUT);
    connection
}

/// Checks every `--table` is schema-qualified before anything connects.
pub(crate) fn parse_tables(tables: &[String]) -> Result<Vec<TableName>, CliError> {
    tables
        .iter()
        .map(|t| TableName::parse(t).map_err(|e| CliError::usage(format!("--table {t}: {e}"))))
        .collect()
}

/// The source configuration from the command line.
pub(crate) fn source_config(args: &SourceArgs) -> Result<SourceConfig, CliError> {
    parse_tables(&args.tables)?;
    let mut config =
        SourceConfig::from_connection(connection(&args.conn)?, args.publication.clone())?
            .with_tables(&args.tables)?;
    if let Some(slot) = &args.slot {
        config = config.with_slot(slot.clone())?;
    }
    Ok(config)
}

/// A `tokio-postgres` error as a pgcdc error whose kind follows the SQLSTATE.
pub(crate) fn sql_error(context: &str, e: tokio_postgres::Error) -> Error {
    match e.as_db_error() {
        Some(db) => Error::new(
            cdc_postgres::conn::error::classify_sqlstate(db.code().code()),
            format!(
                "{context}: {} (SQLSTATE {})",
                db.message(),
                db.code().code()
            ),
        ),
        None => Error::transient(format!("{context}: {e}")),
    }
}

/// Creates the publication over the tables of `config` if it does not exist
/// (`--create-publication`). Returns whether it was created.
pub(crate) async fn ensure_publication(
    client: &Client,
    config: &SourceConfig,
) -> Result<bool, Error> {
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname::text = $1::text",
            &[&config.publication],
        )
        .await
        .map_err(|e| sql_error("looking up the publication failed", e))?
        .is_some();
    if exists {
        return Ok(false);
    }
    let tables = config.qualified_tables()?;
    if tables.is_empty() {
        return Err(Error::config(
            "--create-publication needs the tables: name them with --table schema.table",
        ));
    }
    let list = tables
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "CREATE PUBLICATION {} FOR TABLE {list}",
        quote_identifier(&config.publication)
    );
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| sql_error(&format!("{sql} failed"), e))?;
    Ok(true)
}

/// How a pipeline run is displayed and summarized.
#[derive(Clone, Debug)]
pub(crate) struct RunOptions {
    pub command: &'static str,
    pub quiet: bool,
    pub status_interval: Duration,
    pub summary: SummaryArg,
    /// Stop by itself after this long.
    pub stop_after: Option<Duration>,
    /// Where to serve metrics and health, if anywhere.
    pub metrics: crate::cli::MetricsArgs,
    /// The sink's policy counts (Feldera JSON sinks), for the metrics.
    pub policy_log: Option<cdc_sinks::feldera::PolicyLog>,
}

/// What a pipeline run ended with.
#[derive(Debug)]
pub(crate) struct RunOutcome {
    pub result: Result<RunSummary, Error>,
    /// A signal asked it to stop.
    pub interrupted: bool,
}

/// Runs `source` into `sink` (counted) with the progress display, graceful Ctrl-C and
/// SIGTERM, and the summary at the end.
pub(crate) async fn run_pipeline<Si: Sink>(
    source: ObservedSource,
    sink: Si,
    config: PipelineConfig,
    options: &RunOptions,
) -> Result<RunOutcome, CliError> {
    let started = Instant::now();
    let sink = CountingSink::new(sink);
    let tally = sink.tally();
    let info = source.info();
    let source_stats = source.stats();
    let pipeline = Pipeline::new(source, sink, config);
    let stats = pipeline.stats();
    let _metrics_server = match options.metrics.metrics_addr {
        Some(addr) => {
            let server = crate::metrics_server::MetricsServer::start(
                addr,
                stream_metrics(stats.clone(), source_stats, options.policy_log.clone()),
                options.metrics.health_grace,
            )
            .await
            .map_err(|e| {
                CliError::usage(format!("--metrics-addr {addr}: cannot listen there: {e}"))
            })?;
            eprintln!(
                "pgcdc: metrics on http://{}/metrics, health on /health",
                server.local_addr()
            );
            Some(server)
        }
        None => None,
    };
    let shutdown = pipeline.shutdown_handle();
    let interrupts = Interrupts::watch(shutdown.clone(), options.quiet)?;
    let timer = options.stop_after.map(|after| {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            shutdown.shutdown();
        })
    });
    let reporter = Reporter::spawn(
        stats.clone(),
        tally.clone(),
        info.clone(),
        options.status_interval,
        options.quiet,
    );
    let result = pipeline.run().await;
    reporter.stop().await;
    if let Some(timer) = timer {
        timer.abort();
    }
    let interrupted = interrupts.requested();
    drop(interrupts);
    let end = stats.snapshot();
    match &result {
        Ok(run) => tracing::info!(
            command = options.command,
            end = ?run.end,
            events = end.events,
            checkpoints = end.checkpoints,
            confirmed = %run.confirmed,
            "pipeline finished"
        ),
        // Info, not error: the error itself is printed on stderr once, as one line.
        Err(e) => tracing::info!(
            command = options.command,
            kind = ?e.kind(),
            events = end.events,
            confirmed = %end.confirmed_lsn,
            error = %e,
            "pipeline failed"
        ),
    }
    // `--quiet` silences the text summary; an explicitly requested JSON one is printed.
    let wanted = match options.summary {
        SummaryArg::Text => !options.quiet,
        SummaryArg::Json => true,
        SummaryArg::None => false,
    };
    if info.started() && wanted {
        let summary = Summary::new(
            options.command,
            started.elapsed(),
            &tally.counts(),
            &stats.snapshot(),
            result.as_ref(),
            info.resumed(),
        );
        match options.summary {
            SummaryArg::Text => eprintln!("{}", summary.to_text()),
            SummaryArg::Json => eprintln!("{}", summary.to_json()),
            SummaryArg::None => {}
        }
    }
    Ok(RunOutcome {
        result,
        interrupted,
    })
}

/// Whether an error after a requested stop only means the server went away at the same
/// time (a terminal's Ctrl-C reaches a local demo server too).
pub(crate) fn is_connection_loss(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Transient | ErrorKind::Protocol)
}

/// The metrics of a run: pipeline, source, and the sink's policy applications if known.
fn stream_metrics(
    pipeline: cdc_core::PipelineStats,
    source: cdc_postgres::source::SourceStats,
    policy_log: Option<cdc_sinks::feldera::PolicyLog>,
) -> cdc_postgres::metrics::StreamMetrics {
    let metrics = cdc_postgres::metrics::StreamMetrics::new(pipeline, source);
    let Some(log) = policy_log else {
        return metrics;
    };
    metrics.with_policies(move || {
        log.counts()
            .into_iter()
            .map(|c| cdc_postgres::metrics::PolicyApplications {
                table: c.table.to_string(),
                column: c.column,
                case: match c.case {
                    cdc_sinks::feldera::PolicyCase::NonFinite => "non_finite",
                    cdc_sinks::feldera::PolicyCase::OutOfRange => "out_of_range",
                    cdc_sinks::feldera::PolicyCase::ArrayBounds => "array_bounds",
                    cdc_sinks::feldera::PolicyCase::Truncate => "truncate",
                }
                .to_owned(),
                action: c.action.to_owned(),
                count: c.count,
            })
            .collect()
    })
}
