//! The `pgcdc` command-line tool, as a library so its pieces can be tested and reused by
//! the examples. It is what ships: it must never depend on the dev-only test kit
//! (`pgcdc demo` starts its throwaway cluster with its own `local_cluster` module).
//!
//! - [`cli`]: the command line (clap) and the exit codes;
//! - [`commands`]: `demo`, `stream`, `check`, `slots` and `drop-slot`;
//! - [`connection`]: the connection string from `--uri`, `--uri-file` or `--uri-env`,
//!   completed from libpq's environment (`PG*` variables, `~/.pgpass`);
//! - [`counting_sink`]: a [`cdc_core::Sink`] wrapper that counts changes per table and
//!   operation for the summaries and the progress display;
//! - [`observed_source`]: a [`cdc_core::Source`] wrapper that publishes catalog facts and
//!   the received position for the progress display (whether a slot may be created or
//!   replaced is the library's `SlotPolicy`, set from `--create-slot`);
//! - [`progress`]: the snapshot progress bar and the periodic status line on stderr;
//! - [`summary`]: what a run did, printed at exit as text or JSON.

pub mod cli;
pub mod commands;
pub mod connection;
pub mod counting_sink;
pub mod metrics_server;
pub mod observed_source;
pub mod progress;
pub mod summary;

mod local_cluster;
mod signals;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, CliError, Command, LogFormat};

/// Runs the `pgcdc` command line: parses arguments (clap exits with status 2 on bad
/// usage), sets up logging on stderr, runs the command and turns its outcome into an exit
/// code. Errors are printed as one line on stderr.
pub fn main_entry() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.global.log_format, cli.global.quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("pgcdc: error: could not start the async runtime: {e}");
            return ExitCode::from(cli::EXIT_OTHER);
        }
    };
    let global = cli.global.clone();
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Demo(args) => commands::demo::run(args, &global).await,
            Command::Stream(args) => commands::stream::run(*args, &global).await,
            Command::Check(args) => commands::check::run(args).await,
            Command::Slots(args) => commands::slots::run(args).await,
            Command::DropSlot(args) => commands::slots::drop_slot(args).await,
        }
    });
    // Background tasks (connection tasks, the demo's workload) must not keep the process
    // alive, and must not delay the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match outcome {
        Ok(code) => code,
        Err(CliError { code, message }) => {
            eprintln!("pgcdc: {}", indent_continuation(&message));
            ExitCode::from(code)
        }
    }
}

/// Folds a multi-line message (a preflight listing several problems) onto separate
/// indented lines under the first, and trims trailing white space.
fn indent_continuation(message: &str) -> String {
    message.trim_end().replace('\n', "\n  ")
}

/// Logs go to stderr, filtered by `RUST_LOG` (default: warnings; errors only with
/// `--quiet`), as text or one JSON object per line.
fn init_logging(format: LogFormat, quiet: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;

    let default = if quiet { "error" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    if let Err(e) = result {
        eprintln!("pgcdc: warning: logging is not available: {e}");
    }
}

/// The README's Rust example, compiled by `cargo test` (doctest) so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;
