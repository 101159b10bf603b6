//! Dev-only test kit for pgcdc: throwaway PostgreSQL clusters with fault injection.
//!
//! Every integration test that talks to Postgres starts its own [`Cluster`]: a fresh
//! `initdb` in a temporary directory, a server on a random free port of `127.0.0.1` and on a
//! private Unix socket, `wal_level = logical`, and the authentication method, users, TLS
//! material and settings the test asks for. Clusters are independent, so tests run in
//! parallel. Dropping a cluster — also when the test panics — stops the server and removes
//! its directory.
//!
//! ```no_run
//! use cdc_testkit::{AuthMethod, Cluster, ClusterBuilder};
//!
//! # async fn demo() -> cdc_testkit::Result<()> {
//! let cluster = ClusterBuilder::new()
//!     .auth(AuthMethod::ScramSha256)
//!     .user("alice", "secret")
//!     .setting("wal_sender_timeout", "2s")
//!     .tls()
//!     .build()
//!     .await?;
//! cluster.execute("CREATE TABLE t (id int PRIMARY KEY)").await?;
//! let conninfo = cluster.connection_string("postgres", "alice", Some("secret"));
//! // ... run the code under test against `conninfo` ...
//! cluster.kill9().await?; // crash
//! cluster.start().await?; // crash recovery
//! # let _ = (conninfo, Cluster::new);
//! # Ok(())
//! # }
//! ```
//!
//! # Finding PostgreSQL
//!
//! See [`PgBinaries::find`]: `PG_BIN`, then `pg_config --bindir`, then the newest
//! `/usr/lib/postgresql/<version>/bin`.
//!
//! # Running as root
//!
//! PostgreSQL refuses to run as root. When the tests run as root (as in CI), the server
//! processes run as the `postgres` system user, which must exist; the kit gives it the
//! directories it needs. Otherwise they run as the current user.

#![warn(missing_docs)]

mod binaries;
mod cache;
mod cluster;
mod error;
mod os;
mod tls;

pub use binaries::{
    PG_BIN_ENV, PG_VERSIONS_ENV, PgBinaries, try_versions_under_test, versions_under_test,
};
pub use cache::{NPM_PACKAGE, PG_CACHE_ENV};
pub use cluster::{
    ADMIN_PASSWORD, ADMIN_USER, AuthMethod, Cluster, ClusterBuilder, HOST, KEEP_ENV, StandbyBuilder,
};
pub use error::{Error, Result};
pub use tls::{DEFAULT_SERVER_NAMES, IssuedCert, TlsFiles};

/// Re-export of the client library the helpers return.
pub use tokio_postgres;
