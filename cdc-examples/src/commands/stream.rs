//! `pgcdc stream`: a publication's tables — initial snapshot, then every change — to
//! stdout, to durable, exactly-once Feldera JSON files, or to a NATS JetStream stream.

use std::io::BufWriter;
use std::process::ExitCode;

use cdc_core::{CommitMode, PipelineConfig};
use cdc_postgres::conn::{SnapshotMode, SourceConfig, connect_sql};
use cdc_postgres::source::{PgSource, PgSourceOptions, SchemaChangePolicy, SlotPolicy};
use cdc_sinks::debezium::{BinaryMode, DecimalMode, HstoreMode, IntervalMode, TimePrecision};
use cdc_sinks::jetstream::JetStreamSink;
use cdc_sinks::{
    DebeziumOptions, EncoderOptions, FelderaFileSink, FelderaStreamSink, FileLayout,
    FileSinkOptions, Framing, StdoutFormat, StdoutSink,
};

use super::{RunOptions, RunOutcome, ensure_publication, run_pipeline};
use crate::cli::{
    BinaryArg, CliError, CommitModeArg, DecimalArg, FormatArg, GlobalArgs, HstoreArg, IntervalArg,
    LayoutArg, SchemaChangeArg, SnapshotArg, StreamArgs, TimeArg,
};
use crate::observed_source::ObservedSource;

/// Runs `pgcdc stream`.
pub async fn run(args: StreamArgs, global: &GlobalArgs) -> Result<ExitCode, CliError> {
    if args.out_dir.is_some() && matches!(args.format, FormatArg::Json | FormatArg::Text) {
        return Err(CliError::usage(
            "--out-dir writes Feldera JSON files or Debezium records; --format json and text are for stdout only",
        ));
    }
    if args.nats.sink.is_some() && matches!(args.format, FormatArg::Json | FormatArg::Text) {
        return Err(CliError::usage(
            "--sink publishes Feldera JSON or (--format debezium) Debezium records; --format json and text are for stdout only",
        ));
    }
    if args.nats.sink.is_some() && args.commit_mode == CommitModeArg::Completion {
        return Err(CliError::usage(
            "--commit-mode completion cannot be used with --sink: the slot would move past changes JetStream has not acknowledged, and a crash would lose them",
        ));
    }
    let quiet = global.quiet;
    let snapshot = args.snapshot.unwrap_or(SnapshotArg::Online);
    if args.nats.sink.is_some() && snapshot == SnapshotArg::Consistent && !quiet {
        eprintln!(
            "pgcdc: warning: --snapshot consistent with --sink: if pgcdc stops before the snapshot completes, the stream holds rows of a copy that cannot be resumed, and the restart fails until the stream is purged; --snapshot online (the default) resumes"
        );
    }
    let config = stream_config(&args)?;
    if args.commit_mode == CommitModeArg::Completion && args.out_dir.is_some() && !quiet {
        eprintln!(
            "pgcdc: warning: --commit-mode completion with --out-dir: a crash can lose the changes written since the last checkpoint (the slot has moved past them); the restart then reports that a resync is needed"
        );
    }

    let client = connect_sql(&config.connection).await?;
    if args.create_publication && ensure_publication(&client, &config).await? && !quiet {
        eprintln!(
            "pgcdc: created publication {:?} for {}",
            config.publication,
            args.source.tables.join(", ")
        );
    }
    drop(client);

    let mut options = stream_options(&args, config.clone())?;
    // Feldera JSON outputs (files, stdout, JetStream) apply a TRUNCATE only as a marker
    // the consumer acts on; with `error` or `skip`, a table copied again is refused up
    // front rather than failing midway or leaving its old rows beside the new copy.
    let policies = args.policies.policies();
    let mut jetstream = args.nats.options(&config.connection.dbname, policies)?;
    if let Some(options) = jetstream.as_mut()
        && args.format == FormatArg::Debezium
    {
        options.debezium = Some(debezium_options(&args, &config.connection.dbname));
    }
    let feldera_output = args.format == FormatArg::Feldera;
    options.sink_applies_truncate =
        !feldera_output || policies.truncate == cdc_sinks::feldera::TruncatePolicy::Marker;
    let source = ObservedSource::new(PgSource::new(options), config.slot_name());
    let pipeline = PipelineConfig::default().with_checkpoint_interval(args.checkpoint_interval);
    let mut run = RunOptions {
        command: "stream",
        quiet,
        status_interval: args.status_interval,
        summary: args.summary,
        stop_after: None,
        metrics: args.metrics.clone(),
        policy_log: None,
    };
    let outcome = match (&args.out_dir, args.format) {
        (None, _) if let Some(options) = jetstream => {
            let sink = JetStreamSink::new(options)?;
            run.policy_log = Some(sink.policy_log());
            run_pipeline(source, sink, pipeline, &run).await?
        }
        (Some(dir), _) => {
            let mut file = FileSinkOptions::new(dir);
            file.layout = match args.layout {
                // Debezium records name their table: one file holds them all.
                _ if args.format == FormatArg::Debezium => FileLayout::Multiplexed,
                LayoutArg::PerTable => FileLayout::PerTable,
                LayoutArg::Multiplexed => FileLayout::Multiplexed,
            };
            if args.format == FormatArg::Debezium {
                file.debezium = Some(debezium_options(&args, &config.connection.dbname));
            }
            file.encoder = EncoderOptions::new(policies, file.layout == FileLayout::Multiplexed);
            let sink = FelderaFileSink::new(file)?;
            run.policy_log = Some(sink.policy_log());
            run_pipeline(source, sink, pipeline, &run).await?
        }
        (None, FormatArg::Feldera) => {
            let encoder = EncoderOptions::new(policies, true);
            let sink = FelderaStreamSink::new(stdout(), encoder, Framing::Lines);
            run.policy_log = Some(sink.policy_log());
            run_pipeline(source, sink, pipeline, &run).await?
        }
        (None, FormatArg::Debezium) => {
            let options = debezium_options(&args, &config.connection.dbname);
            let sink = StdoutSink::new(stdout(), StdoutFormat::Debezium).with_debezium(options);
            run_pipeline(source, sink, pipeline, &run).await?
        }
        (None, FormatArg::Json) => {
            let sink = StdoutSink::new(stdout(), StdoutFormat::Json);
            run_pipeline(source, sink, pipeline, &run).await?
        }
        (None, FormatArg::Text) => {
            let sink = StdoutSink::new(stdout(), StdoutFormat::Text);
            run_pipeline(source, sink, pipeline, &run).await?
        }
    };
    finish(outcome)
}

/// The source configuration the flags give: every setting that has its home in
/// `SourceConfig` (snapshot and commit mode among them) is set here and nowhere else.
fn stream_config(args: &StreamArgs) -> Result<SourceConfig, CliError> {
    let mut config = super::source_config(&args.source)?;
    config.snapshot = match args.snapshot.unwrap_or(SnapshotArg::Online) {
        SnapshotArg::Never => SnapshotMode::Never,
        SnapshotArg::Consistent => SnapshotMode::Initial,
        SnapshotArg::InitialOnly => SnapshotMode::InitialOnly,
        SnapshotArg::Online => SnapshotMode::Online,
    };
    config.commit_mode = CommitMode::from(args.commit_mode);
    config.streaming = args.streaming.into();
    config.two_phase = args.two_phase;
    config.failover = args.failover;
    Ok(config)
}

/// The source's options the flags give, around `config`.
fn stream_options(args: &StreamArgs, config: SourceConfig) -> Result<PgSourceOptions, CliError> {
    let mut options = PgSourceOptions::new(config);
    // A slot the output's token does not show to be this stream's is created or replaced
    // only when asked (a resumed stream, or its own interrupted snapshot, needs nothing).
    options.slot_policy = SlotPolicy::new(args.create_slot, args.create_slot);
    options.end_lsn = args.end_lsn;
    options.schema_policy = match (args.on_schema_change, args.format) {
        (Some(SchemaChangeArg::Evolve), _) | (None, FormatArg::Debezium) => {
            SchemaChangePolicy::Evolve
        }
        (Some(SchemaChangeArg::Fail), _) | (None, _) => SchemaChangePolicy::Fail,
    };
    options.snapshot_workers = usize::from(args.snapshot_workers);
    options.backfill_chunk_rows = usize::try_from(args.chunk_rows).unwrap_or(usize::MAX);
    options.resnapshot = args
        .resnapshot
        .iter()
        .map(|t| {
            cdc_core::TableName::parse(t).map_err(|e| {
                CliError::usage(format!(
                    "--resnapshot {t:?}: {e} (write it as schema.table)"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(options)
}

/// The Debezium records' options from the command line.
fn debezium_options(args: &StreamArgs, database: &str) -> DebeziumOptions {
    let mut options = DebeziumOptions::new(&args.debezium_name, database);
    options.schemas = args.debezium_schemas;
    options.decimals = match args.debezium_decimal {
        DecimalArg::Precise => DecimalMode::Precise,
        DecimalArg::String => DecimalMode::String,
        DecimalArg::Double => DecimalMode::Double,
    };
    options.time = match args.debezium_time {
        TimeArg::Adaptive => TimePrecision::Adaptive,
        TimeArg::AdaptiveTimeMicroseconds => TimePrecision::AdaptiveTimeMicroseconds,
        TimeArg::Connect => TimePrecision::Connect,
    };
    options.transaction_metadata = args.debezium_transactions;
    options.binary = match args.debezium_binary {
        BinaryArg::Bytes => BinaryMode::Bytes,
        BinaryArg::Base64 => BinaryMode::Base64,
        BinaryArg::Base64UrlSafe => BinaryMode::Base64UrlSafe,
        BinaryArg::Hex => BinaryMode::Hex,
    };
    options.interval = match args.debezium_interval {
        IntervalArg::Numeric => IntervalMode::Numeric,
        IntervalArg::String => IntervalMode::String,
    };
    options.hstore = match args.debezium_hstore {
        HstoreArg::Json => HstoreMode::Json,
        HstoreArg::Map => HstoreMode::Map,
    };
    options
}

/// Buffered stdout; the sinks flush it at every checkpoint and at the end.
fn stdout() -> BufWriter<std::io::Stdout> {
    BufWriter::with_capacity(64 * 1024, std::io::stdout())
}

fn finish(outcome: RunOutcome) -> Result<ExitCode, CliError> {
    match outcome.result {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::Source;
    use cdc_postgres::source::PgSource;
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn stream_args(extra: &[&str]) -> StreamArgs {
        let mut argv = vec![
            "pgcdc",
            "stream",
            "--uri",
            "postgres://u@localhost/shop",
            "--publication",
            "p",
        ];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Stream(args) => *args,
            _ => panic!("not the stream command"),
        }
    }

    /// The flags reach the settings' one home, and the source built from it reports them
    /// to the pipeline (the library's `settings_one_home` test runs such a source).
    #[test]
    fn commit_and_snapshot_flags_set_the_source_configuration_the_pipeline_reads() {
        for (flags, commit, snapshot) in [
            (vec![], CommitMode::Checkpoint, SnapshotMode::Online),
            (
                vec!["--commit-mode", "completion", "--snapshot", "initial-only"],
                CommitMode::Completion,
                SnapshotMode::InitialOnly,
            ),
            (
                vec!["--snapshot", "consistent"],
                CommitMode::Checkpoint,
                SnapshotMode::Initial,
            ),
            (
                vec!["--snapshot", "never"],
                CommitMode::Checkpoint,
                SnapshotMode::Never,
            ),
        ] {
            let args = stream_args(&flags);
            let config = stream_config(&args).unwrap();
            let options = stream_options(&args, config).unwrap();
            assert_eq!(options.config.snapshot, snapshot, "{flags:?}");
            assert_eq!(PgSource::new(options).commit_mode(), commit, "{flags:?}");
        }
    }
}
