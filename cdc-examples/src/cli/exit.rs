//! The exit codes of every command, and the error type commands return.

use cdc_core::ErrorKind;

/// Success: the stream reached `--end-lsn`, a snapshot-only run finished, or a shutdown
/// was requested (Ctrl-C, SIGTERM) and completed.
pub const EXIT_OK: u8 = 0;
/// Any other failure (I/O, the demo's local cluster could not start, an internal error).
pub const EXIT_OTHER: u8 = 1;
/// Invalid command line.
pub const EXIT_USAGE: u8 = 2;
/// Configuration error: a flag, the connection string, the credentials or the source
/// database's setup is wrong. Fix it, then rerun.
pub const EXIT_CONFIG: u8 = 3;
/// Temporary failure: the server is unreachable or went away. Rerun to resume without loss.
pub const EXIT_TRANSIENT: u8 = 4;
/// The stream cannot resume (slot missing, invalidated, or not the one the saved position
/// came from): start over with a new snapshot.
pub const EXIT_RESYNC: u8 = 5;
/// The server sent something this version cannot interpret.
pub const EXIT_PROTOCOL: u8 = 6;
/// The sink (output files, stdout) failed.
pub const EXIT_SINK: u8 = 7;
/// A value the output policy refuses (e.g. NaN): choose a policy or change the data.
pub const EXIT_REJECTED: u8 = 8;
/// Interrupted twice: stopped without the final checkpoint (a restart resumes from the
/// previous one).
pub const EXIT_INTERRUPTED: u8 = 130;

/// The exit code for an error of `kind`.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Config => EXIT_CONFIG,
        ErrorKind::Transient => EXIT_TRANSIENT,
        ErrorKind::ResyncRequired => EXIT_RESYNC,
        ErrorKind::Protocol => EXIT_PROTOCOL,
        ErrorKind::Sink => EXIT_SINK,
        ErrorKind::Rejected => EXIT_REJECTED,
        _ => EXIT_OTHER,
    }
}

/// A command's failure: the exit code and a message for stderr.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub code: u8,
    /// What failed (printed after `pgcdc: `).
    pub message: String,
}

impl CliError {
    /// A failure with exit code [`EXIT_OTHER`].
    pub fn other(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_OTHER,
            message: format!("error: {}", message.into()),
        }
    }

    /// A command line that parses but does not make sense ([`EXIT_USAGE`]).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            code: EXIT_USAGE,
            message: format!("error: {}", message.into()),
        }
    }
}

impl From<cdc_core::Error> for CliError {
    fn from(e: cdc_core::Error) -> Self {
        CliError {
            code: exit_code(e.kind()),
            message: e.to_string(),
        }
    }
}
