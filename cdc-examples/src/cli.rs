//! The command line: every subcommand's flags, the exit codes, and the error type commands
//! return.

use std::path::PathBuf;
use std::time::Duration;

use cdc_core::{CommitMode, Lsn};
use cdc_postgres::conn::Secret;
use cdc_sinks::feldera::{ArrayBoundsPolicy, NonFinitePolicy, OutOfRangePolicy, TruncatePolicy};
use clap::{Args, Parser, Subcommand, ValueEnum};

mod exit;
pub mod nats;
mod values;

pub use exit::*;
pub use values::*;

const EXIT_CODES: &str = "\
Exit codes:
  0    success (end position reached, snapshot-only run done, or stopped by Ctrl-C/SIGTERM)
  1    other failure (I/O, the demo cluster could not start)
  2    invalid command line
  3    configuration error: flags, connection string, credentials or source setup
  4    transient error: server unreachable or gone; rerun to resume without loss
  5    resync required: the slot is missing or invalidated (e.g. an ordinary slot after a
       standby was promoted: only --failover slots survive), or the saved position is not
       part of the server's history (a promoted standby that lagged); start over with a
       new snapshot (for --out-dir: a new, empty directory)
  6    protocol error: the server sent data this version cannot interpret
  7    sink error: the output (files, stdout, JetStream) failed
  8    value rejected by an output policy (e.g. NaN); choose a policy with --on-...
  130  interrupted twice: stopped without a final checkpoint

Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=info,cdc_postgres=debug) to choose what is
logged, and --log-format json for one JSON object per line.";

/// Change data capture from PostgreSQL (logical replication, pgoutput) into Feldera-style
/// JSON.
#[derive(Debug, Parser)]
#[command(name = "pgcdc", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Options for every command.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Clone, Debug, Args)]
pub struct GlobalArgs {
    /// No progress bar, status lines or summary on stderr (errors are still printed).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Format of log lines on stderr (what is logged is chosen by RUST_LOG).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a throwaway local PostgreSQL (or use the database of --uri, --uri-file or
    /// --uri-env), run a live workload on a small schema and stream its changes as Feldera
    /// JSON to stdout. Ctrl-C stops it cleanly.
    #[command(after_help = EXIT_CODES)]
    Demo(DemoArgs),
    /// Stream a publication's tables: an initial snapshot, then every change, to stdout,
    /// to one durable Feldera JSON file per table (--out-dir; Debezium records with
    /// --format debezium), or to a NATS JetStream stream (--sink nats://…); with files or
    /// JetStream, rerunning resumes exactly.
    #[command(after_help = EXIT_CODES)]
    Stream(Box<StreamArgs>),
    /// Check that a source is ready to stream; list every problem with its fix. Exits
    /// non-zero if any problem must be fixed first.
    #[command(after_help = EXIT_CODES)]
    Check(CheckArgs),
    /// List the database's replication slots with their lag and WAL status.
    #[command(after_help = EXIT_CODES)]
    Slots(SlotsArgs),
    /// Drop a replication slot (it stops retaining WAL; a stream using it cannot resume).
    #[command(name = "drop-slot", after_help = EXIT_CODES)]
    DropSlot(DropSlotArgs),
}

/// `pgcdc demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// A database to use instead of a throwaway local cluster: the demo creates schema
    /// `pgcdc_demo`, publication and slot `pgcdc_demo` there and drops them at exit.
    /// Without a flag, a local cluster is used even when `PG*` variables are set.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Stop by itself after this long (e.g. `30`, `30s`, `2m`; 100ms to 720h); default:
    /// until Ctrl-C.
    #[arg(long, value_parser = duration_between(DEMO_DURATION), value_name = "SECS")]
    pub duration: Option<Duration>,
    /// Workload transactions per second (0.01 to 10000).
    #[arg(long, default_value_t = 5.0, value_parser = parse_rate)]
    pub rate: f64,
    /// Orders in the table before the snapshot (at most 10000000).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(0..=MAX_SEED_ROWS))]
    pub seed_rows: u32,
    /// Interval of the status line on stderr (100ms to 1h).
    #[arg(long, value_parser = duration_between(STATUS_INTERVAL), default_value = "5s")]
    pub status_interval: Duration,
    /// Metrics endpoint.
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// How to reach the source: a connection string from at most one of `--uri`,
/// `--uri-file` and `--uri-env`, completed from libpq's environment (`PGHOST`, `PGUSER`,
/// `PGPASSWORD`, `~/.pgpass`, ...; see [`crate::connection`]). `Debug` never shows the
/// connection string (a [`Secret`]).
#[derive(Clone, Debug, Args)]
#[group(multiple = false)]
pub struct ConnArgs {
    /// Connection string: libpq URI (`postgres://user:pass@host:5432/db?sslmode=require`)
    /// or key=value form (`host=db dbname=shop user=cdc`). Other users of this machine can
    /// see it (ps): give the password by PGPASSWORD or ~/.pgpass, or the whole string by
    /// --uri-file or --uri-env. What it leaves out comes from PGHOST, PGPORT, PGDATABASE,
    /// PGUSER, PGPASSWORD, PGSSLMODE, ... and ~/.pgpass (or PGPASSFILE), as in libpq.
    #[arg(long)]
    pub uri: Option<Secret>,
    /// Read the connection string from this file (instead of --uri).
    #[arg(long, value_name = "PATH")]
    pub uri_file: Option<PathBuf>,
    /// Read the connection string from this environment variable (instead of --uri).
    #[arg(long, value_name = "NAME")]
    pub uri_env: Option<String>,
}

/// What to stream.
#[derive(Clone, Debug, Args)]
pub struct SourceArgs {
    /// Connection.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The publication to stream.
    #[arg(long)]
    pub publication: String,
    /// A table to stream, schema-qualified (`public.orders`, `"MySchema"."Orders"`);
    /// repeat for several. Default: every table of the publication.
    #[arg(long = "table", value_name = "SCHEMA.TABLE")]
    pub tables: Vec<String>,
    /// The replication slot (default: `pgcdc_` plus a hash of host, port, database and
    /// publication).
    #[arg(long)]
    pub slot: Option<String>,
}

/// `pgcdc stream`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Source.
    #[command(flatten)]
    pub source: SourceArgs,
    /// `online` (default): stream at once and copy existing rows in chunks alongside,
    /// resumable chunk by chunk; `consistent` (alias `initial`): copy existing rows first
    /// under one exported snapshot — one transactionally consistent picture — then
    /// stream; `never`: stream changes only; `initial-only`: copy existing rows
    /// consistently and stop (uses a temporary slot). Applies when the slot is new.
    #[arg(long, value_enum)]
    pub snapshot: Option<SnapshotArg>,
    /// When the slot may advance. `checkpoint` (default): after the output is durable —
    /// nothing is lost across crashes. `completion`: once written — faster, but only
    /// at-least-once for stateless outputs (stdout); after a crash, --out-dir needs a resync.
    #[arg(long, value_enum, default_value_t = CommitModeArg::Checkpoint)]
    pub commit_mode: CommitModeArg,
    /// How often the output is checkpointed (made durable with its resume position), e.g.
    /// `1s`, `500ms` (10ms to 1h). With --out-dir it bounds how soon a change is visible to
    /// a reader of the checkpointed files; a checkpoint of nothing new costs nothing.
    #[arg(long, value_parser = duration_between(CHECKPOINT_INTERVAL), default_value = "100ms")]
    pub checkpoint_interval: Duration,
    /// Output format: Feldera JSON envelopes with a `table` key, Debezium records
    /// (`debezium`: key, change-event envelope and destination, one per line; with
    /// --out-dir, all in `changes.json`; with --sink, each record's value a message on
    /// its table's subject, as Debezium Server publishes them), one JSON object per event
    /// (`json`, debugging, stdout only), or readable text (stdout only).
    #[arg(long, value_enum, default_value_t = FormatArg::Feldera)]
    pub format: FormatArg,
    /// With --format debezium: the name in every record (`source.name`, and the first part
    /// of each destination `<name>.<schema>.<table>`), as Debezium's `topic.prefix`.
    #[arg(long, value_name = "NAME", default_value = "pgcdc")]
    pub debezium_name: String,
    /// With --format debezium: each key and value with its Kafka Connect schema
    /// (`{"schema":…,"payload":…}`, Debezium's `schemas.enable`; Feldera's Debezium input
    /// needs it), or the documents alone.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub debezium_schemas: bool,
    /// What a changed table (a column added, dropped or retyped) does: `fail` stops before
    /// any row under the new schema with the difference named; `evolve` goes on, rows
    /// under the new schema (each output shows them as it can: Debezium records carry the
    /// new columns and, with schemas, the new schema). Default: `evolve` with --format
    /// debezium, as Debezium's consumers expect; `fail` otherwise (a Feldera table must be
    /// changed first).
    #[arg(long, value_enum)]
    pub on_schema_change: Option<SchemaChangeArg>,
    /// With --format debezium: numerics exact as Debezium's default (`precise`), as text
    /// (`string`, what Feldera's `debezium_postgres` flavor reads), or as doubles.
    #[arg(long, value_enum, default_value_t = DecimalArg::Precise)]
    pub debezium_decimal: DecimalArg,
    /// With --format debezium: Debezium's `time.precision.mode`.
    #[arg(long, value_enum, default_value_t = TimeArg::Adaptive)]
    pub debezium_time: TimeArg,
    /// With --format debezium: transaction metadata, as Debezium's
    /// `provide.transaction.metadata`: BEGIN and END records (with event counts) on
    /// `<name>.transaction`, and each change's place in its transaction.
    #[arg(long)]
    pub debezium_transactions: bool,
    /// With --format debezium: Debezium's `binary.handling.mode`.
    #[arg(long, value_enum, default_value_t = BinaryArg::Bytes)]
    pub debezium_binary: BinaryArg,
    /// With --format debezium: Debezium's `interval.handling.mode`: microseconds
    /// (`numeric`, a month counted as 30.4375 days) or exact ISO 8601 text (`string`).
    #[arg(long, value_enum, default_value_t = IntervalArg::Numeric)]
    pub debezium_interval: IntervalArg,
    /// With --format debezium: Debezium's `hstore.handling.mode`: a string holding a
    /// JSON object (`json`) or the object itself (`map`).
    #[arg(long, value_enum, default_value_t = HstoreArg::Json)]
    pub debezium_hstore: HstoreArg,
    /// Write one Feldera JSON file per table into this directory instead of stdout,
    /// durably with its resume position (`pgcdc-checkpoint.json`): rerunning the same
    /// command resumes exactly where it stopped, without duplicates.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// With --out-dir: one file per table (default) or one `changes.json` for all.
    #[arg(long, value_enum, default_value_t = LayoutArg::PerTable, requires = "out_dir")]
    pub layout: LayoutArg,
    /// Output policies for what Feldera cannot express.
    #[command(flatten)]
    pub policies: PolicyArgs,
    /// Stop cleanly once the stream reaches this WAL position (e.g. `16/B374D848`).
    #[arg(long, value_name = "LSN")]
    pub end_lsn: Option<Lsn>,
    /// Create the replication slot if it does not exist, or replace it when a new initial
    /// snapshot needs a new one. Without it, a missing slot is an error.
    #[arg(long)]
    pub create_slot: bool,
    /// Create the publication (`CREATE PUBLICATION name FOR TABLE ...` with the --table
    /// tables) if it does not exist.
    #[arg(long, requires = "tables")]
    pub create_publication: bool,
    /// Summary printed to stderr at exit.
    #[arg(long, value_enum, default_value_t = SummaryArg::Text)]
    pub summary: SummaryArg,
    /// Interval of the status line on stderr (100ms to 1h).
    #[arg(long, value_parser = duration_between(STATUS_INTERVAL), default_value = "5s")]
    pub status_interval: Duration,
    /// Connections copying the initial snapshot in parallel, 1 to 64 (`--snapshot online`:
    /// chunks read at once, several key ranges of one table when fewer tables are left;
    /// consistent: tables at once, a large table in ctid ranges or, when over a quarter of
    /// the server's shared_buffers, in one COPY decoded by as many threads).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub snapshot_workers: u16,
    /// Copy this table again while streaming (repeatable): the output gets a TRUNCATE of
    /// the table, then its rows in chunks (online), and ends equal to the table. Restarts
    /// that table's copy on every run given the flag: give it once. With Feldera JSON,
    /// choose how TRUNCATE is written (--on-truncate).
    #[arg(long = "resnapshot", value_name = "SCHEMA.TABLE")]
    pub resnapshot: Vec<String>,
    /// `--snapshot online`: rows per chunk, 1 to 10,000,000 (each chunk is one short
    /// transaction; the stream waits while one is read).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub chunk_rows: u32,
    /// Transactions larger than the server's `logical_decoding_work_mem`: sent while in
    /// progress and buffered here (`on`, protocol 2; `parallel`, protocol 4, PostgreSQL
    /// 16+), or spilled to the server's disk until they commit (`off`). `auto` (default):
    /// `parallel` on 16+, `on` on 14 and 15.
    #[arg(long, value_enum, default_value_t = StreamingArg::Auto)]
    pub streaming: StreamingArg,
    /// Decode prepared transactions at PREPARE TRANSACTION (PostgreSQL 15+). They are
    /// still written once, at COMMIT PREPARED; until then the slot is held at the
    /// PREPARE, so a restart receives them again.
    #[arg(long)]
    pub two_phase: bool,
    /// Create the slot as a failover slot (PostgreSQL 17+): standbys with
    /// `sync_replication_slots = on` keep a synced copy, so the stream resumes on a
    /// promoted standby.
    #[arg(long)]
    pub failover: bool,
    /// Metrics endpoint.
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// The NATS JetStream sink.
    #[command(flatten)]
    pub nats: nats::NatsArgs,
}

/// `--metrics-addr` and `--health-grace`.
#[derive(Clone, Debug, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at `http://HOST:PORT/metrics` and a health check at
    /// `/health` (e.g. `127.0.0.1:9187`; port 0 picks one, printed on stderr). Off unless
    /// given; binds exactly where told.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// `/health` answers 503 once the replication connection has been reconnecting for
    /// longer than this (100ms to 1h).
    #[arg(long, value_parser = duration_between(STATUS_INTERVAL), default_value = "10s")]
    pub health_grace: Duration,
}

/// `--streaming`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StreamingArg {
    /// The best the server offers.
    Auto,
    /// Large transactions arrive at commit.
    Off,
    /// Streamed in progress (protocol 2, PostgreSQL 14+).
    On,
    /// Streamed in progress (protocol 4, PostgreSQL 16+).
    Parallel,
}

impl From<StreamingArg> for cdc_postgres::conn::Streaming {
    fn from(value: StreamingArg) -> Self {
        match value {
            StreamingArg::Auto => cdc_postgres::conn::Streaming::Auto,
            StreamingArg::Off => cdc_postgres::conn::Streaming::Off,
            StreamingArg::On => cdc_postgres::conn::Streaming::On,
            StreamingArg::Parallel => cdc_postgres::conn::Streaming::Parallel,
        }
    }
}

/// Output policies.
#[derive(Clone, Debug, Args)]
pub struct PolicyArgs {
    /// Float or numeric NaN/±Infinity: fail (`error`), write `null`, or write the text
    /// (`"NaN"`) as a string.
    #[arg(long, value_enum, default_value_t = ValuePolicyArg::Error)]
    pub on_non_finite: ValuePolicyArg,
    /// Dates/timestamps outside 0001..9999, ±infinity, and `time '24:00:00'` (Feldera's TIME
    /// stops at 23:59:59.999999): `error`, `null` or `string`.
    #[arg(long, value_enum, default_value_t = ValuePolicyArg::Error)]
    pub on_out_of_range: ValuePolicyArg,
    /// Arrays whose lower bound is not 1: `error`, `drop-bounds` or `string`.
    #[arg(long, value_enum, default_value_t = ArrayBoundsArg::Error)]
    pub on_array_bounds: ArrayBoundsArg,
    /// TRUNCATE: `error`, `skip` (keep the rows downstream), or `marker` (a record
    /// Feldera rejects; only for stdout or --layout multiplexed).
    #[arg(long, value_enum, default_value_t = TruncateArg::Error)]
    pub on_truncate: TruncateArg,
}

impl PolicyArgs {
    /// The sink policies.
    pub fn policies(&self) -> cdc_sinks::Policies {
        let mut policies = cdc_sinks::Policies::default();
        policies.non_finite = match self.on_non_finite {
            ValuePolicyArg::Error => NonFinitePolicy::Error,
            ValuePolicyArg::Null => NonFinitePolicy::Null,
            ValuePolicyArg::String => NonFinitePolicy::String,
        };
        policies.out_of_range = match self.on_out_of_range {
            ValuePolicyArg::Error => OutOfRangePolicy::Error,
            ValuePolicyArg::Null => OutOfRangePolicy::Null,
            ValuePolicyArg::String => OutOfRangePolicy::String,
        };
        policies.array_bounds = match self.on_array_bounds {
            ArrayBoundsArg::Error => ArrayBoundsPolicy::Error,
            ArrayBoundsArg::DropBounds => ArrayBoundsPolicy::DropBounds,
            ArrayBoundsArg::String => ArrayBoundsPolicy::String,
        };
        policies.truncate = match self.on_truncate {
            TruncateArg::Error => TruncatePolicy::Error,
            TruncateArg::Skip => TruncatePolicy::Skip,
            TruncateArg::Marker => TruncatePolicy::Marker,
        };
        policies
    }
}

/// `--snapshot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SnapshotArg {
    /// Stream at once and copy existing rows in primary-key chunks alongside (online,
    /// the default): resumable chunk by chunk, the slot advances during the copy.
    Online,
    /// Copy existing rows under one exported snapshot, then stream.
    #[value(alias = "initial")]
    Consistent,
    /// Stream changes only.
    Never,
    /// Copy existing rows and stop.
    InitialOnly,
}

/// `--commit-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CommitModeArg {
    /// The slot follows durable checkpoints.
    Checkpoint,
    /// The slot follows what was written.
    Completion,
}

impl From<CommitModeArg> for CommitMode {
    fn from(value: CommitModeArg) -> Self {
        match value {
            CommitModeArg::Checkpoint => CommitMode::Checkpoint,
            CommitModeArg::Completion => CommitMode::Completion,
        }
    }
}

/// `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Feldera JSON envelopes, one per line, with a `table` key.
    Feldera,
    /// Debezium records (PostgreSQL connector format, with or without schemas: `--debezium-schemas`), one per line.
    Debezium,
    /// One JSON object per event (with transaction boundaries and positions).
    Json,
    /// Readable text.
    Text,
}

/// `--on-schema-change`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SchemaChangeArg {
    /// Stop with an error naming the table and the difference.
    Fail,
    /// Go on with rows under the new schema.
    Evolve,
}

/// `--debezium-time`: Debezium's `time.precision.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TimeArg {
    /// Milliseconds up to precision 3, microseconds above.
    Adaptive,
    /// As adaptive, every `time` in microseconds.
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's types, in milliseconds.
    Connect,
}

/// `--debezium-interval`: Debezium's `interval.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IntervalArg {
    /// Microseconds.
    Numeric,
    /// ISO 8601 text.
    String,
}

/// `--debezium-hstore`: Debezium's `hstore.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HstoreArg {
    /// A string holding a JSON object.
    Json,
    /// A JSON object.
    Map,
}

/// `--debezium-binary`: Debezium's `binary.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BinaryArg {
    /// Connect bytes (base64 in JSON).
    Bytes,
    /// A base64 string.
    Base64,
    /// A URL-safe base64 string.
    Base64UrlSafe,
    /// A hex string.
    Hex,
}

/// `--debezium-decimal`: Debezium's `decimal.handling.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DecimalArg {
    /// Unscaled bytes (base64) with the scale: exact.
    Precise,
    /// The number's text.
    String,
    /// A JSON number (a double).
    Double,
}

/// `--layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// `schema.table.json` per table.
    PerTable,
    /// One `changes.json` with a `table` key in every envelope.
    Multiplexed,
}

/// `--on-non-finite`, `--on-out-of-range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ValuePolicyArg {
    /// Stop with an error naming table, column and position.
    Error,
    /// Write JSON null.
    Null,
    /// Write Postgres's text as a JSON string.
    String,
}

/// `--on-array-bounds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ArrayBoundsArg {
    /// Stop with an error.
    Error,
    /// Write the elements, dropping the bounds.
    DropBounds,
    /// Write Postgres's text as a JSON string.
    String,
}

/// `--on-truncate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TruncateArg {
    /// Stop with an error.
    Error,
    /// Write nothing (counted and logged).
    Skip,
    /// Write a truncate record.
    Marker,
}

/// `--summary`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SummaryArg {
    /// Readable lines.
    Text,
    /// One JSON object.
    Json,
    /// No summary.
    None,
}

/// `pgcdc check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Source.
    #[command(flatten)]
    pub source: SourceArgs,
    /// The stream uses a failover slot (PostgreSQL 17+): against the primary, check that
    /// it waits for its standbys (`synchronized_standby_slots`) and that the slot is a
    /// failover slot; against a standby, check that it syncs slots
    /// (`sync_replication_slots`, `primary_slot_name`, `hot_standby_feedback`, a
    /// `dbname` in `primary_conninfo`) and already holds a persistent copy of the slot.
    #[arg(long)]
    pub failover: bool,
}

/// `pgcdc slots`.
#[derive(Debug, Args)]
pub struct SlotsArgs {
    /// Connection.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Print one JSON object per slot instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `pgcdc drop-slot`.
#[derive(Debug, Args)]
pub struct DropSlotArgs {
    /// The slot.
    pub name: String,
    /// Connection.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Wait for a connection still using the slot to release it instead of failing.
    #[arg(long)]
    pub wait: bool,
    /// Succeed when the slot does not exist.
    #[arg(long)]
    pub if_exists: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn consistent_names_the_exported_snapshot_mode() {
        use clap::ValueEnum;
        assert_eq!(
            SnapshotArg::from_str("consistent", false),
            Ok(SnapshotArg::Consistent)
        );
        assert_eq!(
            SnapshotArg::from_str("initial", false),
            Ok(SnapshotArg::Consistent)
        );
    }
}
