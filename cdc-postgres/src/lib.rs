//! The PostgreSQL source of pgcdc: everything that talks to a server.
//!
//! Connection strings and Feldera's connector JSON ([`conn::config`]), TLS and
//! authentication, the replication connection and its commands, the CopyBoth replication
//! stream, preflight checks and slots ([`conn`]), the published tables' columns and types
//! ([`catalog`]), the snapshot's reads — the consistent mode's copy and the online mode's
//! chunks ([`snapshot`]) — and
//! [`source::PgSource`], which puts them together as a [`cdc_core::Source`]. Bytes are
//! turned into values by the sans-IO protocol crate [`cdc_pgoutput`] (re-exported as
//! [`pgoutput`]); this crate owns the sockets, the clock and the tasks around it.
//!
//! It must never depend on a sink, on the CLI, or on the dev-only test kit.

pub mod catalog;
pub mod conn;
#[cfg(feature = "prometheus")]
pub mod metrics;
pub mod snapshot;
pub mod source;
mod wal_page;

/// The protocol crate this source decodes with (types such as
/// [`pgoutput::changes::MessageFilter`] appear in [`source::PgSourceOptions`]).
pub use cdc_pgoutput as pgoutput;
