//! Bookkeeping of two-phase transactions (protocol v3+): which transaction is between
//! Begin Prepare and Prepare, which are prepared and waiting for COMMIT PREPARED or
//! ROLLBACK PREPARED, and how far the slot may be confirmed while they wait.
//!
//! A prepared transaction's messages are kept (in the stream buffers, so memory stays
//! bounded) and decoded only at COMMIT PREPARED, where they are delivered at the commit's
//! position, in commit order. The server sends a prepared transaction again after a
//! restart only if the slot's confirmed position is at or before its PREPARE record
//! (past it, the server assumes the client has it and sends COMMIT PREPARED alone); so
//! while one waits, [`PreparedTransactions::confirm_hold`] is the furthest the slot may be
//! confirmed.

use std::collections::HashMap;

use cdc_core::{Lsn, SchemaRef};

/// A schema change first seen (as a Relation message) inside a prepared transaction. The
/// Relation message is registered at once, since pgoutput does not send it again to later
/// transactions of the session; the event is delivered inside the transaction, just before
/// its `before_change`-th change (1-based), when the transaction commits.
#[derive(Debug, Clone)]
pub(super) struct HeldSchemaChange {
    /// The change (1-based, counted as the assembler counts changes) it precedes.
    pub before_change: u64,
    /// The schema before.
    pub old: SchemaRef,
    /// The schema from then on.
    pub new: SchemaRef,
}

/// A prepared transaction waiting for its outcome.
#[derive(Debug)]
pub(super) struct PreparedTx {
    /// The LSN of the PREPARE record.
    pub prepare_lsn: Lsn,
    /// Whether its messages were streamed (they carry xids and were buffered as a stream)
    /// rather than sent between Begin Prepare and Prepare.
    pub streamed: bool,
    /// Schema changes to deliver inside it.
    pub schema_changes: Vec<HeldSchemaChange>,
}

/// The transaction between Begin Prepare and Prepare.
#[derive(Debug)]
pub(super) struct Preparing {
    /// Its xid.
    pub xid: u32,
    /// The LSN of its PREPARE record (from Begin Prepare).
    pub prepare_lsn: Lsn,
    /// Changes received so far (counted as the assembler counts them at release).
    pub changes: u64,
    /// Schema changes seen so far.
    pub schema_changes: Vec<HeldSchemaChange>,
}

/// Prepared transactions of one replication session.
#[derive(Debug, Default)]
pub(super) struct PreparedTransactions {
    preparing: Option<Preparing>,
    prepared: HashMap<u32, PreparedTx>,
}

impl PreparedTransactions {
    /// The transaction being prepared, if any.
    pub fn preparing_mut(&mut self) -> Option<&mut Preparing> {
        self.preparing.as_mut()
    }

    /// Whether a transaction is between Begin Prepare and Prepare.
    pub fn is_preparing(&self) -> bool {
        self.preparing.is_some()
    }

    /// Begin Prepare: `xid`'s messages follow.
    pub fn begin(&mut self, xid: u32, prepare_lsn: Lsn) -> Result<(), String> {
        if let Some(open) = &self.preparing {
            return Err(format!(
                "Begin Prepare of transaction {xid} while transaction {} is being prepared",
                open.xid
            ));
        }
        self.preparing = Some(Preparing {
            xid,
            prepare_lsn,
            changes: 0,
            schema_changes: Vec::new(),
        });
        Ok(())
    }

    /// Prepare: the open transaction waits for its outcome.
    pub fn prepare(&mut self, xid: u32, prepare_lsn: Lsn) -> Result<(), String> {
        let Some(open) = self.preparing.take() else {
            return Err(format!(
                "Prepare of transaction {xid} without Begin Prepare"
            ));
        };
        if open.xid != xid || open.prepare_lsn != prepare_lsn {
            return Err(format!(
                "Prepare of transaction {xid} at {prepare_lsn} ends transaction {} begun at {}",
                open.xid, open.prepare_lsn
            ));
        }
        self.prepared.insert(
            xid,
            PreparedTx {
                prepare_lsn,
                streamed: false,
                schema_changes: open.schema_changes,
            },
        );
        Ok(())
    }

    /// Stream Prepare: the streamed transaction `xid` waits for its outcome.
    pub fn prepare_streamed(&mut self, xid: u32, prepare_lsn: Lsn) {
        self.prepared.insert(
            xid,
            PreparedTx {
                prepare_lsn,
                streamed: true,
                schema_changes: Vec::new(),
            },
        );
    }

    /// COMMIT PREPARED or ROLLBACK PREPARED of `xid`: its entry, if it was prepared in
    /// this session.
    pub fn finish(&mut self, xid: u32) -> Option<PreparedTx> {
        self.prepared.remove(&xid)
    }

    /// How many transactions wait for COMMIT PREPARED or ROLLBACK PREPARED.
    pub fn waiting(&self) -> usize {
        self.prepared.len()
    }

    /// The furthest the slot may be confirmed: the earliest PREPARE still waiting (or
    /// being received); `None` when none is.
    pub fn confirm_hold(&self) -> Option<Lsn> {
        self.prepared
            .values()
            .map(|p| p.prepare_lsn)
            .chain(self.preparing.as_ref().map(|p| p.prepare_lsn))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_is_the_earliest_waiting_prepare() {
        let mut p = PreparedTransactions::default();
        assert_eq!(p.confirm_hold(), None);
        p.begin(7, Lsn(300)).unwrap();
        assert_eq!(p.confirm_hold(), Some(Lsn(300)));
        assert!(p.begin(8, Lsn(400)).is_err());
        p.prepare(7, Lsn(300)).unwrap();
        p.prepare_streamed(9, Lsn(500));
        p.begin(8, Lsn(400)).unwrap();
        p.prepare(8, Lsn(400)).unwrap();
        assert_eq!((p.confirm_hold(), p.waiting()), (Some(Lsn(300)), 3));
        assert!(p.finish(7).is_some_and(|t| !t.streamed));
        assert_eq!(p.confirm_hold(), Some(Lsn(400)));
        assert!(p.finish(7).is_none());
        assert!(p.finish(8).is_some());
        assert!(p.finish(9).is_some_and(|t| t.streamed));
        assert_eq!(p.confirm_hold(), None);
    }

    #[test]
    fn prepare_must_match_its_begin() {
        let mut p = PreparedTransactions::default();
        assert!(p.prepare(1, Lsn(10)).is_err());
        p.begin(1, Lsn(10)).unwrap();
        assert!(p.prepare(2, Lsn(10)).is_err());
        p.begin(1, Lsn(10)).unwrap();
        assert!(p.prepare(1, Lsn(11)).is_err());
    }
}
