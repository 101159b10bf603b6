//! What the source has produced but not yet put into a batch, and the handle through
//! which the snapshot and backfill phases add to it (both from the machine's crate).

pub(crate) use cdc_pgoutput::machine::batches::EventQueue;
