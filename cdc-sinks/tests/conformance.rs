//! Every sink of the workspace that stores a resume token, through the sink conformance
//! kit (`cdc_core::conformance`): the in-memory sink, the file sink writing Feldera JSON
//! and writing Debezium records, and the JetStream sink (Feldera JSON and Debezium
//! records, on a real nats-server). Each harness reads the output back as its consumer
//! would (the files up to the lengths the checkpoint gives; the stream from its start
//! with the NATS client) and applies it strictly. The stdout sinks keep no token (a
//! restart starts over: at-least-once by design), so the kit's exactly-once promises do
//! not apply to them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use cdc_core::conformance::{DurableLog, DurableRow, KitOptions, SinkHarness, check_sink};
use cdc_core::{CommitMode, Result, TableName, Value};
use cdc_sinks::feldera::TruncatePolicy;
use cdc_sinks::jetstream::{JetStreamOptions, JetStreamSink, StreamSettings, SubjectTemplate};
use cdc_sinks::testing::jetstream::read_stream;
use cdc_sinks::{
    DebeziumOptions, FelderaFileSink, FileLayout, FileSinkOptions, MemoryHandle, MemorySink,
};
use cdc_testkit::NatsCluster;
use serde_json::Value as Json;

const KIT_TABLES: [&str; 2] = ["kit_a", "kit_b"];

fn kit_table(name: &str) -> TableName {
    TableName::new("public", name)
}

fn int(json: &Json, field: &str) -> i64 {
    json[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} in {json}"))
}

fn table_of(name: &str) -> Result<TableName> {
    TableName::parse(name).map_err(|e| cdc_core::Error::sink(format!("{name}: {e}")))
}

/// Applies one Feldera JSON record (`{"table", "insert"|"delete"|"truncate"}`).
fn apply_feldera(log: &mut DurableLog, record: &Json, table: Option<&TableName>) -> Result<()> {
    let table = match table {
        Some(t) => t.clone(),
        None => table_of(record["table"].as_str().unwrap())?,
    };
    let result = if let Some(row) = record.get("insert") {
        log.insert(&table, int(row, "id"), int(row, "seq"))
    } else if let Some(row) = record.get("delete") {
        match row.get("seq") {
            Some(_) => log.delete(&table, int(row, "id"), int(row, "seq")),
            None => log.delete_key(&table, int(row, "id")),
        }
    } else if let Some(row) = record.get("update") {
        log.update(&table, int(row, "id"), int(row, "seq"))
    } else if record.get("truncate").is_some() {
        log.truncate(&table);
        Ok(())
    } else {
        Err(format!("a record the kit does not expect: {record}"))
    };
    result.map_err(cdc_core::Error::sink)
}

/// Applies one Debezium change-event envelope (the value, without schema).
fn apply_debezium(log: &mut DurableLog, value: &Json) -> Result<()> {
    let value = value.get("payload").unwrap_or(value);
    let source = &value["source"];
    let table = TableName::new(
        source["schema"].as_str().unwrap(),
        source["table"].as_str().unwrap(),
    );
    let (before, after) = (&value["before"], &value["after"]);
    let result = match value["op"].as_str().unwrap() {
        "c" | "r" => log.insert(&table, int(after, "id"), int(after, "seq")),
        "u" => log
            .delete(&table, int(before, "id"), int(before, "seq"))
            .and_then(|()| log.insert(&table, int(after, "id"), int(after, "seq"))),
        "d" => log.delete(&table, int(before, "id"), int(before, "seq")),
        "t" => {
            log.truncate(&table);
            Ok(())
        }
        other => Err(format!("op {other:?}")),
    };
    result.map_err(cdc_core::Error::sink)
}

/// The lines of `dir`'s data files up to the lengths its checkpoint gives.
fn checkpointed_lines(dir: &Path) -> Vec<(String, String)> {
    let Ok(state) = std::fs::read_to_string(dir.join(cdc_sinks::file::CHECKPOINT_FILE)) else {
        return Vec::new();
    };
    let state: Json = serde_json::from_str(&state).unwrap();
    let mut out = Vec::new();
    for (name, length) in state["files"].as_object().into_iter().flatten() {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let length = usize::try_from(length.as_u64().unwrap()).unwrap();
        let text = String::from_utf8(bytes[..length].to_vec()).unwrap();
        out.extend(text.lines().map(|l| (name.clone(), l.to_owned())));
    }
    out
}

struct Memory {
    handle: MemoryHandle,
    made: bool,
}

#[async_trait]
impl SinkHarness for Memory {
    type Sink = MemorySink;

    async fn reset(&mut self) -> Result<()> {
        self.handle = MemoryHandle::default();
        self.made = false;
        Ok(())
    }

    fn sink(&mut self) -> Result<MemorySink> {
        // A restart: only what was durable survives.
        if std::mem::replace(&mut self.made, true) {
            self.handle.simulate_crash();
        }
        Ok(self.handle.sink())
    }

    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>> {
        self.handle.simulate_crash();
        let mut rows = Vec::new();
        for name in KIT_TABLES {
            let table = kit_table(name);
            let Some(schema) = self.handle.schema(&table) else {
                continue;
            };
            let at = |column: &str| schema.column_index(column).unwrap();
            for row in self.handle.rows(&table) {
                let get = |i: usize| match row.get(i) {
                    Some(Value::Int8(v)) => *v,
                    other => panic!("{other:?}"),
                };
                rows.push(DurableRow {
                    table: table.clone(),
                    id: get(at("id")),
                    seq: get(at("seq")),
                });
            }
        }
        Ok(rows)
    }
}

struct Files {
    root: tempfile::TempDir,
    case: u32,
    debezium: bool,
}

impl Files {
    fn dir(&self) -> PathBuf {
        self.root.path().join(format!("case{}", self.case))
    }
}

#[async_trait]
impl SinkHarness for Files {
    type Sink = FelderaFileSink;

    async fn reset(&mut self) -> Result<()> {
        self.case += 1;
        Ok(())
    }

    fn sink(&mut self) -> Result<FelderaFileSink> {
        let mut options = FileSinkOptions::new(self.dir());
        options.layout = FileLayout::Multiplexed;
        options.encoder.table_key = true;
        options.encoder.policies.truncate = TruncatePolicy::Marker;
        if self.debezium {
            options.debezium = Some(DebeziumOptions::new("kit", "kit"));
        }
        FelderaFileSink::new(options)
    }

    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>> {
        let mut log = DurableLog::default();
        for (_, line) in checkpointed_lines(&self.dir()) {
            let record: Json = serde_json::from_str(&line).unwrap();
            if self.debezium {
                if !record["value"].is_null() {
                    apply_debezium(&mut log, &record["value"])?;
                }
            } else {
                apply_feldera(&mut log, &record, None)?;
            }
        }
        Ok(log.into_rows())
    }
}

struct JetStream {
    nats: NatsCluster,
    case: u32,
    debezium: bool,
}

impl JetStream {
    fn stream(&self) -> String {
        format!("KIT{}", self.case)
    }
}

#[async_trait]
impl SinkHarness for JetStream {
    type Sink = JetStreamSink;

    async fn reset(&mut self) -> Result<()> {
        self.case += 1;
        Ok(())
    }

    fn sink(&mut self) -> Result<JetStreamSink> {
        let mut options = JetStreamOptions::new(vec![self.nats.url()], self.stream(), "kit");
        options.create_stream = Some(StreamSettings::default());
        // Each case's stream has subjects of its own (streams' subjects may not overlap).
        options.subjects =
            SubjectTemplate::parse(&format!("kit{}.{{schema}}.{{table}}", self.case))?;
        if self.debezium {
            options.debezium = Some(DebeziumOptions::new("kit", "kit"));
        }
        JetStreamSink::new(options)
    }

    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>> {
        let mut log = DurableLog::default();
        for message in read_stream(&self.nats.url(), &self.stream()).await {
            let table = message.header("Pgcdc-Table").map(table_of).transpose()?;
            for record in message.records() {
                if self.debezium {
                    apply_debezium(&mut log, &record)?;
                } else {
                    apply_feldera(&mut log, &record, table.as_ref())?;
                }
            }
        }
        Ok(log.into_rows())
    }
}

fn options() -> KitOptions {
    {
        let mut options = KitOptions::default();
        options.cases = 6;
        options
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_sink_conforms() {
    let mut harness = Memory {
        handle: MemoryHandle::default(),
        made: false,
    };
    let report = check_sink(&mut harness, &options())
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    assert!(report.crashes > 0, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_sink_conforms_with_feldera_json_and_with_debezium_records() {
    for debezium in [false, true] {
        let mut harness = Files {
            root: tempfile::tempdir().unwrap(),
            case: 0,
            debezium,
        };
        let report = check_sink(&mut harness, &options())
            .await
            .unwrap_or_else(|v| panic!("debezium {debezium}: {v}"));
        assert!(report.crashes > 0, "{report:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jetstream_sink_conforms_with_feldera_json_and_with_debezium_records() {
    let nats = NatsCluster::single().await.unwrap();
    let mut harness = JetStream {
        nats,
        case: 0,
        debezium: false,
    };
    for debezium in [false, true] {
        harness.debezium = debezium;
        // JetStream cannot withdraw published rows: no consistent snapshot taken again
        // (the sink refuses one, by design); its Feldera JSON has no truncate. Completion
        // mode is refused by the CLI for JetStream; the library's sink is checked in both.
        let kit = {
            let mut options = KitOptions::default();
            options.cases = 3;
            options.snapshot = false;
            options.truncates = debezium;
            options.commit_modes = vec![CommitMode::Checkpoint];
            options
        };
        let report = check_sink(&mut harness, &kit)
            .await
            .unwrap_or_else(|v| panic!("debezium {debezium}: {v}"));
        assert!(report.crashes > 0, "{report:?}");
    }
}
