//! The PostgreSQL logical replication protocol for pgcdc, sans-IO: bytes in, values out.
//!
//! - [`protocol`]: codecs of the replication sub-protocol (XLogData, keepalives, standby
//!   status updates) and of pgoutput's messages (protocol versions 1–4), with zero-copy
//!   tuple views.
//! - [`types`]: decoders from Postgres's binary and text formats into
//!   [`cdc_core::Value`], by type OID, and the registry of a session's types.
//! - [`backfill`]: the online snapshot's merge: transaction visibility in a chunk's
//!   snapshot, primary-key order as Postgres's btree has it, and the rules that merge
//!   chunks into the stream.
//! - [`changes`]: the change assembler that turns decoded messages into
//!   [`cdc_core::ChangeEvent`]s: relation cache, positions, streamed-transaction buffers.
//! - [`machine`]: the source's decisions as plain state (the source machine and its parts).
//!
//! This crate must never depend on an async runtime, sockets, TLS, a Postgres client
//! library or the filesystem: its normal dependencies are `cdc-core`'s model (without the
//! `runtime` feature) and small pure crates (`bytes`, `memchr`, `uuid`, `thiserror`). Where
//! the assembler needs storage beyond memory (spilling large streamed transactions), the
//! caller provides it through [`changes::SpillStorage`]. The I/O around this crate lives in
//! `cdc-postgres`. `tests/dependencies.rs` enforces the rule.

pub mod backfill;
pub mod changes;
pub mod machine;
pub mod protocol;
#[cfg(test)]
mod seed_rng;
pub mod types;
