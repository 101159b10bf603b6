//! The sink conformance kit against sinks written here: a correct one (the token stored
//! atomically with the rows), a correct write-through one (rows durable at once, replays
//! skipped by position), and three broken ones the kit must fail — one acknowledging a
//! checkpoint before it is durable, one forgetting its token, one applying a replay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cdc_core::conformance::{DurableLog, DurableRow, KitOptions, SinkHarness, check_sink};
use cdc_core::{
    Ack, Acknowledger, ChangeEvent, CommitMode, Error, EventKind, Position, Result, ResumeToken,
    Row, SchemaRef, Sink, SinkBatch, SnapshotMarker, Value,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    /// `checkpoint` says Done but makes the previous checkpoint's state durable.
    AcksEarly,
    /// `open` never returns the stored token.
    ForgetsToken,
    /// Rows are durable at `write` (the token at checkpoints), and replays are applied
    /// again.
    AppliesReplay,
    /// Rows durable at `write`, replays skipped by position: correct.
    WriteThrough,
}

#[derive(Debug, Default)]
struct Storage {
    log: DurableLog,
    token: Option<ResumeToken>,
    /// Write-through: the last event applied.
    applied: Option<Position>,
}

#[derive(Debug)]
struct TestSink {
    flaw: Flaw,
    storage: Arc<Mutex<Storage>>,
    pending: Vec<ChangeEvent>,
    /// AcksEarly: what the previous checkpoint was asked to make durable.
    lagging: Option<(Vec<ChangeEvent>, ResumeToken)>,
}

fn id_seq(table: &SchemaRef, row: &Row) -> (i64, i64) {
    let get = |name: &str| match table.column_index(name).and_then(|i| row.get(i)) {
        Some(Value::Int8(v)) => *v,
        other => panic!("{name}: {other:?}"),
    };
    (get("id"), get("seq"))
}

fn apply(log: &mut DurableLog, event: &ChangeEvent) -> Result<()> {
    let result = match &event.kind {
        EventKind::Insert { table, new } => {
            let (id, seq) = id_seq(table, new);
            log.insert(&table.name, id, seq)
        }
        EventKind::Update { table, old, new } => {
            let (id, seq) = id_seq(table, &old.as_ref().unwrap().values);
            let (new_id, new_seq) = id_seq(table, new);
            log.delete(&table.name, id, seq)
                .and_then(|()| log.insert(&table.name, new_id, new_seq))
        }
        EventKind::Delete { table, old } => {
            let (id, seq) = id_seq(table, &old.as_ref().unwrap().values);
            log.delete(&table.name, id, seq)
        }
        EventKind::Truncate { tables, .. } => {
            for table in tables {
                log.truncate(&table.name);
            }
            Ok(())
        }
        // The snapshot is taken again: its rows (all the sink holds before the stream)
        // are dropped.
        EventKind::Snapshot(SnapshotMarker::Restarted) => {
            *log = DurableLog::default();
            Ok(())
        }
        _ => Ok(()),
    };
    result.map_err(Error::sink)
}

#[async_trait]
impl Sink for TestSink {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        let mut storage = self.storage.lock().unwrap();
        if self.flaw == Flaw::WriteThrough && storage.token.is_none() {
            // No token: the stream starts over, so nothing written may stay (the rows
            // beyond a token are skipped by position only when that token is resumed).
            *storage = Storage::default();
        }
        Ok(match self.flaw {
            Flaw::ForgetsToken => None,
            _ => storage.token.clone(),
        })
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        match self.flaw {
            Flaw::AppliesReplay | Flaw::WriteThrough => {
                let mut storage = self.storage.lock().unwrap();
                for event in &batch.batch.events {
                    if self.flaw == Flaw::WriteThrough
                        && storage.applied.is_some_and(|p| event.position <= p)
                    {
                        continue;
                    }
                    apply(&mut storage.log, event)?;
                    storage.applied = Some(event.position);
                }
            }
            _ => self.pending.extend(batch.batch.events),
        }
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, token: &ResumeToken) -> Result<Ack> {
        let pending = std::mem::take(&mut self.pending);
        let (events, durable) = match self.flaw {
            Flaw::AcksEarly => match self.lagging.replace((pending, token.clone())) {
                Some(previous) => previous,
                None => return Ok(Ack::Done),
            },
            _ => (pending, token.clone()),
        };
        let mut storage = self.storage.lock().unwrap();
        for event in &events {
            apply(&mut storage.log, event)?;
        }
        storage.token = Some(durable);
        Ok(Ack::Done)
    }
}

struct Harness {
    flaw: Flaw,
    storage: Arc<Mutex<Storage>>,
}

#[async_trait]
impl SinkHarness for Harness {
    type Sink = TestSink;

    async fn reset(&mut self) -> Result<()> {
        *self.storage.lock().unwrap() = Storage::default();
        Ok(())
    }

    fn sink(&mut self) -> Result<TestSink> {
        Ok(TestSink {
            flaw: self.flaw,
            storage: self.storage.clone(),
            pending: Vec::new(),
            lagging: None,
        })
    }

    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>> {
        Ok(self.storage.lock().unwrap().log.clone().into_rows())
    }
}

fn harness(flaw: Flaw) -> Harness {
    Harness {
        flaw,
        storage: Arc::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correct_sinks_pass_in_both_commit_modes() {
    for flaw in [Flaw::None, Flaw::WriteThrough] {
        let report = check_sink(&mut harness(flaw), &KitOptions::default())
            .await
            .unwrap_or_else(|v| panic!("{flaw:?}: {v}"));
        assert_eq!(report.runs, 16, "{flaw:?}");
        assert!(report.crashes > 0, "{flaw:?}: {report:?}");
        eprintln!("{flaw:?}: {report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_sinks_fail_the_kit() {
    let checkpoint_only = {
        let mut options = KitOptions::default();
        options.commit_modes = vec![CommitMode::Checkpoint];
        options
    };
    for (flaw, expected) in [
        (Flaw::AcksEarly, "acknowledged before it was durable"),
        (Flaw::ForgetsToken, "forgot its token"),
        (Flaw::AppliesReplay, "the output"),
    ] {
        let violation = check_sink(&mut harness(flaw), &checkpoint_only)
            .await
            .expect_err(&format!("{flaw:?} passed the kit"));
        assert!(violation.what.contains(expected), "{flaw:?}: {violation}");
    }
}
