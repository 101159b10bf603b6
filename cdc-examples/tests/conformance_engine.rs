//! The embedded engine example's sink (`examples/embedded_engine/engine.rs`: durability on
//! its own schedule, reported through the `Acknowledger`) through the sink conformance
//! kit, in both commit modes; its checkpoint file is read back as the example reads it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/embedded_engine/engine.rs"]
#[allow(dead_code)]
mod engine;

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use cdc_core::conformance::{DurableRow, KitOptions, SinkHarness, check_sink};
use cdc_core::{Result, TableName};
use engine::{EngineCheckpoint, EngineSink};

struct Engine {
    dir: tempfile::TempDir,
    case: u32,
}

impl Engine {
    fn path(&self) -> PathBuf {
        self.dir.path().join(format!("engine-{}.json", self.case))
    }
}

#[async_trait]
impl SinkHarness for Engine {
    type Sink = EngineSink;

    async fn reset(&mut self) -> Result<()> {
        self.case += 1;
        Ok(())
    }

    fn sink(&mut self) -> Result<EngineSink> {
        Ok(EngineSink::new(self.path(), Duration::from_millis(10)))
    }

    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>> {
        let Ok(bytes) = std::fs::read(self.path()) else {
            return Ok(Vec::new());
        };
        let saved: EngineCheckpoint = serde_json::from_slice(&bytes).unwrap();
        let mut rows = Vec::new();
        for (table, content) in saved.tables {
            let table = TableName::parse(&table).unwrap();
            for (key, row) in content {
                let seq = row["seq"].as_deref().unwrap().parse().unwrap();
                rows.push(DurableRow {
                    table: table.clone(),
                    id: key.parse().unwrap(),
                    seq,
                });
            }
        }
        Ok(rows)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_engine_example_sink_conforms() {
    let mut harness = Engine {
        dir: tempfile::tempdir().unwrap(),
        case: 0,
    };
    let options = {
        let mut options = KitOptions::default();
        options.cases = 4;
        options
    };
    let report = check_sink(&mut harness, &options)
        .await
        .unwrap_or_else(|v| panic!("{v}"));
    assert!(report.crashes > 0, "{report:?}");
    eprintln!("{report:?}");
}
