//! The source's decisions as plain state, no I/O. The driver in `cdc-postgres` performs
//! the I/O and feeds results in.
//!
//! - [`source`]: [`source::SourceMachine`], the streaming source's decisions in one place,
//!   built from the parts below.
//!
//! - [`consistent`]: a consistent snapshot's rows and markers, with their positions.
//! - [`batches`]: the pending queue, the batch being built and where it ends, and what
//!   the handed-out batches cover for resume tokens.
//! - [`progress`]: an idle stream's progress and the run's end position.
//! - [`schedule`]: the streaming loop's choice of its next step, and how long it waits.
//! - [`start`]: where a run starts (resume, a new slot, which copy) from the token, the
//!   slot and the configured snapshot.
//! - [`table_set`]: which tables a resumed stream copies, from the token's record and the
//!   configured tables.

pub mod batches;
pub mod consistent;
pub mod progress;
pub mod schedule;
pub mod source;
pub mod start;
pub mod table_set;

#[cfg(test)]
mod simulation;
