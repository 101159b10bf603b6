//! The PostgreSQL source of pgcdc: everything that talks to a server.
//!
//! # Embedding
//!
//! Build a [`source::PgSource`] from a [`conn::SourceConfig`] (a connection string, or the
//! JSON of Feldera's `postgres_cdc` connector with [`conn::SourceConfig::from_json`]) and
//! run it into a sink with [`cdc_core::Pipeline`]:
//!
//! ```no_run
//! use cdc_core::{Pipeline, PipelineConfig, Sink};
//! use cdc_postgres::conn::SourceConfig;
//! use cdc_postgres::source::{PgSource, PgSourceOptions};
//!
//! async fn stream(sink: impl Sink + 'static) -> cdc_core::Result<()> {
//!     let config = SourceConfig::new("postgres://cdc:secret@db/shop", "shop")?
//!         .with_tables(["public.orders"])?;
//!     let source = PgSource::new(PgSourceOptions::new(config));
//!     let summary = Pipeline::new(source, sink, PipelineConfig::default())
//!         .run()
//!         .await?;
//!     println!("confirmed up to {}", summary.confirmed);
//!     Ok(())
//! }
//! ```
//!
//! Every setting has one home in [`conn::SourceConfig`] (the snapshot mode, the commit
//! mode) or [`source::PgSourceOptions`] (slot policy, workers, end position); the source
//! checks the server once, before the sink is opened.
//!
//! # Layers
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
