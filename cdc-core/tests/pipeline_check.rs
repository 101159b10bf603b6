//! The pipeline asks the source to check itself before it opens the sink: a run the source
//! refuses leaves the output untouched, and the check runs once per run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use cdc_core::{
    Ack, Acknowledger, ChangeBatch, ConfirmHandle, Error, ErrorKind, Lsn, Pipeline, PipelineConfig,
    Result, ResumeToken, RunEnd, Sink, SinkBatch, Source, SourceIdentity,
};

#[derive(Default)]
struct Calls {
    checks: AtomicU32,
    starts: AtomicU32,
    opens: AtomicU32,
}

struct CheckedSource {
    refuse: bool,
    calls: Arc<Calls>,
    confirm: ConfirmHandle,
}

#[async_trait]
impl Source for CheckedSource {
    async fn check(&mut self) -> Result<()> {
        self.calls.checks.fetch_add(1, Ordering::SeqCst);
        if self.refuse {
            return Err(Error::config("publication \"p\" does not exist"));
        }
        Ok(())
    }

    async fn start(&mut self, _resume: Option<&ResumeToken>) -> Result<Lsn> {
        // The sink is open by now: the check came first.
        assert_eq!(self.calls.opens.load(Ordering::SeqCst), 1);
        self.calls.starts.fetch_add(1, Ordering::SeqCst);
        Ok(Lsn::ZERO)
    }

    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        Ok(None)
    }

    fn resume_token(&self, batch: &ChangeBatch) -> ResumeToken {
        let source = SourceIdentity {
            system_identifier: "1".into(),
            timeline: 1,
            database: "d".into(),
            slot: "s".into(),
        };
        ResumeToken::new(source, batch.last_position())
    }

    fn confirm_handle(&self) -> ConfirmHandle {
        self.confirm.clone()
    }
}

struct CountingSink {
    calls: Arc<Calls>,
}

#[async_trait]
impl Sink for CountingSink {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        // Opening an output may create it (a directory, a stream): never before the check.
        assert_eq!(self.calls.checks.load(Ordering::SeqCst), 1);
        self.calls.opens.fetch_add(1, Ordering::SeqCst);
        Ok(None)
    }

    async fn write(&mut self, _batch: SinkBatch) -> Result<Ack> {
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        Ok(Ack::Done)
    }
}

async fn run(refuse: bool) -> (Result<cdc_core::RunSummary>, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let source = CheckedSource {
        refuse,
        calls: calls.clone(),
        confirm: ConfirmHandle::default(),
    };
    let sink = CountingSink {
        calls: calls.clone(),
    };
    let result = Pipeline::new(source, sink, PipelineConfig::default())
        .run()
        .await;
    (result, calls)
}

#[tokio::test]
async fn a_source_that_refuses_the_run_leaves_the_sink_unopened() {
    let (result, calls) = run(true).await;
    let err = result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert_eq!(calls.checks.load(Ordering::SeqCst), 1);
    assert_eq!(calls.opens.load(Ordering::SeqCst), 0, "the sink was opened");
    assert_eq!(calls.starts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_check_runs_once_before_the_sink_opens_and_the_source_starts() {
    let (result, calls) = run(false).await;
    assert_eq!(result.unwrap().end, RunEnd::SourceEnded);
    assert_eq!(calls.checks.load(Ordering::SeqCst), 1);
    assert_eq!(calls.opens.load(Ordering::SeqCst), 1);
    assert_eq!(calls.starts.load(Ordering::SeqCst), 1);
}
