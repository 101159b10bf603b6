//! Feldera JSON encoding throughput: change events of the realistic mixed-type row (see
//! `benches::row`, decoded by the `ChangeAssembler` exactly as the source produces them)
//! encoded by `FelderaEncoder` into a reused `Frame` (newline-delimited, with the `table`
//! key, as the multiplexed stream sink writes them).
//!
//! - `insert`: a 1000-row transaction (Begin, inserts, Commit);
//! - `update`: 1000 updates that keep the key (`{"update": {…}}`);
//! - `delete`: 1000 deletes by key (`{"delete": {"id": …}}`).
//!
//! `feldera_json_bytes` reports MB/s of JSON written, `feldera_json_rows` rows/s. Times
//! are CPU time of the benchmark thread (see `support`; `PGCDC_BENCH_WALL=1` for wall
//! time). Run: `cargo bench -p benches --bench feldera_json`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use benches::row::{self, Format};
use cdc_core::{ChangeEvent, EventKind, OldRow, OldRowKind, TableName, Value};
use cdc_pgoutput::changes::{
    AssemblerConfig, ChangeAssembler, MemorySpill, MessageFilter, SchemaChangePolicy,
    TableCatalogInfo, TableRouting,
};
use cdc_pgoutput::protocol::pgoutput::{DecoderOptions, ProtocolVersion};
use cdc_sinks::feldera::{EncoderOptions, FelderaEncoder, Frame, Framing};
use criterion::measurement::Measurement;
use criterion::{Criterion, Throughput};

mod support;

const ROWS: u64 = 1000;
const RELATION_ID: u32 = 16_384;

/// Insert events of one transaction, decoded by the assembler (binary tuples).
fn insert_events() -> Vec<ChangeEvent> {
    let table = TableName::new("public", "bench");
    let routing = TableRouting::tables([table.clone()]).with_catalog(
        table,
        TableCatalogInfo {
            not_null: ["id".to_owned()].into_iter().collect(),
            primary_key: vec!["id".to_owned()],
            generated: Default::default(),
        },
    );
    let mut assembler = ChangeAssembler::new(AssemblerConfig {
        decoder: DecoderOptions::new(ProtocolVersion::V1),
        routing,
        schema_policy: SchemaChangePolicy::Fail,
        messages: MessageFilter::Off,
        stream_memory_limit: 64 << 20,
        spill: MemorySpill::shared(),
    });
    let transaction = row::transaction(RELATION_ID, 1, ROWS, Format::Binary);
    let mut out = Vec::new();
    assembler.process(transaction[0].clone(), &mut out).unwrap();
    assembler
        .process(row::relation_payload(RELATION_ID), &mut out)
        .unwrap();
    for payload in &transaction[1..] {
        assembler.process(payload.clone(), &mut out).unwrap();
    }
    assert_eq!(out.len() as u64, ROWS + 2, "Begin, the inserts, Commit");
    out
}

/// The same rows as updates keeping the key, and as deletes by key.
fn updates_and_deletes(inserts: &[ChangeEvent]) -> (Vec<ChangeEvent>, Vec<ChangeEvent>) {
    let mut updates = Vec::new();
    let mut deletes = Vec::new();
    for event in inserts {
        if let EventKind::Insert { table, new } = &event.kind {
            updates.push(ChangeEvent {
                lsn: cdc_core::Lsn::ZERO,
                position: event.position,
                kind: EventKind::Update {
                    table: table.clone(),
                    old: None,
                    new: new.clone(),
                },
            });
            let mut key = vec![Value::Null; new.len()];
            key[0] = new[0].clone();
            deletes.push(ChangeEvent {
                lsn: cdc_core::Lsn::ZERO,
                position: event.position,
                kind: EventKind::Delete {
                    table: table.clone(),
                    old: Some(OldRow {
                        kind: OldRowKind::Key,
                        values: key,
                    }),
                },
            });
        } else {
            updates.push(event.clone());
            deletes.push(event.clone());
        }
    }
    (updates, deletes)
}

fn encode_all(encoder: &mut FelderaEncoder, frame: &mut Frame, events: &[ChangeEvent]) -> usize {
    frame.clear();
    for event in events {
        encoder.encode_event(event, frame).unwrap();
    }
    frame.end_batch();
    frame.bytes().len()
}

fn feldera_json<M: Measurement>(c: &mut Criterion<M>) {
    let inserts = insert_events();
    let (updates, deletes) = updates_and_deletes(&inserts);
    let options = {
        let mut options = EncoderOptions::default();
        options.table_key = true;
        options
    };
    let cases = [
        ("insert", &inserts),
        ("update", &updates),
        ("delete", &deletes),
    ];
    let mut sizes = Vec::new();
    for (name, events) in cases {
        let mut encoder = FelderaEncoder::new(options);
        let mut frame = Frame::new(Framing::Lines);
        let size = encode_all(&mut encoder, &mut frame, events) as u64;
        let text = String::from_utf8_lossy(frame.bytes()).into_owned();
        eprintln!(
            "{name}: {} bytes of JSON per {ROWS} rows; first envelope: {}",
            size,
            text.lines().next().unwrap_or_default()
        );
        sizes.push(size);
    }
    for (group_name, by_bytes) in [("feldera_json_bytes", true), ("feldera_json_rows", false)] {
        let mut group = c.benchmark_group(group_name);
        for ((name, events), size) in cases.iter().zip(&sizes) {
            group.throughput(if by_bytes {
                Throughput::Bytes(*size)
            } else {
                Throughput::Elements(ROWS)
            });
            let mut encoder = FelderaEncoder::new(options);
            let mut frame = Frame::new(Framing::Lines);
            group.bench_function(*name, |b| {
                b.iter(|| encode_all(&mut encoder, &mut frame, events))
            });
        }
        group.finish();
    }
}

fn main() {
    if support::wall_time_requested() {
        let mut c = support::wall_criterion();
        feldera_json(&mut c);
        c.final_summary();
    } else {
        let mut c = support::cpu_criterion();
        feldera_json(&mut c);
        c.final_summary();
    }
}
