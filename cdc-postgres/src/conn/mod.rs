//! Connecting to PostgreSQL: configuration, identity, TLS, authentication, the replication
//! session and its CopyBoth stream, and the checks run before streaming.
//!
//! - [`config`]: [`SourceConfig`] (what to stream) and [`ConnectionConfig`] (how to reach the
//!   server), parsed from a libpq connection string by [`conninfo`], or deserialized from
//!   the JSON shape of Feldera's `postgres_cdc` connector ([`feldera`]); completed from
//!   libpq's `PG*` variables and password file on request only ([`mod@env`], [`pgpass`]).
//! - [`identity`]: the stable source id and default slot name (host, port, database and
//!   publication only), and the resume check against the server's system identifier and
//!   timeline.
//! - [`tls`] and `transport`: sockets (TCP, Unix) and TLS per `sslmode`, exactly as libpq
//!   documents it, shared by both connections; `tcp_keepalive`: TCP keepalive and
//!   `TCP_USER_TIMEOUT` on their TCP sockets.
//! - `wire`: startup and authentication (trust, password, md5, SCRAM-SHA-256), the
//!   simple-query protocol and COPY out of our own sessions (`replication=database`, and
//!   the snapshot's SQL sessions).
//! - `channel_binding`: SCRAM channel binding (`tls-server-end-point`) per
//!   [`ChannelBinding`], for both connections.
//! - [`replication`]: [`ReplicationConnection`] and its commands (`IDENTIFY_SYSTEM`,
//!   `CREATE_REPLICATION_SLOT`, `READ_REPLICATION_SLOT`, `DROP_REPLICATION_SLOT`,
//!   `START_REPLICATION`).
//! - [`stream`]: [`ReplicationStream`], the CopyBoth stream, run by a background task that
//!   answers keepalives and sends status updates even while the consumer does not read.
//! - [`secret`]: [`Secret`], a string `Debug` never shows, and the marker shown instead.
//! - [`session`]: the settings every session pins (text output, timeouts), in one place.
//! - [`sql`]: an ordinary `tokio-postgres` client over the same transport and TLS settings
//!   (catalog queries, preflight, slot inspection).
//! - `sql_session`: an ordinary SQL session on `wire`, for the snapshot's bulk reads: a
//!   COPY's rows go from the read buffer to the decoder with nothing allocated per row.
//! - [`preflight`](mod@preflight): `wal_level`, privileges, publication, tables, replica identity and slot
//!   health ([`slot`]), as a report of problems with fixes; for a failover slot, what keeps
//!   it through a promotion ([`mod@failover`]).
//! - [`error`]: how server and I/O errors map to [`cdc_core::ErrorKind`].

mod channel_binding;
pub mod config;
pub mod conninfo;
pub mod env;
pub mod error;
pub mod failover;
pub mod feldera;
mod frame;
mod framing;
pub mod identity;
pub mod pgpass;
pub mod preflight;
mod read_batching;
pub mod replication;
pub mod secret;
mod servers;
pub mod session;
pub mod slot;
pub mod sql;
pub(crate) mod sql_session;
pub mod stream;
mod stream_options;
mod tcp_keepalive;
pub mod timeline;
pub mod tls;
mod transport;
mod wire;

pub use config::{
    ChannelBinding, ConnectionConfig, DEFAULT_HOST, DEFAULT_PORT, Endpoint, Host, PemSource,
    SnapshotMode, SourceConfig, SslMode, TableRef, TargetSessionAttrs, TlsConfig,
    validate_slot_name,
};
pub use env::{ENV_PARAMETERS, PgEnv};
pub use failover::{FailoverGap, failover_gaps};
pub use feldera::SourceConfigJson;
pub use identity::{SLOT_PREFIX, check_resume, default_slot_name, stable_source_id};
pub use preflight::{
    PreflightOptions, PreflightReport, Problem, ProblemKind, PublishedTable, Severity, preflight,
};
pub use read_batching::LocalBatching;
pub use replication::{
    CreateSlotOptions, CreatedSlot, PgOutputOptions, QueryResult, ReadSlot, ReplicationConnection,
    SnapshotAction, Streaming, SystemInfo,
};
pub use secret::{REDACTED, Secret};
pub use slot::{SlotInfo, SlotProblem, inspect_slot, slot_problems};
pub use sql::connect_sql;
pub use stream::{FlushHandle, ReplicationStream, StreamOptions};
