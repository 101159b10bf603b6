//! Snapshot rows in blocks: the pipeline tells the source whether its sink takes them,
//! hands them on to a sink that does, and gives any other sink one insert per row — the
//! same values at the rows' own positions — so what a sink holds never depends on it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use cdc_core::{
    Ack, Acknowledger, ChangeBatch, ChangeEvent, ConfirmHandle, Error, EventKind, FieldDecoder,
    FieldLayout, FieldSpan, Lsn, Pipeline, PipelineConfig, Position, ReplicaIdentity, Result,
    ResumeToken, RowBlock, RunEnd, SchemaRef, Sink, SinkBatch, SnapshotMarker, Source,
    SourceIdentity, TableName, TableSchema, Value,
};

struct BigEndianInt8;

impl FieldDecoder for BigEndianInt8 {
    fn layout(&self, _column: usize) -> FieldLayout {
        FieldLayout::Int8
    }

    fn decode(&self, _column: usize, data: &Bytes, range: Range<usize>) -> Result<Value> {
        let bytes = <[u8; 8]>::try_from(&data[range]).map_err(|_| Error::protocol("length"))?;
        Ok(Value::Int8(i64::from_be_bytes(bytes)))
    }
}

fn schema() -> SchemaRef {
    Arc::new(TableSchema {
        name: TableName::new("public", "t"),
        relation_id: 7,
        columns: Vec::new(),
        replica_identity: ReplicaIdentity::Default,
        primary_key: Vec::new(),
    })
}

fn at(ordinal: u64) -> Position {
    Position::new(Lsn(0x10), ordinal)
}

fn event(ordinal: u64, kind: EventKind) -> ChangeEvent {
    ChangeEvent {
        position: at(ordinal),
        lsn: Lsn::ZERO,
        kind,
    }
}

/// Markers around the rows 1, 2, 3 at ordinals 2..=4 — in a block when the sink takes
/// blocks, else as inserts — then the end.
struct SnapshotSource {
    offered: Arc<Mutex<Option<bool>>>,
    sent: bool,
    confirm: ConfirmHandle,
}

#[async_trait]
impl Source for SnapshotSource {
    fn offer_row_blocks(&mut self, sink_takes_them: bool) {
        *self.offered.lock().unwrap() = Some(sink_takes_them);
    }

    async fn start(&mut self, _resume: Option<&ResumeToken>) -> Result<Lsn> {
        Ok(Lsn::ZERO)
    }

    async fn next_batch(&mut self) -> Result<Option<ChangeBatch>> {
        if self.sent {
            return Ok(None);
        }
        self.sent = true;
        let table = schema();
        let mut data = Vec::new();
        let mut fields = Vec::new();
        for id in 1i64..=3 {
            fields.push(FieldSpan::new(data.len(), 8).unwrap());
            data.extend_from_slice(&id.to_be_bytes());
        }
        let rows = RowBlock::new(Bytes::from(data), fields, 1, Arc::new(BigEndianInt8))?;
        let mut batch = ChangeBatch::new();
        batch.push(event(0, EventKind::Snapshot(SnapshotMarker::Started)));
        batch.push(event(
            1,
            EventKind::Snapshot(SnapshotMarker::TableStarted(table.name.clone())),
        ));
        // Sent as a block whatever the offer said: the pipeline must cope.
        batch.push(event(4, EventKind::InsertBlock { table, rows }));
        batch.push(event(
            5,
            EventKind::Snapshot(SnapshotMarker::Completed {
                consistent_point: Lsn(0x10),
            }),
        ));
        Ok(Some(batch))
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

struct RecordingSink {
    takes_blocks: bool,
    events: Arc<Mutex<Vec<ChangeEvent>>>,
}

#[async_trait]
impl Sink for RecordingSink {
    async fn open(&mut self, _acks: Acknowledger) -> Result<Option<ResumeToken>> {
        Ok(None)
    }

    async fn write(&mut self, batch: SinkBatch) -> Result<Ack> {
        self.events.lock().unwrap().extend(batch.batch.events);
        Ok(Ack::Done)
    }

    async fn checkpoint(&mut self, _token: &ResumeToken) -> Result<Ack> {
        Ok(Ack::Done)
    }

    fn takes_row_blocks(&self) -> bool {
        self.takes_blocks
    }
}

/// Runs the pipeline; returns what the source was offered, what the sink got, and the
/// events the pipeline counted.
async fn run(takes_blocks: bool) -> (Option<bool>, Vec<ChangeEvent>, u64) {
    let offered = Arc::new(Mutex::new(None));
    let events = Arc::new(Mutex::new(Vec::new()));
    let source = SnapshotSource {
        offered: offered.clone(),
        sent: false,
        confirm: ConfirmHandle::default(),
    };
    let sink = RecordingSink {
        takes_blocks,
        events: events.clone(),
    };
    let summary = Pipeline::new(source, sink, PipelineConfig::default())
        .run()
        .await
        .unwrap();
    assert_eq!(summary.end, RunEnd::SourceEnded);
    let got = events.lock().unwrap().clone();
    let offer = *offered.lock().unwrap();
    (offer, got, summary.stats.events)
}

fn kinds(events: &[ChangeEvent]) -> Vec<(u64, String)> {
    events
        .iter()
        .map(|e| {
            let what = match &e.kind {
                EventKind::Insert { new, .. } => format!("insert {new:?}"),
                EventKind::InsertBlock { rows, .. } => format!("block of {}", rows.len()),
                EventKind::Snapshot(_) => "marker".to_owned(),
                other => format!("{other:?}"),
            };
            (e.position.ordinal, what)
        })
        .collect()
}

#[tokio::test]
async fn a_sink_that_takes_blocks_gets_the_block() {
    let (offered, events, counted) = run(true).await;
    assert_eq!(offered, Some(true));
    assert_eq!(
        kinds(&events),
        vec![
            (0, "marker".to_owned()),
            (1, "marker".to_owned()),
            (4, "block of 3".to_owned()),
            (5, "marker".to_owned()),
        ]
    );
    assert_eq!(counted, 6, "a block counts as its rows");
}

#[tokio::test]
async fn any_other_sink_gets_an_insert_per_row_at_the_rows_positions() {
    let (offered, events, counted) = run(false).await;
    assert_eq!(offered, Some(false));
    assert_eq!(
        kinds(&events),
        vec![
            (0, "marker".to_owned()),
            (1, "marker".to_owned()),
            (2, "insert [Int8(1)]".to_owned()),
            (3, "insert [Int8(2)]".to_owned()),
            (4, "insert [Int8(3)]".to_owned()),
            (5, "marker".to_owned()),
        ]
    );
    assert_eq!(counted, 6);
}
