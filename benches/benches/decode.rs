//! Decoder throughput for the realistic mixed-type row (see `benches::row`), in text and
//! binary tuple format, at three depths:
//!
//! - `message`: pgoutput message decode only (`PgOutputDecoder::decode_borrowed`, rows
//!   left in the payload as the assembler reads them; `message-owned`: `decode`, a `Bytes`
//!   per column);
//! - `values`: borrowed message decode plus every column into a `Value`
//!   (`decode_text_view` / `decode_binary_view` with the column's resolved `TypeInfo`);
//! - `assembler`: the whole `ChangeAssembler` (relation lookup, positions, events), fed a
//!   transaction of Begin, the inserts and Commit, exactly what `PgSource` does per
//!   XLogData payload.
//!
//! Two groups measure the same work: `decode_bytes` reports MB/s of pgoutput payload,
//! `decode_rows` reports rows/s. Times are CPU time of the benchmark thread (see
//! `support`; `PGCDC_BENCH_WALL=1` for wall time). Run:
//! `cargo bench -p benches --bench decode`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use benches::row::{self, Format};
use bytes::Bytes;
use cdc_core::{ChangeEvent, TableName, Value};
use cdc_pgoutput::changes::{
    AssemblerConfig, ChangeAssembler, MemorySpill, MessageFilter, SchemaChangePolicy, TableRouting,
};
use cdc_pgoutput::protocol::pgoutput::{
    ColumnRef, DecoderOptions, PgOutputDecoder, PgOutputMessage, ProtocolVersion,
};
use cdc_pgoutput::types::{TypeInfo, decode_binary_view, decode_text_view};
use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion, Throughput};

mod support;

/// Rows per measured iteration (one transaction's worth, as in the end-to-end workload).
const ROWS: u64 = 1000;
const RELATION_ID: u32 = 16_384;

struct Input {
    format: Format,
    /// Begin, ROWS inserts, Commit.
    transaction: Vec<Bytes>,
    /// The inserts alone.
    inserts: Vec<Bytes>,
    relation: Bytes,
}

impl Input {
    fn new(format: Format) -> Self {
        let transaction = row::transaction(RELATION_ID, 1, ROWS, format);
        let inserts = transaction[1..transaction.len() - 1].to_vec();
        Input {
            format,
            transaction,
            inserts,
            relation: row::relation_payload(RELATION_ID),
        }
    }

    fn insert_bytes(&self) -> u64 {
        self.inserts.iter().map(|b| b.len() as u64).sum()
    }

    fn transaction_bytes(&self) -> u64 {
        self.transaction.iter().map(|b| b.len() as u64).sum()
    }
}

fn decoder() -> PgOutputDecoder {
    PgOutputDecoder::new(DecoderOptions::new(ProtocolVersion::V1))
}

/// (a) pgoutput message decode only, rows borrowed.
fn decode_messages(decoder: &mut PgOutputDecoder, inserts: &[Bytes]) -> usize {
    let mut columns = 0;
    for payload in inserts {
        let message = decoder.decode_borrowed(payload).unwrap();
        if let PgOutputMessage::Insert(insert) = &message {
            columns += insert.new.len();
        }
        black_box(message);
    }
    columns
}

/// (a') pgoutput message decode only, owned rows (a `Bytes` per column).
fn decode_messages_owned(decoder: &mut PgOutputDecoder, inserts: &[Bytes]) -> usize {
    let mut columns = 0;
    for payload in inserts {
        let message = decoder.decode(payload.clone()).unwrap();
        if let PgOutputMessage::Insert(insert) = &message {
            columns += insert.new.columns.len();
        }
        black_box(message);
    }
    columns
}

/// (b) message decode plus every column into a `Value` row.
fn decode_values(decoder: &mut PgOutputDecoder, types: &[TypeInfo], inserts: &[Bytes]) -> usize {
    let mut rows = 0;
    for payload in inserts {
        let PgOutputMessage::Insert(insert) = decoder.decode_borrowed(payload).unwrap() else {
            unreachable!("the fixture holds inserts only");
        };
        let row: Vec<Value> = insert
            .new
            .columns()
            .zip(types)
            .map(|(column, ty)| match column {
                ColumnRef::Null => Value::Null,
                ColumnRef::UnchangedToast => Value::Unchanged,
                ColumnRef::Text(data) => decode_text_view(ty, data).unwrap(),
                ColumnRef::Binary(data) => decode_binary_view(ty, data).unwrap(),
            })
            .collect();
        black_box(&row);
        rows += 1;
    }
    rows
}

fn assembler(relation: &Bytes) -> ChangeAssembler {
    let mut assembler = ChangeAssembler::new(AssemblerConfig {
        decoder: DecoderOptions::new(ProtocolVersion::V1),
        routing: TableRouting::tables([TableName::new("public", "bench")]),
        schema_policy: SchemaChangePolicy::Fail,
        messages: MessageFilter::Off,
        stream_memory_limit: 64 << 20,
        spill: MemorySpill::shared(),
    });
    // pgoutput sends the Relation once per session, before the first change of the table.
    let mut out = Vec::new();
    let begin = row::transaction(RELATION_ID, 0, 0, Format::Text);
    assembler.process(begin[0].clone(), &mut out).unwrap();
    assembler.process(relation.clone(), &mut out).unwrap();
    assembler.process(begin[1].clone(), &mut out).unwrap();
    assembler
}

/// (c) through the assembler: Begin, the inserts, Commit → events.
fn assemble(
    assembler: &mut ChangeAssembler,
    transaction: &[Bytes],
    out: &mut Vec<ChangeEvent>,
) -> usize {
    out.clear();
    for payload in transaction {
        assembler.process(payload.clone(), out).unwrap();
    }
    out.len()
}

/// What a group reports per iteration.
#[derive(Clone, Copy)]
enum Unit {
    /// Payload bytes: the inserts for the message and values stages; Begin, inserts and
    /// Commit for the assembler, which reads all of them.
    Bytes,
    /// Rows.
    Rows,
}

fn bench_stages<M: Measurement>(group: &mut BenchmarkGroup<'_, M>, input: &Input, unit: Unit) {
    let format = input.format.name();
    let types = row::type_infos();
    let throughput = |bytes: u64| match unit {
        Unit::Bytes => Throughput::Bytes(bytes),
        Unit::Rows => Throughput::Elements(ROWS),
    };

    group.throughput(throughput(input.insert_bytes()));
    let mut dec = decoder();
    group.bench_function(format!("message/{format}"), |b| {
        b.iter(|| decode_messages(&mut dec, &input.inserts))
    });
    let mut dec = decoder();
    group.bench_function(format!("message-owned/{format}"), |b| {
        b.iter(|| decode_messages_owned(&mut dec, &input.inserts))
    });
    let mut dec = decoder();
    group.bench_function(format!("values/{format}"), |b| {
        b.iter(|| decode_values(&mut dec, &types, &input.inserts))
    });

    group.throughput(throughput(input.transaction_bytes()));
    let mut asm = assembler(&input.relation);
    let mut out = Vec::with_capacity(ROWS as usize + 2);
    group.bench_function(format!("assembler/{format}"), |b| {
        b.iter(|| assemble(&mut asm, &input.transaction, &mut out))
    });
}

fn decode<M: Measurement>(c: &mut Criterion<M>) {
    let inputs = [Input::new(Format::Text), Input::new(Format::Binary)];
    for input in &inputs {
        eprintln!(
            "{} format: {} bytes per insert message on average, {} bytes per {}-row transaction",
            input.format.name(),
            input.insert_bytes() / ROWS,
            input.transaction_bytes(),
            ROWS
        );
    }
    for (name, unit) in [("decode_bytes", Unit::Bytes), ("decode_rows", Unit::Rows)] {
        let mut group = c.benchmark_group(name);
        for input in &inputs {
            bench_stages(&mut group, input, unit);
        }
        group.finish();
    }
}

fn main() {
    if support::wall_time_requested() {
        let mut c = support::wall_criterion();
        decode(&mut c);
        c.final_summary();
    } else {
        let mut c = support::cpu_criterion();
        decode(&mut c);
        c.final_summary();
    }
}
