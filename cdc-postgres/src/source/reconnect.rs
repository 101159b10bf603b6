//! Recovery of a [`PgSource`]: a lost replication connection is reopened from the
//! confirmed position, an interrupted consistent snapshot is taken again, both with
//! backoff, and the online snapshot's bookkeeping follows the new session.

use cdc_core::{Error, Result};

use super::PgSource;
use super::options::Retries;
use super::stats::SourceState;
use crate::conn::ReplicationConnection;
use cdc_pgoutput::changes::ChangeAssembler;
use cdc_pgoutput::protocol::pgoutput::ProtocolVersion;

impl PgSource {
    /// Reconnects after `cause` (counted in the statistics under `label`).
    pub(super) async fn reconnect(&mut self, cause: Error, label: &'static str) -> Result<()> {
        self.stats.reconnect(label);
        self.stats
            .set_state(SourceState::Reconnecting, Some(cause.to_string()));
        self.reported_state = SourceState::Reconnecting;
        let mut retries = Retries::new(
            self.options.reconnect,
            "reconnect attempts",
            "replication connection lost; reconnecting",
        );
        let mut last = cause;
        loop {
            tokio::time::sleep(retries.after_failure(last)?).await;
            match self.resume_stream().await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => last = e,
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes the snapshot again after a transient failure, with backoff.
    pub(super) async fn retry_snapshot(&mut self, cause: Error) -> Result<()> {
        let mut retries = Retries::new(
            self.options.reconnect,
            "attempts at the snapshot",
            "snapshot interrupted; taking it again",
        );
        let mut last = cause;
        loop {
            tokio::time::sleep(retries.after_failure(last)?).await;
            match self.restart_snapshot().await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => last = e,
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens a new replication session from the confirmed position.
    async fn resume_stream(&mut self) -> Result<()> {
        self.stream = None;
        let resume = self.machine.resume_point();
        let mut conn = ReplicationConnection::connect(&self.options.config.connection).await?;
        let system = conn.identify_system().await?;
        if let Some(identity) = self.identity.clone() {
            // The server may be another one of the connection string's (a standby promoted
            // since): it may continue only if everything handed out so far is in its
            // history.
            let current = system.identity(&identity.database, &self.slot);
            super::start::check_resume_on(&mut conn, &identity, resume.handed_out_upto, &current)
                .await?;
            self.identity = Some(current);
        }
        let Some(pgoutput) = self.pgoutput.clone() else {
            return Err(Error::protocol("internal: reconnect before start"));
        };
        let version = ProtocolVersion::from_number(pgoutput.protocol_version(self.server_version)?)
            .unwrap_or(ProtocolVersion::V1);
        if self.machine.assembler().is_none() {
            let assembler = ChangeAssembler::new(self.assembler_config(version));
            self.machine.set_assembler(assembler);
        }
        self.machine.new_session();
        if let Some(backfill) = self.backfill.as_mut() {
            // Chunk rows still queued went with the queue; those already in the batch
            // being built stay and will be handed out. Continue from what that covers,
            // with the stream's new starting point.
            let batches = self.machine.batches();
            let kept = backfill.progress_for(
                batches.queued_upto(),
                batches.covered_end().max(batches.building().commit_end),
                batches.building().events.last(),
            );
            self.backfill =
                Some(backfill.for_new_session(kept, resume.start, batches.queued_upto())?);
        }
        let stream = conn
            .start_replication(&self.slot, resume.start, &pgoutput, self.options.stream)
            .await?;
        stream.set_flushed(resume.start);
        self.stream = Some(stream);
        Ok(())
    }
}
