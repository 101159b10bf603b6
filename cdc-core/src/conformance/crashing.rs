//! The sink under test, wrapped: counts its calls and crashes at a chosen one (the call
//! never returns; the kit then drops the whole pipeline, sink included, as a killed
//! process would), records every token the pipeline hands it and every durability it
//! acknowledges, and checks the token it hands back at open.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tokio::sync::oneshot;

use crate::{Ack, AckEvent, Acknowledger, Error, Result, ResumeToken, Sink, SinkBatch};

/// Where a run crashes: at its `call`-th write or checkpoint (from 1), before the sink
/// does it or after (done, but the pipeline never learns).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CrashPoint {
    pub(crate) call: u64,
    pub(crate) after: bool,
}

/// What the kit learns of the sink across the runs of one case.
#[derive(Debug, Default)]
pub(crate) struct Record {
    /// Every token handed to the sink (with a batch or a checkpoint).
    pub(crate) handed: Vec<ResumeToken>,
    /// The newest token the sink said was durable.
    pub(crate) durable: Option<ResumeToken>,
    /// What the sink did that the contract forbids.
    pub(crate) violations: Vec<String>,
}

pub(crate) type SharedRecord = Arc<Mutex<Record>>;

pub(crate) fn lock(record: &SharedRecord) -> std::sync::MutexGuard<'_, Record> {
    record.lock().unwrap_or_else(PoisonError::into_inner)
}

fn newer(a: &Option<ResumeToken>, b: &ResumeToken) -> bool {
    a.as_ref()
        .is_none_or(|a| a.position < b.position || a.commit_end < b.commit_end)
}

/// The wrapper.
pub(crate) struct Crashing<S> {
    inner: S,
    record: SharedRecord,
    crash: Option<CrashPoint>,
    calls: u64,
    crashed: Option<oneshot::Sender<()>>,
}

impl<S: Sink> Crashing<S> {
    pub(crate) fn new(
        inner: S,
        record: SharedRecord,
        crash: Option<CrashPoint>,
        crashed: oneshot::Sender<()>,
    ) -> Self {
        Crashing {
            inner,
            record,
            crash,
            calls: 0,
            crashed: Some(crashed),
        }
    }

    /// Whether this call is the crash; if so, tells the kit.
    fn crash_now(&mut self, after: bool) -> bool {
        let hit = self
            .crash
            .is_some_and(|c| c.call == self.calls && c.after == after);
        if hit && let Some(tx) = self.crashed.take() {
            let _ = tx.send(());
        }
        hit
    }

    async fn crash(&mut self) -> Result<Ack> {
        std::future::pending::<()>().await;
        Err(Error::sink("unreachable"))
    }
}

#[async_trait]
impl<S: Sink> Sink for Crashing<S> {
    async fn open(&mut self, acks: Acknowledger) -> Result<Option<ResumeToken>> {
        // Durability the sink reports on its own schedule is recorded on its way.
        let (inner_acks, mut rx) = Acknowledger::channel();
        let record = self.record.clone();
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                match event {
                    AckEvent::Completed(id) => acks.completed(id),
                    AckEvent::Durable(token) => {
                        {
                            let mut record = lock(&record);
                            if newer(&record.durable, &token) {
                                record.durable = Some(token.clone());
                            }
                        }
                        acks.durable(token);
                    }
                }
            }
        });
        let token = self.inner.open(inner_acks).await?;
        let mut record = lock(&self.record);
        let verdict = match (&record.durable, &token) {
            (Some(durable), None) => Some(format!(
                "open returned no token, but the sink had said the state covering {:?} was durable (it forgot its token, or acknowledged before it was durable)",
                durable.position
            )),
            (_, Some(token)) if !record.handed.contains(token) => Some(format!(
                "open returned a token the pipeline never handed it (changed on its way to storage?): {}",
                token.to_json()
            )),
            (Some(durable), Some(token))
                if token.position < durable.position || token.commit_end < durable.commit_end =>
            {
                Some(format!(
                    "open returned the token of {:?}, older than {:?}, which the sink had said was durable (it acknowledged before it was durable)",
                    token.position, durable.position
                ))
            }
            _ => None,
        };
        if let Some(violation) = verdict {
            record.violations.push(violation.clone());
            return Err(Error::sink(format!("conformance: {violation}")));
        }
        Ok(token)
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        self.calls += 1;
        lock(&self.record).handed.push(batch.resume_token.clone());
        if self.crash_now(false) {
            return self.crash().await;
        }
        let ack = self.inner.write(batch).await?;
        if self.crash_now(true) {
            return self.crash().await;
        }
        Ok(ack)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        self.calls += 1;
        lock(&self.record).handed.push(token.clone());
        if self.crash_now(false) {
            return self.crash().await;
        }
        let ack = self.inner.checkpoint(token).await?;
        if ack == Ack::Done {
            let mut record = lock(&self.record);
            if newer(&record.durable, token) {
                record.durable = Some(token.clone());
            }
        }
        if self.crash_now(true) {
            return self.crash().await;
        }
        Ok(ack)
    }

    async fn close(&mut self) -> Result<()> {
        self.inner.close().await
    }

    fn takes_row_blocks(&self) -> bool {
        self.inner.takes_row_blocks()
    }
}
