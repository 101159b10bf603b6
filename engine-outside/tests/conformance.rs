//! The engine's sink through pgcdc's sink conformance kit (`cdc_core::conformance`).

use std::path::PathBuf;

use async_trait::async_trait;
use cdc_core::conformance::{DurableRow, KitOptions, SinkHarness, check_sink};
use cdc_core::{Result, TableName};
use engine_outside::EngineSink;

struct Harness {
    dir: tempfile::TempDir,
    case: u32,
}

impl Harness {
    fn path(&self) -> PathBuf {
        self.dir.path().join(format!("engine-{}.json", self.case))
    }
}

#[async_trait]
impl SinkHarness for Harness {
    type Sink = EngineSink;

    async fn reset(&mut self) -> Result<()> {
        self.case += 1;
        Ok(())
    }

    fn sink(&mut self) -> Result<EngineSink> {
        Ok(EngineSink::new(self.path()))
    }

    async fn durable_rows(&mut self) -> Result<Vec<DurableRow>> {
        let saved = EngineSink::read(&self.path())?;
        let mut rows = Vec::new();
        for (table, content) in saved.tables.0 {
            let table =
                TableName::parse(&table).map_err(|e| cdc_core::Error::sink(e.to_string()))?;
            for (key, row) in content {
                let number = |text: Option<&String>| -> i64 {
                    text.and_then(|t| t.parse().ok()).expect("a number")
                };
                rows.push(DurableRow {
                    table: table.clone(),
                    id: number(Some(&key)),
                    seq: number(row.get("seq").and_then(Option::as_ref)),
                });
            }
        }
        Ok(rows)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_sink_keeps_the_contract() {
    let mut harness = Harness {
        dir: tempfile::tempdir().expect("a temporary directory"),
        case: 0,
    };
    let report = check_sink(&mut harness, &KitOptions::default())
        .await
        .unwrap_or_else(|violation| panic!("{violation}"));
    assert!(report.crashes > 0, "{report:?}");
}
