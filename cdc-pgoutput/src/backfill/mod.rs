//! Pure building blocks of online (incremental) snapshots.
//!
//! An online snapshot reads each table in primary-key-ordered chunks, each chunk in its own
//! short `REPEATABLE READ` transaction on an ordinary connection, while the replication
//! stream keeps flowing. Merging a chunk's rows with the streamed transactions needs two
//! answers this module gives without any I/O:
//!
//! - [`xid_snapshot`]: which transactions a chunk's snapshot (`pg_current_snapshot()`) saw
//!   as committed, given the 32-bit transaction id that pgoutput's Begin and Stream Start
//!   messages carry.
//! - [`key_order`]: whether a streamed row's primary key falls inside a chunk's key range,
//!   by comparing keys exactly as the server's btree ordered them (only for the types and
//!   collations where that can be reproduced without a collation library).
//! - [`merge`]: the rules that decide, for every streamed change, whether a chunk already
//!   reflects it — and why no change is lost or applied twice.
//! - [`token_progress`]: what a resume token says of the online snapshot, for exactly the
//!   events it covers.
//! - [`online`]: the running online snapshot's decisions — read rounds, chunk placement,
//!   keyless tables read whole, events held for the server's key comparisons — around the
//!   merge, for a driver that does the reading.

pub mod key_order;
pub mod merge;
pub mod online;
pub mod token_progress;
pub mod xid_snapshot;
