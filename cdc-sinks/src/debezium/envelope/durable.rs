//! What a durable output (the file sink's `--out-dir`) needs of the encoder: every record
//! decided at the end of each batch, and the encoder's state saved with a checkpoint and
//! restored at reopen, so that the records after a restart are those an uninterrupted
//! run writes.

use cdc_core::{Lsn, TableName};
use serde::{Deserialize, Serialize};

use super::{DebeziumEncoder, Transaction};

/// The encoder's state between two events, as a checkpoint stores it: the transaction
/// in progress (a checkpoint may fall inside one), the end of the one before it
/// (`source.sequence`), and where the snapshot stands (which tables are being copied,
/// which began, whether its first row was written, when it began).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebeziumState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transaction: Option<Transaction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_commit: Option<Lsn>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    copying: Vec<TableName>,
    #[serde(default = "yes")]
    first_snapshot_row: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    started_tables: Vec<TableName>,
    #[serde(default)]
    snapshot_micros: i64,
}

fn yes() -> bool {
    true
}

impl DebeziumEncoder {
    /// The end of a batch whose records must all be written now (a durable output
    /// checkpoints what it wrote): a held snapshot row is written with what is known of
    /// it — its table's last when the table's completion came (the snapshot's last only
    /// when the snapshot's completion came in the same batch, which an online snapshot's
    /// batching guarantees), else `first`, `first_in_data_collection` or `true`.
    pub fn end_of_durable_batch(&mut self, out: &mut Vec<u8>) {
        self.release(out, false);
    }

    /// The state to save with a checkpoint taken after [`Self::end_of_durable_batch`].
    pub fn state(&self) -> DebeziumState {
        DebeziumState {
            transaction: self.transaction.clone(),
            last_commit: self.last_commit,
            copying: self.copying.clone(),
            first_snapshot_row: self.first_snapshot_row,
            started_tables: self.started_tables.clone(),
            snapshot_micros: self.snapshot_micros,
        }
    }

    /// Continues from a checkpoint's `state` (a reopened output).
    pub fn restore(&mut self, state: DebeziumState) {
        self.transaction = state.transaction;
        self.last_commit = state.last_commit;
        self.copying = state.copying;
        self.first_snapshot_row = state.first_snapshot_row;
        self.started_tables = state.started_tables;
        self.snapshot_micros = state.snapshot_micros;
        self.held = None;
    }
}
